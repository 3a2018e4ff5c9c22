"""Periodic host samples taken by the parent while the ranks run (``metrics.jsonl``).

One row per rank per sample: ``{"time", "scope": "rank", "rank", "cpu_percent", "rss_bytes"}`` (the
rank process plus its DataLoader workers; pages the workers share with the rank count in each), and one host row per sample: ``{"time", "scope": "host",
"cpu_percent", "mem_used_bytes"}``, with ``gpu_util_percent`` per GPU when NVML is importable.
``cpu_percent`` is over the interval since the previous sample (100 = one core busy).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psutil


class MetricsSampler:
    def __init__(self, interval_s: float = 0.1):
        self.interval_s = interval_s
        self.rows: list[dict[str, Any]] = []
        self._pids: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml = _nvml_handles()

    def start(self, pids: list[int]) -> None:
        self._pids = list(pids)
        self._thread = threading.Thread(target=self._run, name="metrics-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> list[dict[str, Any]]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
        return self.rows

    def _run(self) -> None:
        procs: dict[int, psutil.Process] = {}
        for rank, pid in enumerate(self._pids):
            try:
                procs[rank] = psutil.Process(pid)
            except psutil.Error:
                pass
        last_cpu: dict[int, float] = {}
        last_t = time.monotonic()
        psutil.cpu_percent(None)
        while not self._stop.wait(self.interval_s):
            now = time.monotonic()
            dt = max(now - last_t, 1e-6)
            last_t = now
            t = time.time()
            for rank, proc in procs.items():
                try:  # the rank itself must answer; its DataLoader workers may come and go
                    times = proc.cpu_times()
                    cpu = times.user + times.system
                    rss = proc.memory_info().rss
                    children = proc.children(recursive=True)
                    if proc.status() == psutil.STATUS_ZOMBIE:
                        continue
                except psutil.Error:
                    continue
                for child in children:
                    try:
                        times = child.cpu_times()
                        cpu += times.user + times.system
                        rss += child.memory_info().rss
                    except psutil.Error:
                        pass
                prev = last_cpu.get(rank)
                last_cpu[rank] = cpu
                if prev is None:
                    continue
                self.rows.append({"time": t, "scope": "rank", "rank": rank,
                                  "cpu_percent": round(max(0.0, cpu - prev) / dt * 100, 1), "rss_bytes": rss})
            host = {"time": t, "scope": "host", "cpu_percent": psutil.cpu_percent(None),
                    "mem_used_bytes": psutil.virtual_memory().used}
            if self._nvml:
                host["gpu_util_percent"] = _gpu_util(self._nvml)
            self.rows.append(host)


def _nvml_handles() -> list[Any]:
    try:
        import pynvml

        pynvml.nvmlInit()
        return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:  # no NVML library or no driver: no GPU columns
        return []


def _gpu_util(handles: list[Any]) -> list[int]:
    import pynvml

    out = []
    for h in handles:
        try:
            out.append(int(pynvml.nvmlDeviceGetUtilizationRates(h).gpu))
        except Exception:
            out.append(-1)
    return out
