"""Recording a regression or fleet case (issue 24): its members, cached and shared, then one fleet bundle.

Each run of the case is an ordinary job case (:meth:`diageval.cases.model.Case.fleet_members`: the base
workload with the run's overrides and the faults behind its factor values), recorded through the bundle
cache like any case. The ``i``-th run of a fleet with a given member spec is that spec's repeat ``i``: runs
with the same spec are distinct recordings (their run-to-run noise is the fleet's), and the same (spec,
repeat) is one recording shared by every case that holds it, so a corpus of fleets over one workload records
each distinct run once.

The fleet bundle (:mod:`diageval.bundle.fleet`) is assembled from copies of the members, each moved onto the
fleet's schedule: every timestamp of a member (steps, metrics, trace events, log stamps, Flight Recorder
dumps: the clock-offset evidence edit, :class:`~diageval.recording.faults.bundle_edits.ClockOffset`, per rank)
is shifted so that its first step starts at the run's scheduled start (:func:`diageval.bundle.fleet.start_times`),
and its ``bundle.json`` gets a fresh id and that start as its creation time. Without the shift, when each member
was recorded would say which runs this case recorded for itself (the faulty ones, when the healthy ones come
from the cache).

What the assembly draws (issue 44 item 1: what a bundle shows without analysis must not name a public case).
The case file's run names are opaque words that also stand in the public case file: written into ``fleet.json``
as they are, they let a diagnoser that ships the public cases look the case up (measured: +0.223 over null).
So each assembly draws, from a fresh seed (:func:`draw_runs`), every run's name (``job-`` and 6 hex digits) and,
for a fleet, the runs' start order (a regression keeps baseline before candidate: its roles say which is which
anyway). Nothing a label or the verification depends on follows these: labels and diagnoses name *factor
values* (``causes[].factor``, ``aliased``, a finding's ``factor``), never run names or start order, and the
members are recorded independently of the schedule, so the scorer needs no mapping. The draw is kept in the
bundle's truth record (:class:`~diageval.recording.truth.FleetDraw`, outside every bundle folder, never in the
box); the verification reads the runs back under the case's names through :func:`case_run_names`.
The metadata values are drawn too (issue 39 item 2): a value word reused across the public cases predicted the
label (``v2.5.0`` was the labeled value in 17 of the 26 cases that showed it). Each value keeps its shape (every
digit redrawn, letters and punctuation kept: ``v2.5.0`` may show as ``v7.1.3``, ``node-02`` as ``node-58``, a
config ``4`` as ``9``), distinct within its factor and never one of the case's own words for that factor. Labels
and diagnoses name factor values, so the scorer judges a diagnosis against the case *in the words its bundle
showed* (:meth:`~diageval.cases.model.Case.with_shown_values`, with the draw's ``values`` kept in the result line,
so a re-scored run maps them again), and ``oracle`` is handed the same map. The metadata's *structure* (which runs
share which values) still identifies a public fleet whatever its words are; only a held-out split closes that.
"""

from __future__ import annotations

import random
import secrets
import shutil
import uuid
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from diageval.bundle.fleet import FleetRunInfo, start_times, write_fleet
from diageval.bundle.model import MANIFEST_NAME, BundleManifest, describe_files
from diageval.cases.model import Case, FleetRun
from diageval.fileio import append_jsonl, atomic_write_text, owned_temp_dir, read_jsonl, write_jsonl
from diageval.recording.truth import FleetDraw

DRAWN_NAME_HEX = 6  # job-xxxxxx: 16.7 M names, so two runs of one fleet (at most 16) almost never collide (redrawn then)


def repeat_base(case: Case) -> int:
    """The first repeat number a case's members record as: 0 for a fleet (members shared between fleets); for a
    regression a block of its own (its baseline and candidate are recorded back to back, pair after pair, as the
    manifestation test requires: a baseline taken from another case's recording made minutes earlier would carry
    the machine's drift between the two moments into the pair)."""
    if case.kind != "regression":
        return 0
    return 1000 * (1 + int(case.spec_hash()[:8], 16) % 1_000_000)


def members_with_repeats(case: Case) -> list[tuple[FleetRun, Case, int]]:
    """Each run in start order with its member case and the repeat it records as (:func:`repeat_base` plus the
    count of earlier runs of this case with the same member spec)."""
    seen: Counter[str] = Counter()
    base = repeat_base(case)
    out = []
    for run, member in case.fleet_members():
        out.append((run, member, base + seen[member.id]))
        seen[member.id] += 1
    return out


