"""No bundle may name its case: not the case id, a fault name, a fault parameter name, a taxonomy id,
or an injector's class name, in any file name or any file's bytes (gzipped traces decompressed).

Reads every injected case's bundle (the ``corpus_bundles`` fixture of conftest.py: recorded once through the
bundle cache, about a minute on 2 cores when the cache is cold), so it is marked ``slow``.
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Callable, Iterable
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


def words_in(files: Callable[[], Iterable[tuple[str, bytes]]], words: set[str]) -> dict[str, set[str]]:
    """file name -> the words that occur in its (lower-cased) bytes, as ``w in data`` finds them, for the files
    ``files()`` yields (called once, and once more only when a word may occur).

    A trace is mostly numbers on repeated lines, and the ranks of one bundle repeat each other's lines. With every
    digit deleted and each distinct line of every file kept once, the bundle shrinks several times; a word
    occurring in a file still occurs there with its own digits deleted (the digits around it go, the word stays in
    one piece, and no word spans a line), inside one run of the bytes words are made of. So the distinct runs rule
    a word out for every file at once, and a word found there is looked for in each file's bytes (deleting digits
    can join two pieces).
    """
    stripped = {w: w.encode().translate(None, DIGITS) for w in words}
    lines: set[bytes] = set()
    for _, data in files():
        lines.update(data.translate(None, DIGITS).split(b"\n"))
    # Each stripped word is made of the bytes in `alphabet`, so where it occurs it lies inside one maximal run of
    # them: the distinct runs (thousands of names and keys, tens of kB) hold every word the text holds.
    alphabet = set(b"".join(stripped.values())) - {ord("\n")}
    other_to_newline = bytes(b if b in alphabet else ord("\n") for b in range(256))
    runs = b"\n".join(set(b"\n".join(lines).translate(other_to_newline).split(b"\n")))
    maybe = {w: w.encode() for w, bare in stripped.items() if bare in runs}
    found: dict[str, set[str]] = {}
    if maybe:
        for name, data in files():
            hits = {w for w, raw in maybe.items() if raw in data}
            if hits:
                found[name] = hits
    return found


def test_words_in_finds_exactly_what_a_substring_search_finds():
    files = [("a", b'{"name": "aten::mm", "ts": 1796070022.19, "args": {"rank_0": 3}}\nslow1rank 7 mlp-ddp-384\nab\ncd'),
             ("b", b"ab\ncd\nmlp-ddp-38\n5 slow\nrank"), ("c", b"1234\n")]
    words = {"aten::mm", "slowrank", "slow1rank", "mlp-ddp-384", "mlp-ddp-385", "rank_0", "rank_1", "abcd", "ts", "zzz",
             "rank"}
    expected = {name: {w for w in words if w.encode() in data} for name, data in files}
    assert words_in(lambda: iter(files), words) == {name: hits for name, hits in expected.items() if hits}
    assert words_in(lambda: iter(files), {"zzz", "abcd"}) == {}


def test_no_bundle_names_its_case_faults_or_labels(corpus_bundles: dict[str, Path]):
    words = forbidden_words(load_case_set())
    leaks = []
    for case_id, root in corpus_bundles.items():
        found = words_in(lambda: bundle_files(root), words)
        for name in sorted({p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}):
            for w in sorted(found.get(name, set()) | {w for w in words if w in name.lower()}):
                leaks.append(f"{case_id}: {name} contains {w!r}")
    assert leaks == []


def test_every_corpus_bundle_is_intact(corpus_bundles: dict[str, Path]):
    from diageval.bundle.model import EvidenceBundle

    for case_id, root in corpus_bundles.items():
        b = EvidenceBundle.open(root)
        assert b.verify_checksums() == [], case_id
        if (root / "steps.jsonl").is_file():  # a case may remove the step log (drop_step_markers)
            assert {s.rank for s in b.steps()} == set(range(b.world_size)), case_id


def test_abstain_cases_lack_the_evidence_they_should(corpus_bundles: dict[str, Path], shown_rank):
    import json

    from diageval.bundle.model import EvidenceBundle

    kept, lost = shown_rank("straggler-trace-missing", 0), shown_rank("straggler-trace-missing", 1)
    missing = EvidenceBundle.open(corpus_bundles["straggler-trace-missing"])
    assert sorted(missing.trace_paths()) == [kept]
    assert f"rank{lost}/trace.json.gz" not in {f.path for f in missing.manifest.files}
    # the lost rank's Flight Recorder dump is gone too: both dumps would show which rank entered late
    assert {f.path for f in missing.manifest.files if f.path.startswith("flight_recorder/")} == {f"flight_recorder/rank_{kept}"}
    whole, cut_rank = shown_rank("stall-trace-truncated", 1), shown_rank("stall-trace-truncated", 0)
    cut = EvidenceBundle.open(corpus_bundles["stall-trace-truncated"])
    assert {f.path for f in cut.manifest.files if f.path.startswith("flight_recorder/")} == {f"flight_recorder/rank_{whole}"}
    with pytest.raises((json.JSONDecodeError, EOFError, ValueError)):
        cut.load_trace(cut_rank)
    assert cut.load_trace(whole)["distributedInfo"]["rank"] == whole
