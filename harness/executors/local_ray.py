"""Starting a local Ray on a loaded machine: the one ``ray.init`` that declares the recorder resource and gives
Ray's agents their ports.

Ray 2.60's raylet starts two Python agents (dashboard and runtime-env) and, where their ports are left to
them, waits 15 s (fixed in its C++) for each to write the port it bound to a file; then it aborts ("Timed out
waiting for file .../metrics_agent_port_..."), and ``ray.init`` fails with "The current node timed out
during startup". On 2 cores shared by several people the agents took 21-32 s to import (measured from
``raylet.out`` and the agents' first log lines; ``python3 -c "import ray.dashboard.agent"`` alone took
7.7 s), and 7 starts in a row failed. Given a port, the raylet does not wait for its file, so
:func:`start_local_ray` picks free ones and hands them over through ``RayParams`` for the length of the
``ray.init`` call (``ray.init`` takes no such argument; ``ray start`` does, as ``--dashboard-agent-grpc-port``
and the others), and tells the raylet the dashboard agent's HTTP port, which Ray puts only on the agent's
command line. The raylet then also waits for the runtime-env agent to answer, 30 s by default, which a load
of 12 outlasted: :data:`AGENT_TIMEOUT_MS` allows more. With both, 3 of 3 starts succeeded at a load average
of 9-11 (47-51 s). A port taken by another process between the pick and the bind fails a start. A Ray
without these internals (``RayParams``, ``services.start_ray_process``) is started plainly.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any

from diageval.executors.recording_task import RECORDER_RESOURCE

AGENT_TIMEOUT_MS = 180_000  # the raylet's wait for the runtime-env agent to answer (Ray's default 30 s)
AGENT_PORTS = ("metrics_agent_port", "dashboard_agent_listen_port", "runtime_env_agent_port", "metrics_export_port")


def start_local_ray(ray: Any, **init_kwargs: Any) -> None:
    """``ray.init(**init_kwargs)`` of a new local Ray that is one recorder node (``diageval_recorder: 1`` unless
    ``resources`` says otherwise), with its agents' ports given."""
    init_kwargs.setdefault("resources", {RECORDER_RESOURCE: 1})
    init_kwargs.setdefault("include_dashboard", False)
    init_kwargs.setdefault("_system_config", {"agent_register_timeout_ms": AGENT_TIMEOUT_MS})
    with _agent_ports(ray), _listen_port_told(ray):
        ray.init(**init_kwargs)


@contextlib.contextmanager
def _agent_ports(ray: Any) -> Iterator[None]:
    params = getattr(getattr(getattr(ray, "_private", None), "parameter", None), "RayParams", None)
    if params is None:
        yield
        return
    original = params.__init__

    def with_ports(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        for name in AGENT_PORTS:
            if (getattr(self, name, None) or 0) <= 0:  # None or 0: the agent picks one; -1 (the listen port
                setattr(self, name, _free_port())  # without a dashboard): the raylet waits for its file all the same

    params.__init__ = with_ports
    try:
        yield
    finally:
        params.__init__ = original


@contextlib.contextmanager
def _listen_port_told(ray: Any) -> Iterator[None]:
    """The raylet told the dashboard agent's HTTP port (its ``--dashboard_agent_listen_port`` flag), which Ray puts
    only on the agent's own command line, so that it does not wait for the agent to write it."""
    import re

    services = getattr(getattr(ray, "_private", None), "services", None)
    raylet = getattr(getattr(getattr(ray, "_private", None), "ray_constants", None), "PROCESS_TYPE_RAYLET", None)
    if services is None or raylet is None or not hasattr(services, "start_ray_process"):
        yield
        return
    original = services.start_ray_process

    def start(command: list[str], process_type: str, *args: Any, **kwargs: Any) -> Any:
        if process_type == raylet and not any(c.startswith("--dashboard_agent_listen_port=") for c in command):
            agent = next((c for c in command if c.startswith("--dashboard_agent_command=")), "")
            port = re.search(r"--listen-port=(\d+)", agent)
            if port:
                command = [*command, f"--dashboard_agent_listen_port={port.group(1)}"]
        return original(command, process_type, *args, **kwargs)

    services.start_ray_process = start
    try:
        yield
    finally:
        services.start_ray_process = original


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
