"""Cheating diagnosers (tests/cheaters.py), one per route to the labels, each run through the real
pipeline on the built-in corpus: each must score exactly like ``null`` (recall 0, no credited claim).

The evidence is synthetic (recording 16 cases takes minutes) but laid out exactly like the real cache:
``$DIAGEVAL_HOME/bundles/evidence/<cache key>/`` beside ``<cache key>.truth.json`` and ``index.jsonl``,
with the keys the real ``cache_key`` computes, so a cheater that reaches the cache finds what it would
find in real use. Every route is also run once outside the harness, the way the old harness exposed
things (the cached bundle's own path, the case id in ``{out}``, ``$DIAGEVAL_HOME`` in the environment):
there each cheater does find its case, so a cheater that scores nothing in the harness scores nothing
because the harness stopped it, not because it is broken.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from run_fakes import fake_verification, write_bundle

from diageval.cases.load import load_case_set
from diageval.fileio import append_jsonl
from diageval.recording.cache import bundles_root, cache_key, write_truth
from diageval.recording.policy import PreparedEvidence, RecordingPolicy
from diageval.recording.truth import TruthRecord
from diageval.run.pipeline import diagnosis_order
from run_fakes import run_with
from diageval.hosting.sandbox import probe
from diageval.run.store import RunStore
from locations import TESTS

pytestmark = pytest.mark.skipif(probe() is not None, reason=f"no sandbox can start here: {probe()}")

HERE = TESTS  # the cheaters and fakes beside locations.py


class CacheEvidence:
    """Synthetic bundles stored like the real cache, with truth files and the index."""

    def __init__(self, home: Path):
        self.cache = home / "bundles"

    def __call__(self, loaded, policy: RecordingPolicy = RecordingPolicy()) -> PreparedEvidence:
        case = loaded.case
        key = cache_key(case, "cpu")
        folder = bundles_root(self.cache) / key
        if policy.force or not (folder / "bundle.json").is_file():
            shutil.rmtree(folder, ignore_errors=True)
            write_bundle(folder, os.urandom(16).hex(), trace_text=os.urandom(8).hex())  # distinct, like real ones
            write_truth(self.cache, TruthRecord(case_id=case.id, key=key, repeat=0, recorded=datetime.now(timezone.utc)))
            append_jsonl(self.cache / "index.jsonl", {"case_id": case.id, "role": "case", "key": key, "repeat": 0})
        return _prepared(case, folder)


def _prepared(case, folder: Path) -> PreparedEvidence:
    """What prepare_evidence hands the run for ``case``'s bundle ``folder``: verified when positive, and for a
    regression or fleet the value words its bundle shows (issue 39)."""
    bundle_id = json.loads((folder / "bundle.json").read_text())["bundle_id"]
    verification = fake_verification(True) if case.labels.expect == "diagnose" else None
    prepared = PreparedEvidence(case_id=case.id, bundle_dir=folder, bundle_id=bundle_id, manifest_sha256="0" * 64,
                                verification=verification)
    if case.fleet is not None:
        from diageval.recording.fleet import shown_values_of

        prepared = prepared.model_copy(update={"shown_values": shown_values_of(folder)})
    return prepared


@pytest.fixture(scope="module")
def arena(tmp_path_factory):
    root = tmp_path_factory.mktemp("arena")
    home = root / "home"
    saved = {k: os.environ.get(k) for k in ("DIAGEVAL_HOME", "CHEATER_SCOPE", "CHEATER_MARKER")}
    os.environ.update(DIAGEVAL_HOME=str(home), CHEATER_SCOPE=str(root), CHEATER_MARKER=f"cheater-daemon-{os.getpid()}")
    case_set = load_case_set()
    cheats = root / "cheats"
    cheats.mkdir()
    shutil.copy(HERE / "cheaters.py", cheats / "cheaters.py")
    labels = {
        lc.case.id: {"causes": [c.model_dump(mode="json") for c in lc.case.labels.causes],
                     "spec": lc.case.model_dump(mode="json")}
        for lc in case_set.cases
    }
    (cheats / "labels.json").write_text(json.dumps(labels))
    # A real cheater carries the public labels in its own code (a box shows only the file a spec names),
    # set before a program's main() runs (appended after it, a program in a box claimed nothing it found):
    script = cheats / "cheaters.py"
    main_call = '\nif __name__ == "__main__":'
    assert script.read_text().count(main_call) == 1
    script.write_text(script.read_text().replace(main_call, f"\nLABELS = json.loads({json.dumps(labels)!r})\n{main_call}"))
    evidence = CacheEvidence(home)
    sys.path.insert(0, str(cheats))
    try:
        yield {"root": root, "case_set": case_set, "evidence": evidence, "cheats": cheats, "home": home}
    finally:
        sys.path.remove(str(cheats))
        sys.modules.pop("cheaters", None)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# A few cases, not all 16, to stay fast: two positives with different causes and ranks, a healthy control,
# a confounder and an abstain case. Every cheater sees each kind.
CASES = ["straggler-rank1", "starved-loader-mlp", "mlp-ddp-healthy", "slow-first-step", "straggler-trace-missing"]


def run(arena, spec: str, run_id: str, **kw):
    kw.setdefault("case_ids", CASES)
    kw.setdefault("evidence_fn", arena["evidence"])
    kw.setdefault("pass_env", ("CHEATER_SCOPE", "CHEATER_MARKER"))
    return run_with(spec, arena["case_set"], cases_dir=None, out_dir=arena["root"] / "runs", run_id=run_id,
                    timeout=60, progress=None, **kw)


def assert_scores_like_null(outcome):
    results = RunStore(outcome.run_dir).read_results()
    assert outcome.info.isolation == "bwrap"
    assert {r.status for r in results} <= {"ok", "abstained"}, [(r.case_id, r.status, r.error) for r in results]
    credited = [(r.case_id, v.category) for r in results for v in r.verdicts if v.credited]
    assert credited == []
    assert outcome.summary.metrics.recall.value == 0.0


@pytest.fixture(scope="module")
def null_run(arena):
    """An earlier run whose results.jsonl a cheater may go looking for."""
    return run(arena, "null", "null-first")


ROUTES = ["walk_up", "out_path", "run_folder", "history", "proc", "anywhere"]


@pytest.mark.parametrize("route", ROUTES)
def test_program_routes_score_like_null(arena, null_run, route):
    spec = f"cmd:python {arena['cheats'] / 'cheaters.py'} {route} {{bundle}} {{out}}"
    assert_scores_like_null(run(arena, spec, f"cheat-{route}"))


@pytest.mark.parametrize("route", ["walk_up", "out_path", "proc"])
def test_program_routes_find_the_case_where_nothing_stops_them(arena, null_run, route, tmp_path):
    """The positive control: the cached bundle's own path, the old run layout for {out}, and
    $DIAGEVAL_HOME in the environment, as the harness before issue 8 handed them out."""
    lc = arena["case_set"].get("straggler-rank1")
    bundle = arena["evidence"](lc).bundle_dir
    out = tmp_path / "runs" / "r" / "cases" / lc.case.id / "output.json"
    out.parent.mkdir(parents=True)
    subprocess.run([sys.executable, str(arena["cheats"] / "cheaters.py"), route, str(bundle), str(out)], check=True,
                   env={**os.environ, "DIAGEVAL_HOME": str(arena["home"])}, cwd=arena["home"])
    claimed = json.loads(out.read_text())["findings"]
    assert [f["category"] for f in claimed] == ["compute.straggler_rank"]


@pytest.mark.parametrize("cls", ["StackCheater", "CacheKeyCheater", "ProcCheater", "ReferenceCheater"])
def test_in_process_cheaters_score_like_null(arena, null_run, cls):
    outcome = run(arena, f"cheaters:{cls}", f"cheat-{cls}")
    assert_scores_like_null(outcome)
    assert outcome.info.diagnoser.reference is False  # saying so makes no reference row
    assert "cheaters" not in sys.modules or not getattr(__import__("diageval.scoring.verdicts").scoring.verdicts, "CHEATED", False)


def test_the_harness_never_imports_an_outside_diagnoser(arena, null_run, monkeypatch):
    import diageval.scoring.verdicts as verdicts

    # a test that imports the cheaters itself (to show they work unboxed) leaves their import-time patch behind
    monkeypatch.delitem(sys.modules, "cheaters", raising=False)
    monkeypatch.delattr(verdicts, "CHEATED", raising=False)
    run(arena, "cheaters:StackCheater", "cheat-import")
    assert "cheaters" not in sys.modules
    assert not hasattr(verdicts, "CHEATED")


@pytest.fixture
def cheaters_here(arena, monkeypatch):
    """The cheaters module imported into this process (to show what a cheater finds where nothing stops it), and
    forgotten afterwards with the patch its import makes to the harness, so that no later test sees either."""
    import importlib

    import diageval.scoring.verdicts as verdicts

    monkeypatch.delitem(sys.modules, "cheaters", raising=False)
    monkeypatch.setattr(verdicts, "CHEATED", False, raising=False)  # undone after: the attribute is gone again
    module = importlib.import_module("cheaters")
    yield module
    sys.modules.pop("cheaters", None)


def test_the_cache_key_cheater_finds_the_case_where_nothing_stops_it(arena, cheaters_here):
    from diageval.bundle.model import EvidenceBundle

    lc = arena["case_set"].get("starved-loader-mlp")
    bundle = EvidenceBundle.open(arena["evidence"](lc).bundle_dir)
    claimed = cheaters_here.CacheKeyCheater().diagnose(bundle)["findings"]
    assert [f["category"] for f in claimed] == ["input.dataloader_starvation"]


def test_the_order_cheater_hits_only_where_the_shuffled_order_meets_the_sorted_one(arena, null_run):
    """Counting one's calls names the case only if cases come in a known order. They come in a seeded
    shuffle (seed in run.json), so the cheater's hits are exactly the chance coincidences of that
    shuffle with sorted order, or guesses that name another case with the same cause (several cases
    share each cause): the same as any blind guess."""
    outcome = run(arena, "cheaters:OrderCheater", "cheat-order", seed=12345, case_ids=())  # the whole corpus
    assert outcome.info.seed == 12345
    ids = [lc.case.id for lc in arena["case_set"].cases]
    causes = {lc.case.id: {c.category for c in lc.case.labels.causes} for lc in arena["case_set"].cases}
    skipped = {s.case_id for s in outcome.info.skipped}  # CUDA-only cases on a CPU machine: never diagnosed
    order = diagnosis_order([cid for cid in ids if cid not in skipped], 12345)
    assert order != sorted(ids)
    coincide = {cid for cid, expected in zip(order, sorted(ids)) if cid == expected}
    results = RunStore(outcome.run_dir).read_results()
    credited = {r.case_id for r in results if any(v.credited for v in r.verdicts)}
    for cid in credited - coincide:
        diagnosis = json.loads((outcome.run_dir / "cases" / cid / "diagnosis.json").read_text())
        guessed = {f["summary"].removeprefix("cheated: ") for f in diagnosis["findings"]}
        assert len(guessed) == 1 and guessed != {cid}, (cid, guessed)
        assert causes[guessed.pop()] & causes[cid], cid  # a guess of another case that shares its cause


def test_tampering_changes_nothing_the_harness_keeps(arena, null_run):
    before = {p: p.read_bytes() for p in (null_run.run_dir).rglob("*") if p.is_file()}
    cached = {p: p.read_bytes() for p in (arena["home"]).rglob("*") if p.is_file() and "evidence" in p.parts}
    spec = f"cmd:python {arena['cheats'] / 'cheaters.py'} tamper {{bundle}} {{out}}"
    outcome = run(arena, spec, "cheat-tamper")
    assert_scores_like_null(outcome)
    assert {p: p.read_bytes() for p in before} == before
    assert {p: p.read_bytes() for p in cached} == cached
    from diageval.run.grade import rescore_run

    saved = (outcome.run_dir / "summary.json").read_text()
    assert rescore_run(outcome.run_dir).model_dump_json(indent=2) + "\n" == saved  # summary.json = a fresh score


def test_a_detached_process_ends_with_its_case(arena, null_run):
    spec = f"cmd:python {arena['cheats'] / 'cheaters.py'} daemon {{bundle}} {{out}}"
    outcome = run(arena, spec, "cheat-daemon", case_ids=["straggler-rank1", "mlp-ddp-healthy"])
    assert_scores_like_null(outcome)
    marker = os.environ["CHEATER_MARKER"].encode()
    time.sleep(0.5)
    alive = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            if marker in (d / "cmdline").read_bytes():
                alive.append(d.name)
        except OSError:
            pass
    assert alive == []



# --- issue 25: the harness's own log, whole folders, no sandbox ----------------------------------------


RUNNER = """
import sys
sys.path[:0] = [{tests!r}, {here!r}, {cheats!r}]
from pathlib import Path
from test_adversaries import CacheEvidence
from run_fakes import run_with
from diageval.cases.load import load_case_set
run_with({spec!r}, load_case_set(), case_ids={cases!r}, out_dir=Path({runs!r}), run_id={run_id!r}, timeout=60, seed=7,
         evidence_fn=CacheEvidence(Path({home!r})), progress="stderr")
