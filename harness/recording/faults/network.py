"""Collective stall: every rank's collectives are slow because the network is.

From ``start_step`` on, each rank caps the send rate of its connected TCP stream sockets (gloo's
pairs; found in ``/proc/self/fd``) with ``SO_MAX_PACING_RATE``. The sockets are borrowed, never closed.
Nothing in the trace names it: both ranks arrive at the collective together and stay in it longer.
Linux only (needs ``/proc`` and the socket option); gloo only (NCCL on GPUs ignores it).
"""

from __future__ import annotations

import os
import socket

from diageval.recording.faults.base import LiveFault

SO_MAX_PACING_RATE = getattr(socket, "SO_MAX_PACING_RATE", 47)


def cap_tcp_send_rate(bytes_per_s: int) -> int:
    """Cap every connected TCP stream socket of this process; return how many were capped."""
    capped = 0
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                continue
            sock = socket.socket(fileno=fd)
        except OSError:
            continue
        try:
            if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM:
                try:
                    sock.getpeername()
                except OSError:
                    continue  # listening or unconnected
                sock.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, bytes_per_s)
                capped += 1
        finally:
            sock.detach()
    return capped


class CollectiveStall(LiveFault):
    backends = ("gloo",)

    def _apply(self) -> None:
        if self.ctx.backend != "gloo":
            raise RuntimeError("this network cap works on gloo's TCP sockets only")
        if cap_tcp_send_rate(self.params.pacing_bytes_per_s) == 0:
            raise RuntimeError("found no connected TCP socket to cap")

    def after_setup(self) -> None:
        if self.params.start_step == 0:
            self._apply()

    def on_step_start(self, step: int) -> None:
        if step == self.params.start_step and step > 0:
            self._apply()
