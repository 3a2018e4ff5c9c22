"""How fast the ``leak`` reference diagnoser greps a bundle: MB of (decompressed) bundle bytes per second.

Builds a bundle whose one trace holds ~N MB of raw Chrome-trace JSON (aten ops, gzipped at level 1 as
the recorder writes them), prepares ``leak`` with the public vocabulary (as a run hands it) and times ``diagnose``.

Usage: python benchmarks/leak_speed.py [MB]
"""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from run_fakes import write_bundle  # noqa: E402

from diageval.bundle.model import EvidenceBundle  # noqa: E402
from diageval.cases.taxonomy import load_taxonomy  # noqa: E402
from diageval.diagnosers.reference import LeakDiagnoser  # noqa: E402
from diageval.hosting.corpus import PublicVocabulary  # noqa: E402


def main() -> None:
    mb = float(sys.argv[1]) if len(sys.argv) > 1 else 30
    leak = LeakDiagnoser()
    leak.prepare(PublicVocabulary.build(load_taxonomy()))
    with tempfile.TemporaryDirectory(prefix="diageval-leak-") as tmp:
        root = write_bundle(Path(tmp) / "b", "bench")
        event = {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 3.5,
                 "args": {"External id": 7, "Input Dims": [[64, 512], [512, 512]], "Sequence number": 11}}
        line = json.dumps(event)
        count = int(mb * 1e6 / (len(line) + 2))
        with gzip.open(root / "rank0" / "trace.json.gz", "wt", compresslevel=1) as fh:
            fh.write('{"traceEvents": [' + ",\n".join([line] * count) + "]}")
        raw = count * (len(line) + 2) / 1e6
        bundle = EvidenceBundle.open(root)
        start = time.perf_counter()
        diagnosis = leak.diagnose(bundle)
        seconds = time.perf_counter() - start
    print(f"leak: {raw:.0f} MB raw trace, {len(leak._terms)} terms, {seconds:.2f} s -> {raw / seconds:.0f} MB/s; "
          f"findings: {len(diagnosis.findings)}")


if __name__ == "__main__":
    main()
