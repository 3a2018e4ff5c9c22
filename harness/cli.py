"""The ``diageval`` command line. Each command is a thin shell over a plain function elsewhere.

Size: one click command per subcommand, each a few lines of option parsing and error translation; the
whole CLI in one file keeps ``--help`` and the commands' wiring readable side by side.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from diageval import __version__
from diageval.errors import EXIT_INTERRUPTED, EXIT_USAGE, DiagevalError
from diageval.hosting import DEFAULT_TIMEOUT_S
from diageval.inert import inert

CASES_OPTION = click.option(
    "--cases",
    "cases_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Case folder (default: the built-in corpus, or $DIAGEVAL_CASES).",
)


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """diageval's version, and the taxonomy version and case-set hash of the corpus it would run."""
    if not value or ctx.resilient_parsing:
        return
    from diageval.cases.load import CaseLoadError, load_case_set
    from diageval.paths import default_cases_dir

    click.echo(f"diageval {__version__}")
    try:
        case_set = load_case_set()
        click.echo(f"corpus {default_cases_dir()}: {len(case_set.cases)} cases, case set "
                   f"{case_set.hash[:12]}, taxonomy {case_set.taxonomy.version}")
    except (CaseLoadError, OSError) as exc:
        click.echo(f"corpus {default_cases_dir()}: unreadable ({str(exc).splitlines()[0]})")
    ctx.exit()


