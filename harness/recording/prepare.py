"""Evidence for a case, as the run pipeline asks for it: the cached bundle, and for a positive case the
:class:`~diageval.recording.truth.Verification` that its injection manifested (see
:mod:`diageval.recording.verify`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from diageval.cases.load import LoadedCase
from diageval.fileio import sha256_file
from diageval.progress import Progress
from diageval.recording.cache import cache_key, ensure_bundle, note_draw, read_truth
from diageval.recording.draw import RecordingDraw, recorded_as
from diageval.recording.truth import ControlCheck, Verification


class PreparedEvidence(BaseModel):
    case_id: str
    bundle_dir: Path
    bundle_id: str
    manifest_sha256: str
    verification: Verification | None = Field(description="None for healthy and abstain cases")
    control: ControlCheck | None = Field(None, description="A healthy control or confounder: its shown evidence checked "
                                                           "for a labeled cause's pattern (problems make it invalid); "
                                                           "None for every other case or when not verified")
    shown_values: dict[str, str] = Field(default_factory=dict, description="A regression or fleet: its factor values "
                                         "('name=value') -> the words its bundle shows (drawn per assembly, kept in "
                                         "the truth record); the case is scored in them")
    draw: RecordingDraw | None = Field(None, description="A job case recorded here: what its recording drew (the "
                                       "labels' ranks follow it: score it against Case.with_rank_draw)")



def prepare_evidence(loaded: LoadedCase, *, device: str = "auto", force: bool = False, verify: bool = True,
                     cache_dir: Path | None = None, data_dir: Path | None = None) -> PreparedEvidence:
    """Record (or reuse) the case's bundle; for a positive case also verify that its injection manifested.

    Verification reuses a stored one unless ``force``; it records repeat pairs of the case and of its healthy
    twin (all cached) until the sequential manifestation test decides. Raises ``RecordingError`` when a recording fails.
    A recorded case's traces are imported instead (:mod:`diageval.recording.recorded`; ``data_dir`` is
    where its files are), raising ``EvidenceUnavailable`` when they are absent; it has no verification.
    """
    from diageval.bundle.model import MANIFEST_NAME, EvidenceBundle

    if loaded.case.recorded is not None:
        from diageval.recording.recorded import import_recorded

        folder = import_recorded(loaded, data_dir=data_dir, cache_dir=cache_dir, force=force)
        return PreparedEvidence(case_id=loaded.case.id, bundle_dir=folder, bundle_id=EvidenceBundle.open(folder).bundle_id,
                                manifest_sha256=sha256_file(folder / MANIFEST_NAME), verification=None)
    if loaded.case.fleet is not None:  # a regression or fleet (issue 24): its runs recorded as shared members
        from diageval.recording.fleet_verify import fleet_control, fleet_evidence

        from diageval.recording.fleet import shown_values_of

        folder, verification = fleet_evidence(loaded.case, device=device, force=force, verify=verify, cache_dir=cache_dir,
                                              data_dir=data_dir)
        # a healthy regression or fleet: its shown evidence checked against its noise by fleet_evidence (issue 44
        # item 3); problems make it invalid, as a healthy control's do
        control = fleet_control(loaded.case, device=device, cache_dir=cache_dir) if verify else None
        return PreparedEvidence(case_id=loaded.case.id, bundle_dir=folder, bundle_id=EvidenceBundle.open(folder).bundle_id,
                                manifest_sha256=sha256_file(folder / MANIFEST_NAME), verification=verification,
                                control=control, shown_values=shown_values_of(folder))
    from diageval.paths import bundle_cache_dir
    from diageval.recording.record import resolve_device
    from diageval.recording.verify import check_control, control_subject, verify_case

    cache = Path(cache_dir) if cache_dir else bundle_cache_dir()
    case, draw = recorded_as(loaded.case, cache)  # the drawn variant its recordings are (recording/draw.py)
    resolved = resolve_device(device, case)
    verification = None
    verified_now = False
    if verify and case.labels.expect == "diagnose":
        truth = read_truth(cache, cache_key(case, resolved))
        stored = truth.verification if truth is not None and not force else None
        if stored is not None and stored.test is not None \
                and (not stored.manifested or (stored.label_problems is not None and stored.shown_checked)):
            verification = stored
        else:  # records every repeat pair, repeat 0 (the bundle returned below) included; a record without the
            # manifestation test's measurement, or whose labels were not checked on the shown recording (made
            # before that check, issue 44 item 3), is verified again (its recordings are reused)
            verification = verify_case(case, device=resolved, cache_dir=cache, force=force)
            verified_now = True
    key, folder, _ = ensure_bundle(case, resolved, force=force and not verified_now, cache_dir=cache)
    note_draw(cache, key, draw)
    control = None
    if verify and control_subject(case) is None:  # a healthy control or confounder: does its shown evidence hold it?
        truth = read_truth(cache, key)
        control = truth.control if truth is not None and truth.control is not None and not force else \
            check_control(case, device=resolved, cache_dir=cache)
    bundle = EvidenceBundle.open(folder)
    return PreparedEvidence(
        case_id=case.id, bundle_dir=folder, bundle_id=bundle.bundle_id,
        manifest_sha256=sha256_file(folder / MANIFEST_NAME), verification=verification, control=control, draw=draw,
    )


def record_cases(case_ids: list[str], *, cases_dir: Path | None = None, device: str = "auto", force: bool = False,
                 cache_dir: Path | None = None, progress: Progress | None = None) -> list[tuple[str, Path, bool]]:
    """Record (or reuse) the bundles of the named cases: (case id, bundle folder, recorded now). Cases this
    machine cannot record on ``device`` are skipped with the reason through ``progress``."""
    from diageval.cases.load import load_case_set
    from diageval.recording.record import device_problem, resolve_device

    case_set = load_case_set(cases_dir)
    out = []
    chosen = case_set.select(case_ids)
    for n, lc in enumerate(chosen, 1):
        if progress:
            progress.started("record", n, len(chosen), lc.case.id)
        if lc.case.recorded is not None:  # imported from the data folder, not recorded here
            from diageval.recording.recorded import import_recorded

            out.append((lc.case.id, import_recorded(lc, cache_dir=cache_dir, force=force), force))
            if progress:
                progress.advance("record")
            continue
        problem = device_problem(device, lc.case)
        if problem:  # not recordable here (a CUDA-only case without a GPU): skipped, said why
            if progress:
                progress.line(f"{lc.case.id}: skipped, {problem}")
                progress.advance("record")
            continue
        dev = resolve_device(device, lc.case)
        cache = Path(cache_dir) if cache_dir else None
        if lc.case.fleet is not None:  # a regression or fleet: its members, then the fleet bundle
            from diageval.recording.fleet import ensure_fleet_bundle

            _, folder, fresh = ensure_fleet_bundle(lc.case, dev, force=force, cache_dir=cache_dir)
        else:
            from diageval.paths import bundle_cache_dir

            cache = cache or bundle_cache_dir()
            case, draw = recorded_as(lc.case, cache)  # what `diageval run` records, drawn alike
            key, folder, fresh = ensure_bundle(case, dev, force=force, cache_dir=cache)
            note_draw(cache, key, draw)
        if progress:
            progress.advance("record")
        out.append((lc.case.id, folder, fresh))
    return out
