"""Evidence for a case, as the run pipeline asks for it: the cached bundle, and for a positive case the
:class:`~diageval.recording.truth.Verification` that its injection manifested (see
:mod:`diageval.recording.verify`).

:func:`prepare_evidence` records (or reuses) and raises when it cannot (what runs on a recorder node, answered as
data); :func:`prepare_case`, the face's one call, turns a case into :class:`Evidence` (its bundle and the
:class:`~diageval.scoring.results.EvidenceFacts` scoring copies) or a :class:`CaseEnd` (the case ends at its
evidence, never diagnosed: why, in the result line's own status and words).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from diageval.cases.load import LoadedCase
from diageval.cases.model import Case
from diageval.fileio import sha256_file
from diageval.progress import Progress
from diageval.recording.cache import cache_key, ensure_bundle, note_draw, read_truth
from diageval.recording.draw import recorded_as
from diageval.recording.policy import EvidenceFn, PreparedEvidence, RecordingPolicy
from diageval.recording.truth import Verification
from diageval.scoring.results import EvidenceFacts, ManifestationMeasure


class Evidence(BaseModel):
    """A case's evidence, ready for a diagnoser: its bundle folder (checked readable) and what scoring copies."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bundle_dir: Path
    facts: EvidenceFacts


class CaseEnd(BaseModel):
    """A case that ends at its evidence, never diagnosed nor blamed on the diagnoser: ``unavailable`` (a recorded
    case's traces are not on this machine, or no in-job monitor can watch it), ``harness_error`` (its recording
    failed, its cached files fail their checksums, its bundle is unreadable or its path names the case) or
    ``invalid`` (a positive case whose injection did not manifest or was never checked, a labeled cause its
    evidence does not show, a healthy control whose shown evidence shows a cause). ``error`` says which, as the
    result line says it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: Literal["unavailable", "harness_error", "invalid"]
    error: str
    facts: EvidenceFacts = EvidenceFacts()


def prepare_case(loaded: LoadedCase, policy: RecordingPolicy, *, prepare: EvidenceFn | None = None) -> Evidence | CaseEnd:
    """The face's one call: ``loaded``'s evidence under ``policy`` (recorded or reused, checked) or how the case ends
    at it. ``prepare``: what prepares it (default :func:`prepare_evidence`, wrapped to record ``policy.monitor``
    into the job when one is named). KeyboardInterrupt passes; any other failure of the preparation is a
    ``harness_error`` naming it."""
    from diageval.bundle.model import EvidenceBundle
    from diageval.recording.recorded import EvidenceChecksumError, EvidenceUnavailable

    prepare = prepare or prepare_evidence
    if policy.monitor is not None:
        from diageval.recording.monitors.evidence import monitored_evidence

        prepare = monitored_evidence(prepare, policy.monitor)
    case = loaded.case
    try:
        prepared = prepare(loaded, policy)
    except KeyboardInterrupt:
        raise
    except EvidenceUnavailable as exc:  # a recorded case's traces are not on this machine: reported apart
        return CaseEnd(status="unavailable", error=str(exc))
    except EvidenceChecksumError as exc:  # names the file
        return CaseEnd(status="harness_error", error=str(exc))
    except Exception as exc:
        return CaseEnd(status="harness_error", error=f"recording failed: {type(exc).__name__}: {exc}")
    bundle_dir = Path(prepared.bundle_dir)
    ids = EvidenceFacts(bundle_id=prepared.bundle_id, bundle_sha256=prepared.manifest_sha256)
    try:
        EvidenceBundle.open(bundle_dir)
    except Exception as exc:
        return CaseEnd(status="harness_error", error=f"unreadable bundle: {exc}", facts=ids)
    if re.search(rf"(?<![a-z0-9]){re.escape(case.id)}(?![a-z0-9])", str(bundle_dir.resolve()).lower()):
        return CaseEnd(status="harness_error", error=f"the bundle path {bundle_dir} reveals the case id", facts=ids)
    # the labels' ranks follow the recording's draw (recording/draw.py)
    ids = ids.model_copy(update={"rank_draw": prepared.draw.labeled_ranks if prepared.draw is not None else None})
    verification = prepared.verification
    impact = verification.impact if verification is not None else None
    measure = _measure(verification)
    if case.labels.expect == "diagnose" and case.recorded is None:  # recorded: labeled from measurements
        if verification is None:
            return CaseEnd(status="invalid", error="no manifestation check was recorded for this positive case", facts=ids)
        if not verification.manifested:
            return CaseEnd(status="invalid", error=f"the injection did not manifest: {_why_not_manifested(verification)}",
                           facts=ids.model_copy(update={"measured_impact": impact, "manifestation": measure}))
    control = prepared.control  # a healthy control or confounder whose shown evidence shows a cause
    if control is not None and control.problems:
        return CaseEnd(status="invalid", error="the healthy label does not hold: " + "; ".join(control.problems),
                       facts=ids)
    return Evidence(bundle_dir=bundle_dir, facts=ids.model_copy(update={
        "measured_impact": impact,
        "difficulty": verification.difficulty if verification is not None else None,
        "manifestation": measure,
        "measured_magnitude": verification.ratio if verification is not None and case.kind == "regression" else None,
        "shown_values": dict(prepared.shown_values),
    }))


def _measure(v: Verification | None) -> ManifestationMeasure | None:
    """The manifestation test's measurement as results carry it (None without a verification)."""
    if v is None:
        return None
    test = v.test
    return ManifestationMeasure(
        metric=v.metric, min_ratio=v.min_ratio, ratio=v.ratio, noise=v.noise, effect_to_noise=v.effect_to_noise,
        statistic=test.statistic if test else None, p_value=test.p_value if test else None,
        alpha=test.alpha if test else None, repeats=v.repeats, manifested=v.manifested,
    )


