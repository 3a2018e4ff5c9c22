"""The reference diagnosers: baselines every real diagnoser must beat, and the harness's self-checks.

* ``null``   claims nothing. The floor.
* ``prior``  claims the corpus' most frequent labeled cause on every bundle, with confidence equal to that
  cause's share of all labeled causes (ties go to the alphabetically first id). On fleet evidence (a
  bundle with ``fleet.json``: a regression pair or a fleet) it uses the cases of that kind instead, and
  adds the same cause behind every value the bundle's fleet could blame (held by some run and not all; on a
  regression, by the candidate) at its factor name's base rate over those cases (the values a label puts a
  cause behind over the blamable values of that name): scoring's per-name factor climatology.
  It counts only the public split (cases whose ``split`` is ``public``; every case when none names a
  split), so a private split's labels never reach it. It reads nothing of a bundle but ``fleet.json``.
* ``oracle`` reads the labels (bundle -> case through the run's ``bundle_cases``) and claims exactly them,
  each behind its labeled factor value, in the words the bundle shows (drawn per assembly: the run's
  ``bundle_values``); on an aliased case it abstains naming the aliased values.
  A self-test of the harness and scoring: it must score perfectly, and it is never ranked.
* ``leak``   greps the bundle's bytes (file names too, gzipped traces decompressed) for public words:
  taxonomy ids, the last segment of cause ids, registered fault names and their parameter names, and
  claims what each points to (a fault's words point at the causes its registry entry says it injects).
  It gets no labels and no case ids, so it scores exactly like ``null`` unless a bundle names what was
  done to it: if it ever scores, bundles leak. (Before issue 8 it got the labeled corpus to grep case
  ids too; a case id in a bundle without the labels points nowhere, and the harness's bundle test
  already greps every byte for case ids.)

Which of them receive what is not theirs to say: the harness's own table (``diageval.hosting.handover``)
hands ``prepare(corpus)`` (a :class:`~diageval.hosting.corpus.ReferenceCorpus`, the labels) to ``prior`` and
``oracle`` only, and ``prepare(vocabulary)`` (a :class:`~diageval.hosting.corpus.PublicVocabulary`) to
``leak``. One that needs its hand-over and did not get it fails the case loudly rather than guessing.
"""

from __future__ import annotations

import gzip
from collections import Counter
from typing import Any

from diageval.bundle.fleet import read_fleet
from diageval.bundle.model import EvidenceBundle
from diageval.diagnosis import Abstention, Diagnosis, Finding, blamable_refs

PUBLIC_SPLIT = "public"


class NullDiagnoser:
    name = "null"
    version = "1"

    def diagnose(self, bundle: EvidenceBundle) -> Diagnosis:
        return Diagnosis()


class _NeedsCorpus:
    _corpus: Any = None  # a diageval.hosting.corpus.ReferenceCorpus, handed over by the harness

    def prepare(self, corpus: Any) -> None:
        self._corpus = corpus
        self._prepared(corpus)

    def _prepared(self, corpus: Any) -> None:
        """Precompute what diagnose needs; called once per prepare."""

    @property
    def corpus(self) -> Any:
        if self._corpus is None:
            raise RuntimeError(f"the {self.name} diagnoser needs its hand-over: the harness calls prepare(...) first")  # type: ignore[attr-defined]
        return self._corpus