"""


def _run_logged(arena, spec: str, run_id: str, log: Path) -> subprocess.CompletedProcess:
    """A run in its own process whose stderr (the progress lines, naming each case) goes to ``log``, as
    `diageval run ... 2> log` writes it."""
    script = RUNNER.format(tests=str(HERE), here=str(Path(__file__).resolve().parent), cheats=str(arena["cheats"]), spec=spec, cases=CASES, run_id=run_id,
                           runs=str(arena["root"] / "runs"), home=str(arena["home"]))
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "DIAGEVAL_HOME": str(arena["home"])}
    with open(log, "w") as fh:
        return subprocess.run([sys.executable, "-c", script], stderr=fh, stdout=subprocess.PIPE, text=True, env=env,
                              timeout=300)


def test_the_progress_log_cheater_finds_the_case_where_nothing_stops_it(arena, tmp_path):
    log = tmp_path / "run.log"
    log.write_text("evidence [1/2] mlp-ddp-healthy  ready\nevidence [2/2] straggler-rank1  ready\n")
    out = tmp_path / "output.json"
    (tmp_path / "case").mkdir()
    for expected in ("mlp-ddp-healthy", "straggler-rank1"):  # the counter lives beside the case folder
        subprocess.run([sys.executable, str(arena["cheats"] / "cheaters.py"), "log", str(tmp_path), str(out), str(log)],
                       check=True, cwd=tmp_path / "case")
        claimed = json.loads(out.read_text())["findings"]
        assert claimed == [] if expected == "mlp-ddp-healthy" else [f["category"] for f in claimed] == ["compute.straggler_rank"]


def test_the_progress_log_route_scores_like_null_or_is_refused(arena, null_run, tmp_path):
    """The harness's stderr as /proc/self/fd/2 is the box's own; named directly or by its folder it is refused."""
    log = tmp_path / "logs" / "run.log"
    cheat = f"{sys.executable} {arena['cheats'] / 'cheaters.py'} log {{bundle}} {{out}}"
    done = _run_logged(arena, f"cmd:{cheat} /proc/self/fd/2", "cheat-log-fd", log)
    assert done.returncode == 0, log.read_text()[-2000:]
    assert "evidence [" in log.read_text()  # the log did name the cases
    outcome_dir = arena["root"] / "runs" / "cheat-log-fd"
    results = RunStore(outcome_dir).read_results()
    assert [r.status for r in results if r.status not in ("ok", "abstained")] == []
    assert [(r.case_id, v.category) for r in results for v in r.verdicts if v.credited] == []
    for named, run_id in ((log, "cheat-log-file"), (log.parent, "cheat-log-folder")):
        done = _run_logged(arena, f"cmd:{cheat} {named}", run_id, log)
        assert done.returncode != 0 and "writes its output" in log.read_text(), log.read_text()[-2000:]
        assert not (arena["root"] / "runs" / run_id / "results.jsonl").exists()  # refused before anything ran


# --- issue 44 item 2: the progress log through a pipe ---------------------------------------------------


def _last_positive_seed(arena) -> int:
    """A run seed whose last diagnosed case has a labeled cause: the case a tee cheater names once every
    other case has been named, so that on the old lines its claim would be credited."""
    positive = [c for c in CASES if arena["case_set"].get(c).case.labels.causes]
    return next(seed for seed in range(1000) if diagnosis_order(CASES, seed)[-1] in positive)


def _run_teed(arena, spec: str, run_id: str, log: Path, seed: int) -> subprocess.CompletedProcess:
    """A run in its own process whose stderr goes through a pipe that a thread copies, line by line, into
    ``log``, as `diageval run ... 2>&1 | tee LOG` does: LOG is another file than the harness's stderr."""
    script = RUNNER.format(tests=str(HERE), here=str(Path(__file__).resolve().parent), cheats=str(arena["cheats"]), spec=spec, cases=CASES, run_id=run_id,
                           runs=str(arena["root"] / "runs"), home=str(arena["home"])).replace("seed=7", f"seed={seed}")
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "DIAGEVAL_HOME": str(arena["home"])}
    with open(log, "w") as fh:
        proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, env=env)

        def tee() -> None:
            for line in proc.stderr:
                fh.write(line)
                fh.flush()

        copier = threading.Thread(target=tee)
        copier.start()
        out = proc.stdout.read()
        proc.wait(timeout=300)
        copier.join(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, None)