def _why_not_manifested(v: Verification) -> str:
    """Which condition of the manifestation test failed: the minimum effect, the p-value, or both; or which
    labeled cause its evidence does not support."""
    if v.label_problems:
        return "a labeled cause is not in the evidence: " + "; ".join(v.label_problems)
    test = v.test
    if test is None:  # a record made before the test
        return f"ratio {v.ratio:.3g} against min_ratio {v.min_ratio:g} over {v.repeats} repeats (twin noise {v.noise:.2f})"
    why = []
    if test.estimate < test.min_ratio:
        why.append(f"estimated ratio {test.estimate:.3g} below min_ratio {test.min_ratio:g}")
    if test.p_value >= test.alpha:
        why.append(f"p-value {test.p_value:.2g} not below {test.alpha:g} (z {test.statistic:.2f}; per-pair ratios "
                   + ", ".join(f"{r:.2f}" for r in test.pair_shifts) + ")")
    return f"{' and '.join(why)} after {test.pairs} repeat pairs"


def prepare_evidence(loaded: LoadedCase, policy: RecordingPolicy = RecordingPolicy()) -> PreparedEvidence:
    """Record (or reuse) the case's bundle; for a positive case also verify that its injection manifested.

    Verification reuses a stored one unless ``force``; it records repeat pairs of the case and of its healthy
    twin (all cached) until the sequential manifestation test decides. Raises ``RecordingError`` when a recording fails.
    A recorded case's traces are imported instead (:mod:`diageval.recording.recorded`; ``policy.data_dir`` is
    where its files are), raising ``EvidenceUnavailable`` when they are absent; it has no verification.
    ``policy.monitor`` is not read here (:func:`prepare_case` wraps this for it).
    """
    from diageval.bundle.model import MANIFEST_NAME, EvidenceBundle

    device, force, verify, cache_dir, data_dir = policy.device, policy.force, policy.verify, policy.cache_dir, policy.data_dir

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
    from diageval.recording.label_support import CHECKS_VERSION
    from diageval.recording.verify import check_control, control_subject, verify_case

    cache = Path(cache_dir) if cache_dir else bundle_cache_dir()
    case, draw = recorded_as(loaded.case, cache)  # the drawn variant its recordings are (recording/draw.py)
    resolved = resolve_device(device, case)
    verification = None
    verified_now = False
    if verify and case.labels.expect == "diagnose":
        truth = read_truth(cache, cache_key(case, resolved))
        stored = truth.verification if truth is not None and not force else None
        if stored is not None and stored.test is not None and (not stored.manifested or (
                stored.label_problems is not None and stored.shown_checked and stored.checks == CHECKS_VERSION)):
            verification = stored
        else:  # records every repeat pair, repeat 0 (the bundle returned below) included; a record without the
            # manifestation test's measurement, or whose labels were not checked on the shown recording (made
            # before that check, issue 44 item 3) or by an older version of the checks, is verified again (its
            # recordings are reused)
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


def seed_keys(case: Case, policy: RecordingPolicy) -> tuple[list[str], str] | None:
    """The cache keys of the recordings that preparing ``case`` under ``policy`` may read from the policy's cache
    (what an executor recording elsewhere sends along): the case's repeat 0 and its base (the recording its
    evidence edits start from), and for a positive case every repeat pair of what its verification records
    (:func:`~diageval.recording.verify.verification_subject` and its healthy twin), up to the manifestation test's
    cap; and the key whose truth record :func:`prepare_evidence` reads. None when the device cannot be resolved
    here (the recorder says why, in its own words, on its own node)."""
    from diageval.paths import bundle_cache_dir
    from diageval.recording.cache import split_bundle_edits
    from diageval.recording.manifest_test import LOOKS
    from diageval.recording.record import resolve_device
    from diageval.recording.verify import twin_repeat, verification_subject

    cache = Path(policy.cache_dir) if policy.cache_dir else bundle_cache_dir()
    case = recorded_as(case, cache)[0]  # the drawn variant its recordings are
    try:
        resolved = resolve_device(policy.device, case)
    except Exception:
        return None
    specs = [(case, 0), (split_bundle_edits(case)[0], 0)]
    if case.labels.expect == "diagnose" and case.manifest is not None:
        subject = verification_subject(case)
        specs += [(subject, r) for r in range(LOOKS[-1])]
        specs += [(subject.healthy_twin(), twin_repeat(subject, r)) for r in range(LOOKS[-1])]
    return list(dict.fromkeys(cache_key(c, resolved, r) for c, r in specs)), cache_key(case, resolved, 0)


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
