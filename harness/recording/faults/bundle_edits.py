"""Evidence faults: applied to the finished bundle folder, for cases where a diagnoser should abstain.

* ``drop_rank_trace`` removes one rank's profiler trace (its ``rank<N>/`` folder), as when a node's
  trace upload failed. Step times, metrics and logs of that rank stay.
* ``truncate_trace`` keeps only the first ``keep_fraction`` of one rank's raw trace JSON (re-gzipped),
  as when the writer was killed mid-export: the file is there but is not valid JSON.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

from diageval.recording.faults.base import BundleFault


class DropRankTrace(BundleFault):
    def apply(self, bundle_dir: Path) -> None:
        folder = Path(bundle_dir) / f"rank{self.params.missing_rank}"
        if folder.is_dir():
            shutil.rmtree(folder)


class TruncateTrace(BundleFault):
    def apply(self, bundle_dir: Path) -> None:
        path = Path(bundle_dir) / f"rank{self.params.cut_rank}" / "trace.json.gz"
        if not path.is_file():
            return
        raw = gzip.decompress(path.read_bytes())
        path.write_bytes(gzip.compress(raw[: int(len(raw) * self.params.keep_fraction)], compresslevel=1))