def test_the_tee_cheater_finds_the_case_in_old_style_diagnosis_lines(arena, tmp_path):
    """Positive control: given the lines the harness printed before issue 44 (each diagnosis naming its case
    as it ends, written here by the same Progress.step the harness used), the cheater names the last case."""
    from diageval.progress import Progress

    log = tmp_path / "logs" / "run.log"
    log.parent.mkdir()
    with open(log, "w") as fh, Progress(fh, live=False) as show:
        for i, cid in enumerate(["mlp-ddp-healthy", "straggler-rank1"], 1):
            show.step("evidence", i, 2, cid, "ready", 0.1)
        show.step("diagnose", 1, 2, "mlp-ddp-healthy", "ok", 0.1)
    out = tmp_path / "output.json"
    subprocess.run([sys.executable, str(arena["cheats"] / "cheaters.py"), "tee", str(tmp_path), str(out), str(log.parent)],
                   check=True)
    assert [f["category"] for f in json.loads(out.read_text())["findings"]] == ["compute.straggler_rank"]


def test_the_progress_log_through_a_pipe_names_no_case_while_a_box_is_alive(arena, null_run, tmp_path):
    """Issue 44: `diageval run ... 2>&1 | tee LOG`, LOG's folder named on the cmd: line. The box shows the
    folder (the tee'd file is not the harness's stderr), the cheater reads the live log (its stderr, kept in
    the run folder, says what it read), and finds no case: while boxes are alive the diagnosis lines carry
    counts; the ids come once the diagnoses are done."""
    seed = _last_positive_seed(arena)
    log = tmp_path / "logs" / "run.log"
    cheat = f"{sys.executable} {arena['cheats'] / 'cheaters.py'} tee {{bundle}} {{out}} {log.parent}"
    done = _run_teed(arena, f"cmd:{cheat}", "cheat-tee", log, seed)
    text = log.read_text()
    assert done.returncode == 0, text[-2000:]
    store = RunStore(arena["root"] / "runs" / "cheat-tee")
    results = store.read_results()
    assert [r.status for r in results if r.status not in ("ok", "abstained")] == []
    assert [(r.case_id, v.category) for r in results for v in r.verdicts if v.credited] == []
    seen = [(store.case_dir(r.case_id) / "stderr.txt").read_text() for r in results]
    assert all(re.search(r"tee: [1-9]\d* lines read, 5 ready, 0 named as diagnosed, 5 left", s) for s in seen), seen
    # the log does name every case with its status, after the last diagnosis
    diagnosed = re.findall(r"^diagnosed (\S+) +(\S+)", text, flags=re.M)
    assert sorted(diagnosed) == sorted((r.case_id, r.status) for r in results)
    assert re.search(r"^diagnose \[5/5\] ok 5 ", text, flags=re.M), text[-2000:]  # counts, no id


