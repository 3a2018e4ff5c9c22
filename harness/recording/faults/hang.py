"""Collective hang: one rank does not issue the collective its peers are in, so they wait until the
collective timeout fires and the job fails (``comm.collective_hang``); and its benign look-alike.

The case sets a short collective timeout (``collective_timeout_s``, passed to ``init_process_group`` by
the recorder), so a hang ends the job within seconds, as a watchdog would end a real one after minutes.
Three ways a rank falls out of step at ``hang_step`` (the others carry on with the workload's own DDP
gradient all-reduce):

* ``skip``: the peers broadcast a small flag from rank 0 (a rank-dependent branch: e.g. only ranks that
  saw a condition sync it); ``target_rank`` skips that broadcast and goes straight into its gradient
  all-reduce. Flight Recorder: the ranks' collective ``N`` differs in type (broadcast vs all_reduce).
* ``reorder``: every rank syncs a small flag with one broadcast and one all-reduce, ``target_rank`` in
  the other order. Flight Recorder: collective ``N`` differs in type.
* ``stall``: ``target_rank`` blocks (a stuck host thread, a deadlock) for twice the timeout before its
  gradient all-reduce. Its peers time out inside the all-reduce; when it wakes, its own collective fails
  on the closed connections. Flight Recorder on gloo records no start or end times, so every rank shows
  the same sequence of collectives: the analyser finds nothing (an honest limit of the evidence).

gloo (checked with torch 2.13): a size mismatch between two all-reduces aborts the process (SIGABRT,
no dump), which is why ``skip`` pairs a broadcast against an all-reduce: type mismatches and missing
peers time out cleanly after ``collective_timeout_s``.

``LateRank`` is the look-alike: one rank blocks once for ``late_ms`` (below the timeout) with the same
short timeout in force; its peers wait that long inside the all-reduce, and the job completes.

Neither leaves its name anywhere: the flag tensors are plain one-element tensors, the sleep is a sleep.
"""

from __future__ import annotations

import time
from typing import ClassVar

from diageval.recording.faults.base import LiveFault


class CollectiveHang(LiveFault):
    fails_job: ClassVar[bool] = True  # the recorder accepts the ranks' "job failed" exit for this fault

    def on_step_start(self, step: int) -> None:
        if step != self.params.hang_step:
            return
        import torch
        import torch.distributed as dist

        target = self.ctx.rank == self.params.target_rank
        flag = torch.zeros(1, device=self.ctx.device)
        desync = self.params.desync
        if desync == "skip":
            if not target:
                dist.broadcast(flag, 0)
        elif desync == "reorder":
            if target:
                dist.all_reduce(flag)
                dist.broadcast(flag, 0)
            else:
                dist.broadcast(flag, 0)
                dist.all_reduce(flag)
        elif target:  # stall
            time.sleep(2 * self.params.collective_timeout_s)


class LateRank(LiveFault):
    def on_step_start(self, step: int) -> None:
        if step == self.params.late_step and self.ctx.rank == self.params.target_rank:
            time.sleep(self.params.late_ms / 1000)