class _Main(click.Group):
    """The one place an error becomes an exit code: a :class:`~diageval.errors.DiagevalError` prints its
    message alone and exits with its ``exit_code``; Ctrl-C exits 130. Anything else keeps its traceback
    (a bug in diageval). Every error message is made inert (:func:`diageval.inert.inert`): it may quote a
    diagnoser's words (its exception, its stderr's tail)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except DiagevalError as err:
            click.echo(f"Error: {inert(str(err))}", err=True)
            ctx.exit(err.exit_code)
        except click.ClickException as err:  # click prints it: made inert here, once for every command
            err.message = inert(err.message)
            raise
        except KeyboardInterrupt:
            ctx.exit(EXIT_INTERRUPTED)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version, and the case-set hash and taxonomy version of the built-in corpus.")
def main() -> None:
    """Measure whether automated performance diagnosers are right."""


# --- taxonomy and schemas -------------------------------------------------------------------------


@main.command("taxonomy")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@CASES_OPTION
def taxonomy_cmd(as_json: bool, cases_dir: Path | None) -> None:
    """Print the taxonomy of causes and symptoms."""
    from diageval.cases.taxonomy import load_taxonomy
    from diageval.paths import default_taxonomy_path

    path = default_taxonomy_path(cases_dir)
    tax = load_taxonomy(path)
    if as_json:
        click.echo(tax.model_dump_json(indent=2))
        return
    click.echo(f"taxonomy {tax.version} ({path})")
    for kind in ("cause", "symptom"):
        click.echo(f"\n{kind}s:")
        for e in tax.entries:
            if e.kind != kind:
                continue
            click.echo(f"  {e.id}")
            click.echo(f"      {e.definition}")
            click.echo(f"      evidence: {e.evidence}")
            if e.symptoms:
                click.echo(f"      symptoms: {', '.join(e.symptoms)}")


SCHEMAS = {
    "case": "diageval.cases.model:Case",
    "diagnosis": "diageval.diagnosis:Diagnosis",
    "bundle": "diageval.bundle.model:BundleManifest",
    "taxonomy": "diageval.cases.taxonomy:Taxonomy",
}


@main.command("schema")
@click.argument("what", type=click.Choice(sorted(SCHEMAS)))
def schema_cmd(what: str) -> None:
    """Print the JSON Schema of a file diageval reads or writes."""
    import importlib

    module, _, attr = SCHEMAS[what].partition(":")
    model = getattr(importlib.import_module(module), attr)
    click.echo(json.dumps(model.model_json_schema(), indent=2))


# --- cases ----------------------------------------------------------------------------------------


@main.group("cases")
def cases_group() -> None:
    """List and validate labeled cases."""


@cases_group.command("validate")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--taxonomy", "taxonomy_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Taxonomy file (default: the built-in one).")
def cases_validate_cmd(paths: tuple[Path, ...], taxonomy_path: Path | None) -> None:
    """Validate case files or folders (default: the built-in corpus). Exit 1 if any is bad."""
    from diageval.cases.load import find_case_files, validate_case_files
    from diageval.cases.taxonomy import load_taxonomy
    from diageval.paths import default_cases_dir

    targets = list(paths) or [default_cases_dir()]
    missing = [p for p in targets if not p.exists()]
    if missing:
        raise click.ClickException(f"no such file or folder: {', '.join(map(str, missing))}")
    taxonomy = load_taxonomy(taxonomy_path)
    files = find_case_files(targets)
    loaded, problems = validate_case_files(targets, taxonomy)
    for p in problems:
        click.echo(str(p), err=True)
    bad_files = {p.file for p in problems}
    click.echo(f"{len(files)} file(s): {len(files) - len(bad_files)} valid, {len(bad_files)} invalid")
    if problems:
        sys.exit(1)


@cases_group.command("list")
@CASES_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print as JSON lines.")
@click.option("--data", "data_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder with recorded cases' trace files (default: as `diageval run`).")
def cases_list_cmd(cases_dir: Path | None, as_json: bool, data_dir: Path | None) -> None:
    """List the cases: id, title, tags, expect, requires; name the recorded cases whose traces are absent."""
    from diageval.cases.load import CaseLoadError, load_case_set
    from diageval.paths import data_dirs
    from diageval.recording import fetch_command, unavailable_cases

    try:
        case_set = load_case_set(cases_dir)
    except CaseLoadError as err:
        raise click.ClickException(f"the corpus has invalid cases (run `diageval cases validate`):\n{err}")
    absent = set(unavailable_cases(case_set.cases, data_dirs(data_dir)))
    rows = [
        {
            "id": lc.case.id,
            "title": lc.case.title,
            "tags": ",".join(lc.case.tags),
            "expect": lc.case.labels.expect,
            "requires": ("data folder" + (" (absent)" if lc.case.id in absent else "") if lc.case.recorded_files()
                         else lc.case.requires.device)
            + (f" x{lc.case.world_size} ranks" if lc.case.world_size > 1 else ""),
        }
        for lc in case_set.cases
    ]
    if as_json:
        for r in rows:
            click.echo(json.dumps(r))
        return
    click.echo(_table(rows, ["id", "expect", "requires", "tags", "title"]))
    click.echo(f"\n{len(rows)} cases, case-set hash {case_set.hash[:12]}")
    if absent:
        click.echo(f"{len(absent)} recorded case(s) whose traces are not on this machine (requires: data folder "
                   f"(absent)); get them with `{fetch_command(data=data_dir, cases=cases_dir)}`")


def _table(rows: list[dict], columns: list[str], width: int | None = None) -> str:
    """Rows as aligned columns. ``width``: the most characters a line may have; the widest column gives a
    character at a time (to no less than its header) and a cell longer than its column ends in "…"."""
    widths = {c: max([len(c)] + [len(str(r.get(c, ""))) for r in rows]) for c in columns}
    while width is not None and sum(widths.values()) + 2 * (len(columns) - 1) > width:
        widest = max(columns, key=lambda c: widths[c] - len(c))
        if widths[widest] <= len(widest):
            break
        widths[widest] -= 1

    def cell(r: dict, c: str) -> str:
        text = str(r.get(c, ""))
        return (text if len(text) <= widths[c] else text[: widths[c] - 1] + "…").ljust(widths[c])

    lines = ["  ".join(c.ljust(widths[c]) for c in columns), "  ".join("-" * widths[c] for c in columns)]
    lines += ["  ".join(cell(r, c) for c in columns) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


# --- bundles: bring your own traces ----------------------------------------------------------------


@main.group("bundle")
def bundle_group() -> None:
    """Work with evidence bundles."""


@bundle_group.command("import")
@click.argument("traces", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path),
              help="New bundle folder to create (must not exist, or be empty).")
@click.option("--max-trace-gib", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Refuse a trace that decompresses to more JSON than this many GiB (default 4: a gzip bomb).")
@click.option("--max-world-size", type=click.IntRange(min=1), default=None,
              help="Refuse a job with more ranks than this (default 2^20; ranks come from the traces and file names).")
@click.option("--no-repair", is_flag=True, default=False,
              help="Import every file as given: do not split a file that holds several ranks nor drop duplicated "
                   "events (what is found is still printed and recorded in import_report.json).")
def bundle_import_cmd(traces: tuple[Path, ...], out_dir: Path, max_trace_gib: float | None,
                      max_world_size: int | None, no_repair: bool) -> None:
    """Wrap existing torch.profiler traces (one file per rank; a folder = all *.json[.gz] in it) into a bundle.

    A trace that holds several ranks is split into one per rank, events duplicated by a restarted profiler are
    dropped, events stamped ts 0 are counted; one line per repair is printed (docs/importing.md)."""
    from diageval.bundle.importer import (
        MAX_TRACE_BYTES,
        MAX_WORLD_SIZE,
        TraceImportError,
        describe_import,
        import_traces,
    )

    try:
        bundle_dir = import_traces(
            list(traces), out_dir,
            max_trace_bytes=int(max_trace_gib * (1 << 30)) if max_trace_gib else MAX_TRACE_BYTES,
            max_world_size=max_world_size or MAX_WORLD_SIZE,
            repair=not no_repair,
        )
    except TraceImportError as err:
        raise click.ClickException(str(err))
    click.echo(describe_import(bundle_dir))


# --- trace measurements ---------------------------------------------------------------------------


@main.group("trace")
def trace_group() -> None:
    """Measure traces."""


@trace_group.command("stats")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--compare", "compare", is_flag=True, help="Two traces (or bundles): their figures side by side.")
@click.option("--json", "as_json", is_flag=True, help="Every per-step figure as JSON.")
def trace_stats_cmd(paths: tuple[Path, ...], compare: bool, as_json: bool) -> None:
    """Per-step device, launch, blocking-call, data-wait and communication figures of a trace or bundle."""
    from diageval.bundle.importer import TraceImportError, trace_files_of
    from diageval.bundle.trace_stats import trace_stats
    from diageval.bundle.trace_stats_table import format_compare, format_table
    from diageval.bundle.trace_stream import TraceFormatError

    if compare and len(paths) != 2:
        raise click.UsageError(f"--compare takes exactly two traces or bundles, got {len(paths)}")
    try:
        groups = [[trace_stats(f) for f in trace_files_of(p)] for p in paths]
    except (TraceImportError, TraceFormatError) as err:
        raise click.ClickException(str(err))
    if as_json:
        click.echo(json.dumps([[s.model_dump(mode="json") for s in g] for g in groups], indent=1))
    elif compare:
        a, b = groups
        for n, (sa, sb) in enumerate(zip(a, b)):
            click.echo(("\n" if n else "") + format_compare(sa, sb))
        if len(a) != len(b):
            click.echo(f"(A has {len(a)} trace(s), B {len(b)}: only the first {min(len(a), len(b))} compared)")
    else:
        click.echo("\n\n".join(format_table(s) for g in groups for s in g))


# --- real traces of recorded cases (recording/fetch.py) --------------------------------------------


@main.group("data")
def data_group() -> None:
    """The real traces recorded cases are labeled from (never shipped: fetched from their public source)."""


@data_group.command("fetch")
@click.argument("case_ids", nargs=-1)
@CASES_OPTION
@click.option("--data", "data_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder to write the trace files to (default: $DIAGEVAL_DATA, else the user cache folder).")
@click.option("--mirror", default=None, metavar="URL",
              help="Download from URL/{repository}/{commit}/{path} instead of GitHub (default: $DIAGEVAL_DATA_MIRROR).")
@click.option("--retries", type=click.IntRange(min=0), default=3, show_default=True,
              help="Tries again after a failed download or a checksum mismatch.")
def data_fetch_cmd(case_ids: tuple[str, ...], cases_dir: Path | None, data_dir: Path | None, mirror: str | None,
                   retries: int) -> None:
    """Download the trace files of recorded cases CASE... (default: every recorded case), each checked by sha256;
    files already present with the right checksum are skipped. Exit 1 if any file could not be fetched."""
    from diageval.cases.load import CaseLoadError, load_case_set
    from diageval.paths import data_dir as fetch_dir
    from diageval.paths import data_dirs
    from diageval.progress import Progress
    from diageval.recording import FetchError, default_mirror, fetch_files, plan_fetch
    from diageval.run.pipeline import sigterm_as_interrupt  # SIGTERM removes the temporary file as Ctrl-C does

    try:
        case_set = load_case_set(cases_dir)
        planned = plan_fetch(case_set.cases, case_ids, mirror=mirror or default_mirror())
    except CaseLoadError as err:
        raise click.ClickException(f"the corpus has invalid cases (run `diageval cases validate`):\n{err}")
    except FetchError as err:
        raise click.ClickException(str(err))
    dest = fetch_dir(data_dir)
    click.echo(f"{len(planned)} trace file(s) of recorded cases into {dest}", err=True)
    with Progress() as progress, sigterm_as_interrupt():
        results = fetch_files(planned, dest, search=data_dirs(data_dir)[1:], retries=retries, progress=progress)
    counts = {s: sum(r.status == s for r in results) for s in ("downloaded", "present", "failed")}
    size = sum(r.size or 0 for r in results if r.status == "downloaded")
    click.echo(f"{counts['downloaded']} downloaded ({size / 1e6:.1f} MB), {counts['present']} already present, "
               f"{counts['failed']} failed; data folder {dest}")
    for r in results:
        if r.status == "failed":
            click.echo(f"error: {r.error}", err=True)
    if counts["failed"]:
        sys.exit(1)


# --- scoring and reports (scoring/, reports/) -----------------------------------------------------


@main.command("score")
@click.argument("run_dir", required=False, type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--case", "case_id", default=None, help="Score one diagnosis against this case of the corpus.")
@click.option("--diagnosis", "diagnosis_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Diagnosis JSON file to score (with --case).")
@CASES_OPTION
@click.option("--json", "as_json", is_flag=True, help="With --case: print the CaseResult as JSON.")
@click.option("--allow-missing", is_flag=True,
              help="With RUN_DIR: re-score a complete run whose results.jsonl lost lines (the missing cases are named); "
                   "without it such a run is refused and nothing is rewritten.")
@click.option("--max-diagnosis-mib", type=click.FloatRange(min=0, min_open=True), default=None,
              help="With --case: size the diagnosis file may have (default 16; never read past it).")
@click.option("--max-findings", type=click.IntRange(min=1), default=None,
              help="With --case: findings the diagnosis may hold (default 1000).")
def score_cmd(run_dir: Path | None, case_id: str | None, diagnosis_path: Path | None, cases_dir: Path | None,
              as_json: bool, allow_missing: bool, max_diagnosis_mib: float | None, max_findings: int | None) -> None:
    """Re-score a saved run (RUN_DIR), or score one diagnosis: --case ID --diagnosis FILE.json."""
    if run_dir is not None:
        if case_id or diagnosis_path:
            raise click.UsageError("give either RUN_DIR or --case with --diagnosis, not both")
        if max_diagnosis_mib is not None or max_findings is not None:
            raise click.UsageError("--max-diagnosis-mib and --max-findings go with --case; a run is re-read with its own limits")
        from diageval.reports.leaderboard import render_leaderboard
        from diageval.run.grade import RescoreError, rescore_run

        try:
            summary = rescore_run(run_dir, allow_missing=allow_missing,
                                  warn=lambda line: click.echo(f"warning: {inert(line)}", err=True))
        except RescoreError as err:
            raise click.ClickException(str(err))
        click.echo(inert(summary.model_dump_json(indent=2) if as_json else render_leaderboard([summary])), nl=not as_json)
        return
    if not (case_id and diagnosis_path):
        raise click.UsageError("give RUN_DIR, or --case ID together with --diagnosis FILE.json")
    if allow_missing:
        raise click.UsageError("--allow-missing goes with RUN_DIR")
    from diageval.cases.load import CaseLoadError
    from diageval.diagnosis import DEFAULT_LIMITS, DiagnosisLimits, DiagnosisParseError
    from diageval.run.grade import score_diagnosis_file
    from diageval.scoring.explain import format_case_result

    limits = DiagnosisLimits(
        max_bytes=DEFAULT_LIMITS.max_bytes if max_diagnosis_mib is None else int(max_diagnosis_mib * (1 << 20)),
        max_findings=max_findings or DEFAULT_LIMITS.max_findings,
    )
    try:
        result = score_diagnosis_file(case_id, diagnosis_path, cases_dir, limits)
    except KeyError as err:
        raise click.ClickException(err.args[0])
    except (CaseLoadError, DiagnosisParseError) as err:
        raise click.ClickException(str(err))
    click.echo(inert(result.model_dump_json(indent=2) if as_json else format_case_result(result)))


@main.command("report")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the markdown here.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write one self-contained HTML page here: plots, per-case drill-down, and the comparison "
                   "when two runs are given.")
def report_cmd(run_dirs: tuple[Path, ...], output: Path | None, html_path: Path | None) -> None:
    """Leaderboard (markdown) of runs made on the same case set; appended to $GITHUB_STEP_SUMMARY if set."""
    from diageval.reports.report import ReportError, report_runs

    try:
        click.echo(inert(report_runs(list(run_dirs), output=output)), nl=False)
        if html_path is not None:
            _write_html_report(list(run_dirs), html_path)
    except ReportError as err:
        raise click.ClickException(str(err))


def _write_html_report(run_dirs: list[Path], html_path: Path) -> None:
    from diageval.reports.html import write_html_report
    from diageval.reports.html_data import gather
    from diageval.reports.signal_value import gather_points, signal_value_html, split_by_tier

    full, tiered = split_by_tier(run_dirs)  # runs on a smaller evidence tier: the signal-value section only
    inputs = gather(full or tiered)  # the manifestation measurements come from the runs' results
    write_html_report(inputs, html_path, signal_value=signal_value_html(gather_points(run_dirs)) if tiered else "")
    click.echo(inert(f"wrote {html_path}"), err=True)


# --- recording and verification ------------------------------------------------------------------


@main.command("record")
@click.argument("case_ids", nargs=-1, required=True)
@CASES_OPTION
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Bundle cache folder (default: $DIAGEVAL_HOME/bundles or .diageval/bundles).")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--force", is_flag=True, help="Record again even when the cache has the bundle.")
def record_cmd(case_ids: tuple[str, ...], cases_dir: Path | None, out_dir: Path | None, device: str, force: bool) -> None:
    """Record cases live into evidence bundles (cached); print each bundle folder."""
    from diageval.cases.load import CaseLoadError
    from diageval.progress import Progress
    from diageval.recording import RecordingError, record_cases

    try:
        with Progress("stderr") as progress:
            recorded = record_cases(list(case_ids), cases_dir=cases_dir, device=device, force=force,
                                    cache_dir=out_dir, progress=progress)
        for case_id, folder, fresh in recorded:
            click.echo(f"{case_id}\t{folder}" + ("" if fresh else "\t(cached)"))
    except (CaseLoadError, KeyError, RecordingError) as err:
        raise click.ClickException(str(err).strip("'\""))


@main.command("verify")
@click.argument("case_ids", nargs=-1)
@CASES_OPTION
@click.option("--repeats", type=click.IntRange(1, 50), default=None,
              help="Test exactly this many repeat pairs (twin, case) instead of the sequential test (pairs added "
                   "until it decides, up to its cap).")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--force", is_flag=True, help="Record every repeat again instead of reusing the cache.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per case.")
def verify_cmd(case_ids: tuple[str, ...], cases_dir: Path | None, repeats: int | None, device: str, force: bool,
               as_json: bool) -> None:
    """Check that positive cases manifest against their healthy twins (no ids = all). Exit 1 if any did not."""
    from diageval.cases.load import CaseLoadError
    from diageval.progress import Progress
    from diageval.recording import (
        RUN_TO_RUN_MARGIN,
        VERIFY_COLUMNS,
        RecordingError,
        narrow_margin,
        verification_row,
        verify_cases,
    )

    try:
        with Progress("stderr") as progress:
            results = verify_cases(list(case_ids), cases_dir=cases_dir, repeats=repeats, device=device, force=force,
                                   progress=progress)
    except (CaseLoadError, KeyError, RecordingError) as err:
        raise click.ClickException(str(err).strip("'\""))
    if as_json:
        for case_id, v in results:
            click.echo(json.dumps({"case": case_id, **v.model_dump()}))
    else:
        click.echo(_table([verification_row(c, v) for c, v in results], VERIFY_COLUMNS))
    narrow = [c for c, v in results if narrow_margin(v)]
    if narrow:
        click.echo(f"manifested by less than the run-to-run spread (ratio under {RUN_TO_RUN_MARGIN} x min_ratio), so "
                   f"some future verify will fail; raise the severity or lower min_ratio: {', '.join(narrow)}", err=True)
    for case_id, v in results:
        for problem in v.label_problems or []:
            click.echo(f"{case_id}: label not supported by the evidence: {problem}", err=True)
    failed = [c for c, v in results if not v.manifested]
    if failed:
        click.echo(f"did not manifest: {', '.join(failed)}", err=True)
        sys.exit(1)


# --- diagnosers and runs (diagnosers/registry.py, harness/run.py) ---------------------------------


@main.group("diagnosers")
def diagnosers_group() -> None:
    """The diagnosers --diagnoser can name."""


LIST_WIDTH = 100
"""Columns `diageval diagnosers list` fits in: a terminal's usual 80-120, and a CI log's."""
KIND_WORDS = {
    "self-test": "reads the labels to check the harness; never ranked",
    "reference": "a baseline a diagnoser must beat (the harness's own list)",
    "in-job monitor": "runs inside the training job: `diageval run` records each case again with it installed",
    "network": "talks to a service (needs_network): runs only with --allow-network",
    "offline": "reads the evidence bundle alone, in a box without network",
}


def _kind(row: dict) -> str:
    """What a listed diagnoser is, from what the harness knows of it: its role in the harness's own table
    (self-test, reference), the in-job monitor registry, its declared ``needs_network``; else offline."""
    from diageval.recording import monitor_for_spec

    if row["self_test"]:
        return "self-test"
    if row["reference"]:
        return "reference"
    if monitor_for_spec(row["name"]) is not None:
        return "in-job monitor"
    return "network" if row.get("needs_network") else "offline"


def _listed() -> list[dict]:
    from diageval.hosting import HostPolicy, list_diagnosers

    return list_diagnosers(HostPolicy())  # listing constructs every diagnoser: in a box, like everything a diagnoser runs


@diagnosers_group.command("list")
def diagnosers_list_cmd() -> None:
    """Every registered diagnoser: its version, kind, origin, and whether it can run here (in 100 columns)."""
    rows = [
        {
            "name": inert(r["name"], newlines=False),
            "version": inert(r["version"] or "", newlines=False),
            "kind": _kind(r),
            "origin": inert(r["origin"], newlines=False),
            "status": inert(f"unavailable: {r['error']}" if r["error"] else "available", newlines=False),
        }
        for r in _listed()
    ]
    click.echo(_table(rows, ["name", "version", "kind", "origin", "status"], width=LIST_WIDTH))
    click.echo("\nWhat one can claim, its whole version and why it cannot run: `diageval diagnosers show NAME`.")
    click.echo("Also: --diagnoser package.module:ClassName, or --diagnoser 'cmd:PROGRAM {bundle} {out}'.")


@diagnosers_group.command("show")
@click.argument("name")
def diagnosers_show_cmd(name: str) -> None:
    """One registered diagnoser: its version, kind, origin, status and the causes it can claim."""
    import difflib

    listed = {r["name"]: r for r in _listed()}
    if name not in listed:
        close = difflib.get_close_matches(name, list(listed), n=1)
        raise click.ClickException(f"no registered diagnoser {name!r}" + (f"; did you mean {close[0]}?" if close else "")
                                   + " (`diageval diagnosers list` names them all)")
    r = listed[name]
    kind = _kind(r)
    claims = r.get("claims")
    lines = [
        f"name     {r['name']}",
        f"version  {r['version'] or ''}",
        f"kind     {kind}: {KIND_WORDS[kind]}",
        f"origin   {r['origin']}",
        f"status   " + (f"unavailable: {r['error']}" if r["error"] else "available"),
        "claims   " + ("not declared: it may claim any cause" if claims is None else
                       f"{len(claims)} cause(s) it can claim" if claims else "none: it claims no cause"),
    ]
    click.echo("\n".join(inert(line, newlines=False) for line in lines))
    for c in claims or []:
        click.echo(f"  {inert(c, newlines=False)}")


DIAGNOSER_OPTION = click.option(
    "--diagnoser", "-d", "spec", required=True,
    help="A name from `diageval diagnosers list`, package.module:ClassName, or 'cmd:COMMAND {bundle} {out}'.",
)


def host_options(f):
    """The options that make a :class:`~diageval.hosting.HostPolicy`, shared by ``run`` and ``diagnose``."""
    options = [
        click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=DEFAULT_TIMEOUT_S,
                     show_default=True, help="Seconds the diagnoser may take per case."),
        click.option("--allow-network", is_flag=True,
                     help="Let the sandboxed diagnoser use the network (one that calls a model endpoint)."),
        click.option("--no-sandbox", is_flag=True,
                     help="Run the diagnoser without a sandbox, where none can start: it can then read everything you "
                          "can, the labels included, so the run says isolation: none and is never ranked."),
        click.option("--pass-env", "pass_env", multiple=True, metavar="NAME",
                     help="Pass this environment variable to the diagnoser (repeatable). Only a short allowlist "
                          "(PATH, locale, thread counts) passes otherwise: tokens and keys never do unless named."),
        click.option("--max-findings", type=click.IntRange(min=1), default=1000, show_default=True,
                     help="Findings a diagnosis may hold (more: invalid_output)."),
        click.option("--max-diagnosis-mib", type=click.FloatRange(min=0, min_open=True), default=16.0, show_default=True,
                     help="Size a diagnosis may have (more: invalid_output)."),
        click.option("--box-memory-mib", type=click.IntRange(min=64), default=8192, show_default=True,
                     help="Memory the diagnoser's box may use, its /tmp included (over: the case ends diagnoser_error)."),
        click.option("--box-processes", type=click.IntRange(min=8), default=512, show_default=True,
                     help="Processes and threads the box may run at once (over: the case ends diagnoser_error)."),
        click.option("--box-disk-mib", type=click.IntRange(min=1), default=256, show_default=True,
                     help="What the box may write to its output folder (over: diagnoser_error); its /tmp holds 4x this."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _host_policy(*, timeout: float, allow_network: bool, no_sandbox: bool, pass_env: tuple[str, ...],
                 max_findings: int, max_diagnosis_mib: float, box_memory_mib: int, box_processes: int,
                 box_disk_mib: int, cases_dir: Path | None = None):
    from pydantic import ValidationError

    from diageval.diagnosis import DiagnosisLimits
    from diageval.hosting import BoxLimits, HostPolicy

    try:
        return HostPolicy(
            sandbox=not no_sandbox, allow_network=allow_network, timeout_s=timeout, pass_env=pass_env,
            output=DiagnosisLimits(max_bytes=int(max_diagnosis_mib * (1 << 20)), max_findings=max_findings),
            box=BoxLimits(max_processes=box_processes, max_memory_mib=box_memory_mib, max_out_mib=box_disk_mib,
                          max_tmp_mib=4 * box_disk_mib),
            cases_dir=cases_dir,
        )
    except ValidationError as err:
        raise click.BadParameter(err.errors(include_url=False)[0]["msg"], param_hint="--pass-env")


@main.command("diagnose")
@DIAGNOSER_OPTION
@click.argument("bundle_dir", type=click.Path(file_okay=False, exists=True, path_type=Path))
@CASES_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the diagnosis as JSON.")
@host_options
def diagnose_cmd(spec: str, bundle_dir: Path, cases_dir: Path | None, as_json: bool, **host: object) -> None:
    """Run one diagnoser on one bundle folder and print its findings (no scoring)."""
    from diageval.bundle.model import BundleError
    from diageval.run.single import diagnose_bundle, format_diagnosis

    try:
        attempt = diagnose_bundle(spec, bundle_dir, _host_policy(cases_dir=cases_dir, **host))  # type: ignore[arg-type]
    except BundleError as err:
        raise click.ClickException(str(err))
    if attempt.diagnosis is None:
        raise click.ClickException(f"{attempt.status}: {attempt.error}")
    click.echo(inert(attempt.diagnosis.model_dump_json(indent=2) if as_json else format_diagnosis(attempt.diagnosis)))


@main.command("run")
@DIAGNOSER_OPTION
@CASES_OPTION
@click.option("--case", "case_ids", multiple=True, help="Only this case (repeatable).")
@click.option("--tag", "tags", multiple=True, help="Only cases with this tag (repeatable: any of them).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for run folders (default: ./runs).")
@click.option("--run-id", default=None, help="Run folder name (default: <diagnoser>-<case-set hash>, with the tier "
                                            "before the hash when --evidence is not full; rerunning resumes).")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=1, show_default=True,
              help="Cases diagnosed at once (evidence is always prepared one case at a time).")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--executor", default="local", show_default=True, metavar="local|ray[:ADDRESS]",
              help="Where diagnoses run: here, or on the workers of a Ray cluster (ray: $RAY_ADDRESS or a local Ray; "
                   "ray:ADDRESS joins that one; every node needs diageval and bubblewrap; `pip install 'diageval[ray]'`). "
                   "Evidence is recorded here either way; --jobs is the number of slots.")
@click.option("--data", "data_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder with recorded cases' trace files (default: $DIAGEVAL_DATA, else the user cache folder "
                   "`diageval data fetch` fills, then ../shared/real-traces).")
@click.option("--evidence", type=click.Choice(["steps", "metrics", "one-rank", "traces", "full"]), default="full",
              show_default=True, help="Evidence tier the diagnoser gets (diageval.cases.tiers: step log; + host metrics; "
                                      "+ rank 0's trace; + every rank's trace and logs; + Flight Recorder dumps). Labels "
                                      "the tier cannot show are scored as abstain-expected.")
@click.option("--repeats", "repeats", type=click.IntRange(1, 20), default=1, show_default=True,
              help="Diagnose each case K times (its evidence is prepared once): the summary and the board add skill "
                   "over the repeats and each case's verdict, stable, flaky or catastrophic (docs/scoring.md). "
                   "Repeats 2..K are kept in the run folder's repeats/<k>/.")
@host_options
def run_cmd(spec: str, cases_dir: Path | None, case_ids: tuple[str, ...], tags: tuple[str, ...], out_dir: Path | None,
            run_id: str | None, jobs: int, device: str, executor: str, data_dir: Path | None, evidence: str,
            repeats: int, **host: object) -> None:
    """Run a diagnoser on the cases (recording evidence as needed), score it, and save runs/<run_id>/."""
    from diageval.cases.load import CaseLoadError, load_case_set
    from diageval.executors import ExecutorSpec
    from diageval.recording import RecordingPolicy, fetch_command
    from diageval.reports.run_outcome import format_run_outcome
    from diageval.run.pipeline import RunOptions, run_diagnoser, sigterm_as_interrupt

    try:
        executor_spec = ExecutorSpec.parse(executor)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--executor")
    try:
        case_set = load_case_set(cases_dir)
    except CaseLoadError as err:
        raise click.ClickException(f"the corpus has invalid cases (run `diageval cases validate`):\n{err}")
    options = RunOptions(case_ids=case_ids, tags=tags, cases_dir=cases_dir, out_dir=out_dir, run_id=run_id, jobs=jobs,
                         evidence=evidence, executor=executor_spec, repeats=repeats)  # type: ignore[arg-type]
    with sigterm_as_interrupt():
        outcome = run_diagnoser(spec, case_set, options, _host_policy(**host),  # type: ignore[arg-type]
                                recording=RecordingPolicy(device=device, data_dir=data_dir))  # type: ignore[arg-type]
    click.echo(inert(format_run_outcome(outcome, fetch_command=fetch_command(data=data_dir, cases=cases_dir))))


# --- comparing two runs (scoring/compare.py, reports/compare_report.py) ---------------------------


@main.command("compare")
@click.argument("run_a", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.argument("run_b", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option("--n-boot", type=click.IntRange(min=0), default=1000, show_default=True,
              help="Bootstrap resamples of cases (0: point values only).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the resamples (same seed, same intervals).")
@click.option("--common-cases", is_flag=True,
              help="When the runs hold results for different cases, compare on those both hold (dropped ones are listed).")
@click.option("--fail-if-worse", "gate", multiple=True, metavar="METRIC",
              help="Exit 1 when B is worse than A on METRIC beyond the noise (the whole interval of B − A on the "
                   "worse side and the paired randomisation test at 2.5%); exit 2, saying why, when the gate cannot "
                   "fire (METRIC undefined, too few cases); repeatable; a metric name of summary.json. For CI: A = the "
                   "last release, B = this one.")
def compare_cmd(run_a: Path, run_b: Path, as_json: bool, n_boot: int, seed: int, common_cases: bool,
                gate: tuple[str, ...]) -> None:
    """Paired bootstrap comparison of two runs on the same case set: every metric, B − A with its 95% interval."""
    from diageval.reports.compare_report import render_comparison
    from diageval.run.store import RunReadError, RunStore
    from diageval.scoring.compare import CompareError, compare_runs, gate_blockers, regressions
    from diageval.scoring.metrics import BETTER

    unknown = [m for m in gate if m not in BETTER]
    if unknown:
        raise click.BadParameter(f"{', '.join(unknown)}; expected one of {', '.join(BETTER)}", param_hint="--fail-if-worse")
    try:
        runs = RunStore(run_a).load(), RunStore(run_b).load()
        comparison = compare_runs(*runs, n_boot=n_boot, seed=seed, common_cases=common_cases)
    except (CompareError, RunReadError) as err:
        raise click.ClickException(str(err))
    click.echo(inert(comparison.model_dump_json(indent=2) if as_json else render_comparison(comparison)), nl=as_json)
    worse = regressions(comparison, gate)
    for metric in worse:
        m = comparison.metrics[metric]
        click.echo(f"B is worse than A on {metric}: B − A = {m.difference:+.3g} [{m.ci[0]:+.3g}, {m.ci[1]:+.3g}]", err=True)
    if worse:
        sys.exit(1)
    blind = gate_blockers(comparison, gate)
    for metric, why in blind.items():
        click.echo(f"the gate on {metric} cannot fire: {why}", err=True)
    if blind:
        sys.exit(EXIT_USAGE)


if __name__ == "__main__":
    main()