def test_a_cache_copied_beside_the_cheater_stays_out_of_the_box(arena, null_run, cheaters_here):
    """Issue 25: the box bound the folder of a cmd: script or a module, and every PYTHONPATH folder."""
    cache = arena["cheats"] / "cache"
    if not cache.exists():
        shutil.copytree(arena["home"] / "bundles", cache)

    from diageval.bundle.model import EvidenceBundle

    lc = arena["case_set"].get("straggler-rank1")
    bundle = EvidenceBundle.open(arena["evidence"](lc).bundle_dir)
    assert [f["category"] for f in cheaters_here.FolderCheater().diagnose(bundle)["findings"]] == ["compute.straggler_rank"]
    spec = f"cmd:python {arena['cheats'] / 'cheaters.py'} own_folder {{bundle}} {{out}}"
    assert_scores_like_null(run(arena, spec, "cheat-own-folder"))
    assert_scores_like_null(run(arena, "cheaters:FolderCheater", "cheat-folder-module"))
    from diageval.hosting import SpecPathError

    # refused for the first label store the scan meets: a truth file or the index, whichever the folder lists first
    with pytest.raises(SpecPathError, match="bundle cache's (truth file|index)"):
        run(arena, f"cmd:python {arena['cheats'] / 'cheaters.py'} own_folder {{bundle}} {{out}} {cache}", "cheat-named")


