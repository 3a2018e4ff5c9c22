"""A CaseResult as plain text a person reads: every verdict and every outcome with its reason."""

from __future__ import annotations

from diageval.scoring.results import CaseResult


def _ranks(ranks: list[int] | None) -> str:
    return f" ranks {ranks}" if ranks is not None else ""


def _headline(result: CaseResult) -> str:
    loss = sum((f.probability - f.outcome) ** 2 for f in result.forecasts if f.kind != "rank")
    ranked = sum((f.ranked_probability - f.outcome) ** 2 for f in result.forecasts)
    null = sum(f.outcome for f in result.forecasts if f.kind != "rank")
    return (f"headline loss S = {loss:.3f} (with rank credit {ranked:.3f}; null's S = {null}; skill sums these "
            f"over cases and divides by the loss of the corpus' base rates; the other "
            f"{result.taxonomy_causes - sum(f.kind == 'cause' for f in result.forecasts)} "
            "taxonomy causes were stated at 0 and are not labeled: error 0):")


def format_case_result(result: CaseResult) -> str:
    lines = [f"case {result.case_id}: expect {result.expect}, status {result.status}"
             + (f" ({result.error})" if result.error else "")]
    if not result.scored:
        why = {"invalid": "its evidence does not hold its label (an injection that did not manifest, a label the recording does not show, or a healthy control showing a cause), never the diagnoser's fault",
               "unavailable": "the recorded case's trace files are not on this machine (--data / $DIAGEVAL_DATA)"}
        lines.append("  not scored: " + why.get(result.status, "a harness error, not the diagnoser's fault"))
        return "\n".join(lines)
    if result.abstained:
        lines.append(f"  abstained: {result.abstain_reason}")
    lines.append("claims (most confident first):" if result.verdicts else "claims: none")
    for v in result.verdicts:
        lines.append(f"  #{v.index} {v.category}{_ranks(v.ranks)} (confidence {v.confidence:.2f}): "
                     f"{v.verdict} - {v.reason}")
    lines.append("labeled causes:" if result.outcomes else "labeled causes: none")
    for o in result.outcomes:
        loc = {True: ", localised", False: ", not localised", None: ""}[o.localized]
        lines.append(f"  {o.category}{_ranks(o.ranks)}: {o.outcome}{loc} - {o.reason}")
    if result.observed_symptoms:
        lines.append(f"symptoms observed (recorded, not scored): {', '.join(result.observed_symptoms)}")
    if result.forecasts:
        lines.append(_headline(result))
        for f in result.forecasts:
            y = float(f.outcome)
            if f.kind == "rank":
                lines.append(f"  rank {f.event}: stated {f.ranked_probability:.2f}, true {int(f.outcome)}, error "
                             f"{(f.ranked_probability - y) ** 2:.3f} (rank-credited score only)")
                continue
            lines.append(f"  {f.kind} {f.event}: stated {f.probability:.2f}, true {int(f.outcome)}, "
                         f"error {(f.probability - y) ** 2:.3f}")
    if result.claimed_impact is not None or result.measured_impact is not None:
        fmt = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
        lines.append(f"impact: claimed {fmt(result.claimed_impact)}, measured {fmt(result.measured_impact)}")
    return "\n".join(lines)