def ensure_fleet_bundle(case: Case, device: str, *, force: bool = False, cache_dir: Path | None = None,
                        data_dir: Path | None = None, pair: int | None = None) -> tuple[str, Path, bool]:
    """The cached fleet bundle of ``case`` (assembled now if missing or ``force``): (key, folder, assembled now).
    Members are recorded when their own cache entry is missing, and again with ``force`` (``diageval verify
    --force`` and ``record --force`` promise a new recording; a member shared with other fleets is re-recorded
    once, and the fleets already assembled keep their own copies). A recorded regression or fleet imports each
    run's real traces from the data folder (``data_dir``; ``EvidenceUnavailable`` when they are absent) as a
    recorded job case does. ``pair``: a regression's bundle assembled from its members' ``pair``-th repeat pair (the
    one its verification found to show the regression, :func:`diageval.recording.fleet_verify.shown_pair`), again
    when the cached one was assembled from another; None: the cached one as it is, else pair 0."""
    from diageval.paths import bundle_cache_dir
    from diageval.recording.cache import bundles_root, cache_key, ensure_bundle, read_truth, write_truth
    from diageval.recording.record import TMP_PREFIX
    from diageval.recording.truth import TruthRecord

    if case.fleet is None:
        raise ValueError(f"case {case.id}: not a regression or fleet case")
    cache = Path(cache_dir) if cache_dir else bundle_cache_dir()
    key = cache_key(case, device)
    folder = bundles_root(cache) / key
    pair_file = Path(cache) / f"{key}.shown-pair"  # beside the truth file, never in the bundle
    assembled = int(pair_file.read_text()) if pair_file.is_file() else 0
    if not force and (folder / MANIFEST_NAME).is_file() and pair in (None, assembled):
        return key, folder, False
    pair = pair or 0
    members: dict[str, Path] = {}
    if case.workload is None:
        members = import_recorded_runs(case, cache_dir=cache, data_dir=data_dir, force=force)
    else:
        for run, member, repeat in members_with_repeats(case):
            _, members[run.name], _ = ensure_bundle(member, device, repeat=repeat + pair, cache_dir=cache, force=force)
    draw = draw_runs(case, secrets.randbits(63))  # a fresh draw per assembly; it stays in the truth record
    runs = fleet_runs(case, draw)
    case_names = draw.case_names()
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = owned_temp_dir(folder.parent, TMP_PREFIX)
    try:
        staged = tmp / "members"
        for info in runs:  # each member copied and moved onto the fleet's schedule before the fleet is written
            dest = staged / info.name
            shutil.copytree(members[case_names[info.name]], dest)
            move_to_start(dest, info.start)
        out = tmp / "fleet"
        write_fleet(out, runs, {info.name: staged / info.name for info in runs})
        if folder.exists():
            shutil.rmtree(folder)
        out.rename(folder)
        atomic_write_text(pair_file, f"{pair}\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    previous = read_truth(cache, key)
    if previous is None or previous.case_id != case.id or force:
        write_truth(cache, TruthRecord(case_id=case.id, role="case", key=key, repeat=0, recorded=datetime.now(timezone.utc),
                                       fleet_draw=draw))
    else:  # the bundle was assembled again (its folder was gone): its verification stays, its draw is the new one
        write_truth(cache, previous.model_copy(update={"fleet_draw": draw}))
    append_jsonl(cache / "index.jsonl", {"case_id": case.id, "role": "case", "key": key, "repeat": 0, "device": device,
                                         "recorded": datetime.now(timezone.utc).isoformat()})
    return key, folder, True


def import_recorded_runs(case: Case, *, cache_dir: Path, data_dir: Path | None, force: bool) -> dict[str, Path]:
    """Run name -> the imported bundle of its real traces (each run a recorded job case, cached by its files)."""
    from diageval.cases.load import LoadedCase
    from diageval.cases.model import Labels
    from diageval.recording.recorded import import_recorded

    assert case.fleet is not None
    out = {}
    for run in case.fleet.ordered():
        member = Case(id="member", title=f"a run of {case.id}", recorded=run.recorded, labels=Labels(expect="healthy"))
        loaded = LoadedCase(case=member, path=Path(f"{case.id}.yaml#{run.name}"), file_sha256="")
        out[run.name] = import_recorded(loaded, data_dir=data_dir, cache_dir=cache_dir, force=force)
    return out


def draw_runs(case: Case, seed: int) -> FleetDraw:
    """Each run's name in fleet.json (``job-`` and :data:`DRAWN_NAME_HEX` hex digits, distinct) and start order (a
    fleet: a permutation of the runs; a regression: the case's, baseline first), drawn from ``seed``."""
    assert case.fleet is not None
    rng = random.Random(seed)
    runs = case.fleet.ordered()
    names: dict[str, str] = {}
    case_names = [r.name for r in runs]
    for r in runs:
        drawn = f"job-{rng.getrandbits(4 * DRAWN_NAME_HEX):0{DRAWN_NAME_HEX}x}"
        # distinct, and never holding a case file's run name (job-7687 inside job-7687a3 would name the run)
        while drawn in names.values() or any(n in drawn for n in case_names):
            drawn = f"job-{rng.getrandbits(4 * DRAWN_NAME_HEX):0{DRAWN_NAME_HEX}x}"
        names[r.name] = drawn
    order = list(range(len(runs)))
    if case.kind == "fleet":
        rng.shuffle(order)
    return FleetDraw(seed=seed, names=names, starts={r.name: o for r, o in zip(runs, order)}, values=draw_values(case, rng))


def draw_values(case: Case, rng: random.Random) -> dict[str, str]:
    """``name=value`` -> the word fleet.json shows for it: every digit of the value redrawn (its shape kept), distinct
    within the factor and never one of the case's own values of the factor (a diagnoser naming the public case's
    word names nothing the bundle showed). Where the digits cannot give enough distinct words (a factor with more
    values than a one-digit word has), a digit is appended."""
    assert case.fleet is not None
    out: dict[str, str] = {}
    for name in case.fleet.factors:
        values = sorted({r.metadata[name] for r in case.fleet.runs})
        taken = set(values)
        for value in values:
            word, tries = _redraw_digits(value, rng), 0
            while word in taken:
                tries += 1
                word = _redraw_digits(value + ("0" * (tries // 20)), rng)
            taken.add(word)
            out[f"{name}={value}"] = word
    return out


def _redraw_digits(word: str, rng: random.Random) -> str:
    """``word`` with each digit replaced by a random one; a word without digits gets ``-`` and two random digits."""
    if not any(ch.isdigit() for ch in word):
        word += "-00"
    return "".join(str(rng.randrange(10)) if ch.isdigit() else ch for ch in word)


def fleet_runs(case: Case, draw: FleetDraw) -> list[FleetRunInfo]:
    """fleet.json's runs of ``case`` under ``draw``, in their drawn start order: name, metadata, scheduled start,
    role, bundle folder; nothing else."""
    assert case.fleet is not None
    ordered = sorted(case.fleet.runs, key=lambda r: draw.starts[r.name])
    starts = start_times([draw.starts[r.name] for r in ordered])
    return [FleetRunInfo(name=draw.names[r.name], metadata=draw.shown_metadata(r.metadata), start=t, role=r.role,
                         bundle=f"runs/{draw.names[r.name]}") for r, t in zip(ordered, starts)]


def case_run_names(cache_dir: Path, key: str) -> dict[str, str]:
    """The fleet bundle ``key``'s run names (fleet.json's) -> the case's, from its truth record; the identity for
    a bundle assembled before runs were drawn (its fleet.json names the runs as the case does)."""
    from diageval.recording.cache import read_truth

    truth = read_truth(Path(cache_dir), key)
    if truth is None or truth.fleet_draw is None:
        return {}
    return truth.fleet_draw.case_names()


def shown_values_of(bundle_dir: Path) -> dict[str, str]:
    """The value words the fleet bundle at ``bundle_dir`` (a cached one: ``<cache>/evidence/<key>``) shows, from its
    truth record beside it (``name=value`` -> the drawn word); empty for a bundle assembled before values were drawn."""
    from diageval.recording.cache import read_truth

    bundle_dir = Path(bundle_dir)
    truth = read_truth(bundle_dir.parent.parent, bundle_dir.name)
    return dict(truth.fleet_draw.values) if truth is not None and truth.fleet_draw is not None else {}


def move_to_start(bundle_dir: Path, start: datetime) -> None:
    """Shift every timestamp of the bundle at ``bundle_dir`` so that its first step starts at ``start``, and give
    it a fresh manifest (new id, ``created`` = ``start``)."""
    from diageval.recording.faults.bundle_edits import ClockOffset
    from diageval.recording.faults.params import ClockOffsetParams

    bundle_dir = Path(bundle_dir)
    manifest = BundleManifest.model_validate_json((bundle_dir / MANIFEST_NAME).read_text(encoding="utf-8"))
    steps = list(read_jsonl(bundle_dir / "steps.jsonl")) if (bundle_dir / "steps.jsonl").is_file() else []
    first = min((row["t_start"] for row in steps), default=None)
    if first is not None:
        offset_s = start.timestamp() - first
        for rank in range(manifest.env.world_size):  # the one way evidence clocks are moved: per rank
            # built without validation: the edit's own bound (10 s, a skew between hosts) is for cases, not this move
            ClockOffset(ClockOffsetParams.model_construct(offset_rank=rank, offset_ms=offset_s * 1000.0)).apply(bundle_dir)
        metrics = bundle_dir / "metrics.jsonl"
        if metrics.is_file():  # the host rows (the per-rank ones moved with their rank above)
            rows = list(read_jsonl(metrics))
            for row in rows:
                if row.get("scope") != "rank" and isinstance(row.get("time"), (int, float)):
                    row["time"] = row["time"] + offset_s
            write_jsonl(metrics, rows)
    (bundle_dir / MANIFEST_NAME).unlink()
    fresh = manifest.model_copy(update={"bundle_id": uuid.uuid4().hex, "created": start, "files": describe_files(bundle_dir)})
    atomic_write_text(bundle_dir / MANIFEST_NAME, fresh.model_dump_json(indent=2) + "\n")