def test_without_a_sandbox_nothing_runs_unless_asked_and_then_it_is_never_ranked(arena, null_run, monkeypatch):
    """Issue 25's no-bwrap route: the run failed open (isolation none) and the cheater ranked first."""
    from diageval.hosting import SandboxUnavailable
    from diageval.hosting import sandbox
    from diageval.reports.leaderboard import render_leaderboard

    monkeypatch.setattr(sandbox, "probe", lambda: "bubblewrap (bwrap) is not installed")
    with pytest.raises(SandboxUnavailable, match="--no-sandbox"):
        run(arena, "cheaters:FolderCheater", "cheat-no-box")
    assert not (arena["root"] / "runs" / "cheat-no-box").exists()
    open_run = run(arena, "cheaters:FolderCheater", "cheat-no-box", isolation="none")
    assert open_run.info.isolation == "none"
    board = render_leaderboard([null_run.summary, open_run.summary])
    row = next(line for line in board.splitlines() if "cheat-folder" in line)
    assert row.startswith("| –") and "no sandbox" in row  # listed, never ranked


# --- issue 44 item 1: the public board looked up from what a bundle shows -------------------------------------


class AssembledEvidence:
    """The corpus' regressions, fleets and recorded cases as the real cache makes their bundles: a fleet assembled
    by the real ``ensure_fleet_bundle`` (its members synthetic, under their real cache keys: no recording), a
    recorded case imported from the real traces by the real ``import_recorded``."""

    def __init__(self, cache: Path, data: Path | None, monkeypatch):
        from fleet_fakes import member_bundle

        import diageval.recording.cache as cache_module

        self.cache, self.data = cache, data

        def fake_member(member, device, *, repeat=0, cache_dir=None, force=False, role="case"):
            key = cache_key(member, device, repeat)
            folder = bundles_root(Path(cache_dir)) / key
            if not (folder / "bundle.json").is_file():
                member_bundle(folder, median_s=0.15 if member.faults else 0.1, noise=0.05, seed=repeat)
            return key, folder, True

        monkeypatch.setattr(cache_module, "ensure_bundle", fake_member)

    def __call__(self, loaded, policy: RecordingPolicy = RecordingPolicy()) -> PreparedEvidence:
        from diageval.recording.fleet import ensure_fleet_bundle
        from diageval.recording.recorded import import_recorded

        case = loaded.case
        if case.fleet is not None:
            _, folder, _ = ensure_fleet_bundle(case, "cpu", cache_dir=self.cache, data_dir=self.data)
        else:
            folder = import_recorded(loaded, data_dir=self.data, cache_dir=self.cache)
        return _prepared(case, folder)