class PriorDiagnoser(_NeedsCorpus):
    name = "prior"
    version = "2"

    _claim: Finding | None = None
    _fleet_claims: dict[str, tuple[Finding, dict[str, float]] | None]  # kind -> (its cause claim, factor name -> rate)

    def _prepared(self, corpus: Any) -> None:
        cases = public_cases(corpus.cases)
        self._claim = _most_frequent([c for c in cases if c.kind == "job"] or cases)
        self._fleet_claims = {}
        for kind in ("regression", "fleet"):
            mine = [c for c in cases if c.kind == kind]
            claim = _most_frequent(mine)
            self._fleet_claims[kind] = None if claim is None else (claim, _factor_rates(mine))

    def diagnose(self, bundle: EvidenceBundle) -> Diagnosis:
        self.corpus  # noqa: B018 - fail loudly when prepare was skipped
        fleet = read_fleet(bundle)
        if fleet is None:
            return Diagnosis(findings=[self._claim] if self._claim else [])
        known = self._fleet_claims.get("regression" if fleet.is_regression else "fleet")
        if known is None:
            return Diagnosis()
        claim, rates = known
        behind = [claim.model_copy(update={"confidence": min(rates[ref.name], claim.confidence), "factor": ref,
                                           "summary": f"{claim.category} behind a {ref.name} value at its base rate "
                                                      f"{rates[ref.name]:.3f} (labeled {ref.name} values over "
                                                      f"blamable ones)"})
                  for ref in blamable_refs(fleet.runs) if rates.get(ref.name, 0.0) > 0]
        return Diagnosis(findings=[claim, *behind])


def public_cases(cases: list[Any]) -> list[Any]:
    """The cases of the public split; every case when none names a split (a corpus without splits is public)."""
    if not any(c.split for c in cases):
        return list(cases)
    return [c for c in cases if c.split == PUBLIC_SPLIT]


def _most_frequent(cases: list[Any]) -> Finding | None:
    counts = Counter(c.category for case in cases if case.labels.expect == "diagnose" for c in case.labels.causes)
    total = sum(counts.values())
    if not total:
        return None
    category, count = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return Finding(category=category, kind="cause", confidence=count / total,
                   summary=f"the corpus' most frequent labeled cause ({count} of {total} labeled causes)")


def _factor_rates(cases: list[Any]) -> dict[str, float]:
    """Per factor name f: the values a label puts a cause behind (F_f) over the values the cases could blame with
    the labeled ones (M_f): the factor climatology of the headline score (docs/scoring.md)."""
    true: Counter[str] = Counter()
    slots: Counter[str] = Counter()
    for case in cases:
        if case.fleet is None:
            continue
        behind = {c.factor for c in case.labels.causes if c.factor is not None}
        for ref in set(blamable_refs(case.fleet.runs)) | behind:
            slots[ref.name] += 1
            true[ref.name] += ref in behind
    return {name: true[name] / n for name, n in slots.items()}


class OracleDiagnoser(_NeedsCorpus):
    name = "oracle"
    version = "1"

    def diagnose(self, bundle: EvidenceBundle) -> Diagnosis:
        case_id = self.corpus.bundle_cases.get(bundle.bundle_id)
        case = self.corpus.case(case_id) if case_id else None
        if case is None:
            return Diagnosis(abstain=Abstention(reason=f"bundle {bundle.bundle_id} is not one of this run's bundles"))
        labels = case.with_shown_values(self.corpus.bundle_values.get(bundle.bundle_id, {})).labels  # the shown words
        symptoms = [Finding(category=s, kind="symptom", confidence=1.0, summary="labeled symptom") for s in labels.symptoms]
        if labels.expect == "abstain":
            return Diagnosis(findings=symptoms, abstain=Abstention(reason="the case is labeled: evidence insufficient",
                                                                   factors=list(labels.aliased)))
        causes = [
            Finding(category=c.category, kind="cause", confidence=1.0, ranks=c.ranks, steps=c.steps,
                    factor=c.factor, summary="labeled cause")
            for c in labels.causes
        ]
        return Diagnosis(findings=causes + symptoms)


