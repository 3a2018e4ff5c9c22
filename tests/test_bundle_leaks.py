"""No bundle may name its case: not the case id, a fault name, a fault parameter name, a taxonomy id,
or an injector's class name, in any file name or any file's bytes (gzipped traces decompressed).

Reads every injected case's bundle (the ``corpus_bundles`` fixture of conftest.py: recorded once through the
bundle cache, about a minute on 2 cores when the cache is cold), so it is marked ``slow``.
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest

from diageval.cases.load import load_case_set
from diageval.recording.faults import FAULTS

pytestmark = pytest.mark.slow


def forbidden_words(case_set) -> set[str]:
    words = {lc.case.id for lc in case_set.cases}
    words |= set(FAULTS)
    for info in FAULTS.values():
        words |= set(info.params_model.model_fields)
        words.add(info.impl.partition(":")[2])
    words |= {e.id for e in case_set.taxonomy.entries}
    return {w.lower() for w in words}


def bundle_files(root: Path):
    """(relative name, lower-cased bytes) for every file of a bundle, traces decompressed."""
    for p in sorted(root.rglob("*")):
        if not p.is_file():
            continue
        data = p.read_bytes()
        if p.suffix == ".gz":
            try:
                data = gzip.decompress(data)
            except EOFError:  # a deliberately truncated trace: check what is there
                data = gzip.GzipFile(fileobj=io.BytesIO(data)).read1(1 << 30)
        # bytes.lower() folds ASCII only; a file with other bytes is folded as text, as str.lower() would
        lowered = data.lower() if data.isascii() else data.decode("utf-8", errors="replace").lower().encode()
        yield p.relative_to(root).as_posix(), lowered


def test_forbidden_words_cover_what_they_should():
    words = forbidden_words(load_case_set())
    assert {"slow_rank", "target_rank", "compute.straggler_rank", "mlp-ddp-healthy", "slowrank"} <= words


DIGITS = b"0123456789"


def words_in(data: bytes, words: set[str]) -> set[str]:
    """The words that occur in ``data`` (lower-cased bytes), as ``w in data`` would find them, in a few passes.

    A trace is mostly numbers on repeated lines. With every digit deleted and each distinct line kept once,
    the text shrinks ~7x; a word occurring in ``data`` still occurs there with its own digits deleted (the
    digits around it go, the word stays in one piece, and no word spans a line). So that smaller text rules
    a word out, and a word found there is confirmed in ``data`` itself (deleting digits can join two pieces).
    """
    folded = b"\n".join(set(data.translate(None, DIGITS).split(b"\n")))
    found = set()
    for w in words:
        raw = w.encode()
        stripped = raw.translate(None, DIGITS)
        if stripped in folded and raw in data:
            found.add(w)
    return found


def test_words_in_finds_exactly_what_a_substring_search_finds():
    data = b'{"name": "aten::mm", "ts": 1796070022.19, "args": {"rank_0": 3}}\nslow1rank 7 mlp-ddp-384\nab\ncd'
    words = {"aten::mm", "slowrank", "slow1rank", "mlp-ddp-384", "mlp-ddp-385", "rank_0", "rank_1", "abcd", "ts", "zzz"}
    assert words_in(data, words) == {w for w in words if w.encode() in data}


def test_no_bundle_names_its_case_faults_or_labels(corpus_bundles: dict[str, Path]):
    words = forbidden_words(load_case_set())
    leaks = []
    for case_id, root in corpus_bundles.items():
        for name, data in bundle_files(root):
            for w in sorted(words_in(data, words) | {w for w in words if w in name.lower()}):
                leaks.append(f"{case_id}: {name} contains {w!r}")
    assert leaks == []


def test_every_corpus_bundle_is_intact(corpus_bundles: dict[str, Path]):
    from diageval.bundle.model import EvidenceBundle

    for case_id, root in corpus_bundles.items():
        b = EvidenceBundle.open(root)
        assert b.verify_checksums() == [], case_id
        if (root / "steps.jsonl").is_file():  # a case may remove the step log (drop_step_markers)
            assert {s.rank for s in b.steps()} == set(range(b.world_size)), case_id


def test_abstain_cases_lack_the_evidence_they_should(corpus_bundles: dict[str, Path]):
    import json

    from diageval.bundle.model import EvidenceBundle

    missing = EvidenceBundle.open(corpus_bundles["straggler-trace-missing"])
    assert sorted(missing.trace_paths()) == [0]
    assert "rank1/trace.json.gz" not in {f.path for f in missing.manifest.files}
    # the lost rank's Flight Recorder dump is gone too: both dumps would show which rank entered late
    assert {f.path for f in missing.manifest.files if f.path.startswith("flight_recorder/")} == {"flight_recorder/rank_0"}
    cut = EvidenceBundle.open(corpus_bundles["stall-trace-truncated"])
    assert {f.path for f in cut.manifest.files if f.path.startswith("flight_recorder/")} == {"flight_recorder/rank_1"}
    with pytest.raises((json.JSONDecodeError, EOFError, ValueError)):
        cut.load_trace(0)
    assert cut.load_trace(1)["distributedInfo"]["rank"] == 1