def _gain_over_null(arena, spec: str, name: str, evidence: str, cases: list[str], source, **options):
    """The cheater ``spec`` and null run in the box on ``cases`` from ``source``: the cheater's run and its skill over
    null's (printed, for `pytest -s`)."""
    null = run(arena, "null", f"{name}-null-{evidence}", case_ids=cases, evidence_fn=source)
    cheat = run(arena, spec, f"{name}-{evidence}", case_ids=cases, evidence_fn=source, **options)
    gain = cheat.summary.metrics.skill.value - null.summary.metrics.skill.value
    print(f"{evidence}: {len(cases)} cases, {name} skill {cheat.summary.metrics.skill.value:.3f}, "
          f"null {null.summary.metrics.skill.value:.3f}, gain {gain:+.3f}")
    return cheat, gain


def _lookup_cases(arena, data: Path | None) -> list[str]:
    """Every positive regression, fleet and recorded case that runs on a CPU machine (recorded ones only where the
    real traces are here): the cases whose labels a lookup would earn."""
    from diageval.recording.recorded import unavailable_cases

    picked = [lc for lc in arena["case_set"].cases if lc.case.labels.expect == "diagnose" and lc.case.requires.device != "cuda"
              and (lc.case.fleet is not None or lc.case.recorded is not None)]
    absent = set(unavailable_cases(picked, data)) if data is not None else {lc.case.id for lc in picked if lc.case.recorded_files()}
    return [lc.case.id for lc in picked if lc.case.id not in absent]