class LeakDiagnoser(_NeedsCorpus):
    name = "leak"
    version = "2"

    CHUNK = 8 << 20
    # Bytes that continue an identifier: a term preceded or followed by one of these is part of a longer
    # word (``healthy-mlp`` inside ``healthy-mlp-2``), not an occurrence of the term.
    _WORD = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789_-")

    _terms: dict[bytes, tuple[list[str], list[str]]]  # term -> (cause ids it points to, symptom ids)

    def _prepared(self, vocabulary: Any) -> None:
        """``vocabulary``: a :class:`~diageval.hosting.corpus.PublicVocabulary` (taxonomy, faults)."""
        terms: dict[str, tuple[set[str], set[str]]] = {}

        def point(term: str, causes: set[str] = frozenset(), symptoms: set[str] = frozenset()) -> None:
            c, s = terms.setdefault(term.lower(), (set(), set()))
            c.update(causes)
            s.update(symptoms)

        for entry in vocabulary.taxonomy.entries:
            target = ({entry.id}, set()) if entry.kind == "cause" else (set(), {entry.id})
            point(entry.id, *target)
            if entry.kind == "cause":
                point(entry.id.rsplit(".", 1)[-1], *target)
        for fault in vocabulary.faults:
            for word in [fault.name, *fault.params]:  # parameter names shared by faults point at all their causes
                point(word, set(fault.injects))
        self._terms = {t.encode(): (sorted(c), sorted(s)) for t, (c, s) in terms.items() if len(t) >= 3}

    def find_terms(self, bundle: EvidenceBundle) -> dict[bytes, str]:
        """Term -> the first bundle file (relative path) it occurs in, file names included.

        Files are read in chunks (traces can be hundreds of MB raw); each chunk keeps the previous one's
        tail so a term across the seam is still seen, with its neighbours.
        """
        found: dict[bytes, str] = {}
        keep = max((len(t) for t in self._terms), default=0) + 1
        for path in bundle.iter_files():
            rel = path.relative_to(bundle.root).as_posix()
            self._scan(rel.lower().encode(), rel, found, complete=True)
            opener = gzip.open if path.suffix == ".gz" else open
            data = b""
            with opener(path, "rb") as fh:
                while True:
                    block = fh.read(self.CHUNK)
                    tail = data[-keep:]
                    data = tail + block.lower()
                    # a match at offset 0 of a carried tail was judged (with its left neighbour) last chunk
                    self._scan(data, rel, found, complete=not block, skip=1 if tail else 0)
                    if not block:
                        break
        return found

    def _scan(self, data: bytes, where: str, found: dict[bytes, str], complete: bool, skip: int = 0) -> None:
        """Record every term that occurs in ``data`` as a whole word. Unless ``complete``, a match that
        touches the end of ``data`` is left for the next chunk, which shows what follows it."""
        for term in self._terms:
            if term in found:
                continue
            i = data.find(term, skip)
            while i >= 0:
                end = i + len(term)
                if end == len(data) and not complete:
                    break
                before = data[i - 1] if i > 0 else None
                after = data[end] if end < len(data) else None
                if before not in self._WORD and after not in self._WORD:
                    found[term] = where
                    break
                i = data.find(term, i + 1)

    def diagnose(self, bundle: EvidenceBundle) -> Diagnosis:
        self.corpus  # noqa: B018 - fail loudly when prepare was skipped
        causes: dict[str, list[str]] = {}
        symptoms: dict[str, list[str]] = {}
        for term, where in self.find_terms(bundle).items():
            cause_ids, symptom_ids = self._terms[term]
            for c in cause_ids:
                causes.setdefault(c, []).append(f"{where}: contains {term.decode()!r}")
            for s in symptom_ids:
                symptoms.setdefault(s, []).append(f"{where}: contains {term.decode()!r}")
        findings = [
            Finding(category=c, kind="cause", confidence=0.9, summary="a label word occurs in the bundle", evidence=ev)
            for c, ev in sorted(causes.items())
        ]
        findings += [
            Finding(category=s, kind="symptom", confidence=0.9, summary="a label word occurs in the bundle", evidence=ev)
            for s, ev in sorted(symptoms.items())
        ]
        return Diagnosis(findings=findings)