def _today(monkeypatch) -> None:
    """The evidence as it was before issue 44: fleet.json names and orders the runs as the case file does, and an
    imported trace keeps its bytes (so bundle.json lists the sha256 the case file pins, and the bundle id hashes them)."""
    import diageval.recording.fleet as fleet_module
    import diageval.recording.recorded as recorded_module
    from diageval.recording.truth import FleetDraw

    monkeypatch.setattr(fleet_module, "draw_runs", lambda case, seed: FleetDraw(
        seed=seed, names={r.name: r.name for r in case.fleet.runs}, starts={r.name: r.start for r in case.fleet.runs}))
    monkeypatch.setattr(recorded_module, "reissue", lambda bundle_dir, seed: None)


@pytest.mark.parametrize("evidence", ["drawn", "today"])
def test_the_public_case_files_do_not_look_a_bundle_up(arena, evidence, monkeypatch, tmp_path):
    """A diagnoser that ships the public case files and matches fleet.json's run names, the pinned sha256 of a
    recorded trace (as bundle.json lists it, as the importer's bundle id hashes it, or of the trace decompressed)
    scores no better than null: within 0.01 skill, no claim credited. The positive control: the same cheater given
    the evidence as it was made before issue 44 (run names from the case file, traces kept byte for byte) finds its
    cases and scores well above null, so the test shows the route is closed, not the cheater broken."""
    from diageval.paths import real_traces_dir

    data = real_traces_dir()
    cases = _lookup_cases(arena, data)
    assert sum(arena["case_set"].get(c).case.fleet is not None for c in cases) >= 10
    if evidence == "today":
        _today(monkeypatch)
    source = AssembledEvidence(tmp_path / "cache", data, monkeypatch)
    cheat, gain = _gain_over_null(arena, "cheaters:LookupCheater", "lookup", evidence, cases, source)
    if evidence == "drawn":
        assert_scores_like_null(cheat)
        assert gain <= 0.01
    else:
        credited = {r.case_id for r in RunStore(cheat.run_dir).read_results() if any(v.credited for v in r.verdicts)}
        fleets = {c for c in cases if arena["case_set"].get(c).case.fleet is not None}
        assert len(credited & fleets) >= len(fleets) // 2, sorted(credited)
        if data is not None:
            assert credited - fleets, "no recorded case looked up from its pinned trace hashes"
        assert gain > 0.1


def _remembered(reason: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"(\S+)=(-?\d+)", reason)}


def test_an_in_process_diagnoser_keeps_nothing_from_one_case_to_the_next(arena, null_run, tmp_path):
    """Issue 44: a diagnoser that remembers the bundles it saw pairs a noise bundle with its base recording and a
    fleet's member runs with the same runs in another fleet (+0.037 each). In the box every case runs in a child of
    its own and the box is swept after it, so no memory (the process, /tmp, /dev/shm, a daemon) holds an earlier
    bundle. Outside the box (the positive control) the same cheater remembers through every one of them."""
    outcome = run(arena, "cheaters:MemoryCheater", "cheat-memory")
    assert outcome.info.isolation == "bwrap"
    reasons = {}
    for cid in CASES:
        diagnosis = json.loads((outcome.run_dir / "cases" / cid / "diagnosis.json").read_text())
        reasons[cid] = diagnosis["abstain"]["reason"]
    assert all(_remembered(r) == {"memory": 0, "/tmp": 0, "/dev/shm": 0, "daemon": 0} for r in reasons.values()), reasons

    from cheaters import MemoryCheater
    from diageval.bundle.model import EvidenceBundle

    marker = f"cheater-memory-control-{os.getpid()}"
    os.environ["CHEATER_MARKER"], saved = marker, os.environ["CHEATER_MARKER"]
    try:
        cheater = MemoryCheater()
        bundles = [EvidenceBundle.open(arena["evidence"](arena["case_set"].get(cid)).bundle_dir) for cid in CASES[:2]]
        cheater.diagnose(bundles[0])
        second = _remembered(cheater.diagnose(bundles[1])["abstain"]["reason"])
        assert second == {"memory": 1, "/tmp": 1, "/dev/shm": 1, "daemon": 1}, second
    finally:
        os.environ["CHEATER_MARKER"] = saved
        MemoryCheater.SEEN.clear()
        for where in ("/tmp", "/dev/shm"):
            Path(where, f".{marker}-seen").unlink(missing_ok=True)


FAMILY_OP = {"mlp_ddp": "aten::addmm", "convnet_allreduce": "aten::convolution", "transformer_lm": "aten::embedding"}


class LiveEvidence:
    """Synthetic bundles of live job cases showing what a recording shows of the job without analysis: its world
    size and device (``bundle.json``), every rank's steps (the recorded count), its workload's ops. ``drawn``: as
    the harness records them (:func:`diageval.recording.draw.recorded_as`, from this cache's own secret); else as
    the case files declare them (the recordings before the draw)."""

    def __init__(self, cache: Path, drawn: bool):
        self.cache, self.drawn, self.made = cache, drawn, {}

    def __call__(self, loaded, policy: RecordingPolicy = RecordingPolicy()) -> PreparedEvidence:
        import gzip

        from diageval.bundle.model import BundleEnv, BundleManifest, describe_files
        from diageval.recording.draw import recorded_as

        case, draw = recorded_as(loaded.case, self.cache) if self.drawn else (loaded.case, None)
        if case.id not in self.made:
            folder = bundles_root(self.cache) / os.urandom(16).hex()
            (folder / "rank0").mkdir(parents=True)
            rows = [{"rank": r, "step": i, "t_start": 100.0 + i, "t_end": 100.5 + i}
                    for i in range(case.workload.steps) for r in range(case.workload.world_size)]
            (folder / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            events = [{"ph": "X", "name": n, "ts": 0, "dur": 10, "pid": 1, "tid": 1}
                      for n in ("ProfilerStep#0", FAMILY_OP[case.workload.name])]
            with gzip.open(folder / "rank0" / "trace.json.gz", "wt") as fh:
                json.dump({"traceEvents": events}, fh)
            manifest = BundleManifest(bundle_id=os.urandom(16).hex(), created=datetime.now(timezone.utc),
                                      env=BundleEnv(device="cpu", world_size=case.world_size), files=describe_files(folder))
            (folder / "bundle.json").write_text(manifest.model_dump_json())
            self.made[case.id] = folder
        folder = self.made[case.id]
        verification = fake_verification(True) if case.labels.expect == "diagnose" else None
        bundle_id = json.loads((folder / "bundle.json").read_text())["bundle_id"]
        return PreparedEvidence(case_id=case.id, bundle_dir=folder, bundle_id=bundle_id, manifest_sha256="0" * 64,
                                verification=verification, draw=draw)


FINGERPRINTED = ["contention-mlp-two", "niced-batch-job-lookalike", "one-rank-late-once", "straggler-rank1",
                 "mlp-ddp-healthy", "light-agent-lookalike", "convnet-healthy"]
"""With every transformer case: the live cases the fingerprint singles out from the declared evidence (measured by
tests/gaming_strategies.py: contention-mlp-two and three transformer cases) and cases it must tell them from."""


@pytest.mark.parametrize("evidence", ["drawn", "declared"])
def test_the_public_case_files_do_not_fingerprint_a_live_bundle(arena, evidence, monkeypatch, tmp_path):
    """Issue 44 item 1, live cases: a diagnoser shipping the public case files that matches a live bundle's
    workload family (its ops), world size, device and step count, knowing the harness's step rule, and claims the
    label on its labeled rank where every matching public case carries one, scores like null in the box (no claim
    credited, skill within 0.01 of null's). The positive control: the same cheater against the recordings as the
    case files declare them (the harness before the draw: a step count is the declared one) finds its cases and
    scores well above null."""
    if evidence == "declared":
        monkeypatch.setenv("CHEATER_STEPS", "declared")
    cases = FINGERPRINTED + sorted(lc.case.id for lc in arena["case_set"].cases
                                   if lc.case.workload is not None and lc.case.workload.name == "transformer_lm")
    source = LiveEvidence(tmp_path / "cache", drawn=evidence == "drawn")
    cheat, gain = _gain_over_null(arena, "cheaters:FingerprintCheater", "fingerprint", evidence, cases, source,
                                  pass_env=("CHEATER_SCOPE", "CHEATER_MARKER", "CHEATER_STEPS"))
    if evidence == "drawn":
        assert_scores_like_null(cheat)
        assert gain <= 0.01
    else:
        credited = {r.case_id for r in RunStore(cheat.run_dir).read_results() if any(v.credited for v in r.verdicts)}
        assert {"contention-mlp-two", "lm-collective-stall"} <= credited, sorted(credited)
        assert gain > 0.1
