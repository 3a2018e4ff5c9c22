"""The rules that turn HTA's outputs into findings, on small frames shaped like HTA's (no HTA needed)."""

from __future__ import annotations

import pandas as pd
import pytest

from diageval.diagnosers import hta_mapping as m

# --- critical path -> input.dataloader_starvation ---------------------------------------------------


def breakdown(**bound_us: float) -> pd.DataFrame:
    """Shaped like CPGraph.get_critical_path_breakdown(): one row per critical-path edge."""
    rows = [{"event_idx": i, "duration": us / 2, "type": "critical", "bound_by": b, "s_name": b, "stream": -1}
            for i, (b, us) in enumerate(bound_us.items()) for _ in range(2)]
    rows.append({"event_idx": 99, "duration": 0.0, "type": "dependency", "bound_by": "", "s_name": "", "stream": -1})
    return pd.DataFrame(rows)


def test_critical_path_summary_reduces_breakdown():
    s = m.summarize_critical_path(0, breakdown(cpu_bound=30_000, data_loading=60_000), window_us=100_000, n_steps=10)
    assert s.bound_us == {"cpu_bound": 30_000, "data_loading": 60_000}
    assert s.share_of_window("data_loading") == pytest.approx(0.6)
    assert s.share_of_path("data_loading") == pytest.approx(2 / 3)
    assert m.summarize_critical_path(0, None, 1000, 0).bound_us == {}


def test_starved_input_pipeline_is_named_with_impact():
    summaries = [
        m.summarize_critical_path(r, breakdown(cpu_bound=15_000, data_loading=80_000), window_us=100_000, n_steps=10)
        for r in (0, 1)
    ]
    f = m.dataloader_finding(summaries)
    assert f is not None and f.category == "input.dataloader_starvation" and f.kind == "cause"
    assert f.ranks is None  # starvation is on every rank
    assert f.impact == pytest.approx(0.8)
    assert f.confidence == pytest.approx(0.9)
    assert len(f.evidence) == 2 and "80% of the 100.0 ms window" in f.evidence[0]


def test_healthy_input_pipeline_does_not_fire_even_when_it_dominates_a_short_path():
    # data loading is 60% of the critical path, but the path covers a tenth of the window: 6% of the step
    healthy = [m.summarize_critical_path(r, breakdown(cpu_bound=4_000, data_loading=6_000), 100_000, 10) for r in (0, 1)]
    assert m.dataloader_finding(healthy) is None
    assert m.dataloader_finding([]) is None
    assert m.dataloader_finding([m.summarize_critical_path(0, breakdown(data_loading=5.0), 0.0, 0)]) is None


def test_dataloader_confidence_grows_with_the_share():
    def conf(share):
        s = m.summarize_critical_path(0, breakdown(data_loading=share * 1e5), 1e5, 1)
        return m.dataloader_finding([s]).confidence

    assert conf(0.34) < conf(0.5) < conf(0.66) <= 0.9
    assert conf(0.34) == pytest.approx(0.5, abs=0.01)


def test_one_starved_rank_of_three_is_not_starvation():
    s = [m.summarize_critical_path(0, breakdown(data_loading=90_000), 100_000, 5)]
    s += [m.summarize_critical_path(r, breakdown(cpu_bound=90_000, data_loading=2_000), 100_000, 5) for r in (1, 2)]
    assert m.dataloader_finding(s) is None


# --- temporal / idle / launch stats -> launch.kernel_launch_overhead, symptom.low_utilization --------


def temporal(idle_pct: dict[int, float]) -> pd.DataFrame:
    """Shaped like get_temporal_breakdown()."""
    return pd.DataFrame([
        {"rank": r, "idle_time(us)": p * 1e4, "compute_time(us)": (100 - p) * 1e4, "non_compute_time(us)": 0.0,
         "kernel_time(us)": 1e6, "idle_time_pctg": p, "compute_time_pctg": 100 - p, "non_compute_time_pctg": 0.0}
        for r, p in idle_pct.items()
    ])


def idle(host_wait_share: dict[int, float]) -> pd.DataFrame:
    """Shaped like get_idle_time_breakdown()[0]: per rank and stream, idle time by category."""
    rows = []
    for r, hw in host_wait_share.items():
        for stream in (7, 20):
            for cat, share in (("host_wait", hw), ("kernel_wait", 0.0), ("other", 1 - hw)):
                rows.append({"rank": r, "stream": stream, "idle_category": cat, "idle_time": share * 5e5,
                             "idle_time_ratio": share})
    return pd.DataFrame(rows)


def launch_stats(n: int, gpu_us: float, cpu_us: float, n_long: int = 0) -> pd.DataFrame:
    """Shaped like one rank's get_cuda_kernel_launch_stats() frame."""
    gpu = [gpu_us] * n + [cpu_us * 50] * n_long
    return pd.DataFrame({"correlation": range(len(gpu)), "cpu_duration": [cpu_us] * len(gpu),
                         "gpu_duration": gpu, "launch_delay": [3.0] * len(gpu)})


def test_launch_overhead_fires_when_tiny_kernels_leave_the_gpu_waiting_for_the_host():
    t, i = temporal({0: 85.0, 1: 80.0}), idle({0: 0.95, 1: 0.9})
    ev = [m.launch_evidence(r, launch_stats(900, gpu_us=3, cpu_us=8, n_long=100), t, i) for r in (0, 1)]
    assert ev[0].short_kernel_fraction == pytest.approx(0.9) and ev[0].host_wait_share == pytest.approx(0.95)
    f = m.launch_overhead_finding(ev)
    assert f is not None and f.category == "launch.kernel_launch_overhead" and f.kind == "cause"
    assert f.ranks is None and f.impact is None  # host-wait idle is only an upper bound
    assert 0.5 <= f.confidence <= 0.9
    assert "90% of kernels run shorter than their launch" in f.summary


def test_launch_overhead_does_not_fire_on_a_gpu_bound_or_comm_waiting_run():
    t = temporal({0: 80.0})
    long_kernels = m.launch_evidence(0, launch_stats(100, gpu_us=400, cpu_us=8), t, idle({0: 0.95}))
    assert m.launch_overhead_finding([long_kernels]) is None
    waiting_on_other = m.launch_evidence(0, launch_stats(100, gpu_us=3, cpu_us=8), t, idle({0: 0.2}))
    assert m.launch_overhead_finding([waiting_on_other]) is None
    busy = m.launch_evidence(0, launch_stats(100, gpu_us=3, cpu_us=8), temporal({0: 20.0}), idle({0: 0.95}))
    assert m.launch_overhead_finding([busy]) is None
    assert m.launch_evidence(0, launch_stats(0, 1, 1), t, idle({0: 1.0})) is None


def test_launch_overhead_on_some_ranks_names_them():
    t, i = temporal({0: 85.0, 1: 20.0}), idle({0: 0.95, 1: 0.95})
    ev = [m.launch_evidence(r, launch_stats(100, gpu_us=3, cpu_us=8), t, i) for r in (0, 1)]
    assert m.launch_overhead_finding(ev).ranks == [0]


def test_low_utilization_is_a_symptom_only():
    f = m.low_utilization_symptom(temporal({0: 77.0, 1: 30.0}))
    assert f.kind == "symptom" and f.category == "symptom.low_utilization" and f.ranks == [0]
    assert m.low_utilization_symptom(temporal({0: 30.0})) is None
    assert m.low_utilization_symptom(temporal({0: float("nan")})) is None


# --- kernel breakdown / overlap -> symptom.long_collective ------------------------------------------


def kernel_types(**sums: float) -> pd.DataFrame:
    """Shaped like get_gpu_kernel_breakdown()[0]."""
    total = sum(sums.values())
    return pd.DataFrame([{"kernel_type": k.replace("_", " "), "sum": v, "percentage": round(100 * v / total, 1)}
                         for k, v in sums.items()])


def test_exposed_communication_is_a_symptom_never_a_comm_cause():
    kt = kernel_types(COMMUNICATION=635528, COMPUTATION=347519, COMPUTATION_overlapping_COMMUNICATION=126830,
                      COMMUNICATION_overlapping_MEMORY=4978, MEMORY=4907)
    assert m.exposed_communication_share(kt) == pytest.approx((635528 + 4978) / kt["sum"].sum())
    overlap = pd.DataFrame({"rank": [0, 1], "comp_comm_overlap_pctg": [14.95, 19.93]})
    f = m.long_collective_symptom(kt, overlap)
    assert f.kind == "symptom" and f.category == "symptom.long_collective"
    assert any("14.9% of communication time" in e or "15.0% of communication time" in e for e in f.evidence)


def test_overlapped_or_absent_communication_does_not_fire():
    hidden = kernel_types(COMPUTATION=600, COMPUTATION_overlapping_COMMUNICATION=300, COMMUNICATION=100)
    assert m.long_collective_symptom(hidden, None) is None
    assert m.exposed_communication_share(kernel_types(COMPUTATION=10, MEMORY=90)) is None
    assert m.long_collective_symptom(pd.DataFrame(columns=["kernel_type", "sum", "percentage"]), None) is None


# --- straggler metric -> compute.straggler_rank -----------------------------------------------------


def metric(starts: dict[int, list[float]]) -> pd.DataFrame:
    """Shaped like HTA's straggler metric: rank, iteration, normalized_start_time."""
    return pd.DataFrame([{"rank": r, "iteration": 100 + i, "normalized_start_time": s}
                         for r, ss in starts.items() for i, s in enumerate(ss)])


def test_consistently_late_rank_is_the_straggler_with_its_lateness_as_impact():
    f = m.straggler_finding(metric({0: [0.50, 1.50, 2.50, 3.50], 1: [0.52, 1.49, 2.51, 3.50],
                                    3: [0.80, 1.79, 2.81, 3.80]}), "ncclKernel_AllReduce")
    assert f is not None and f.category == "compute.straggler_rank" and f.ranks == [3]
    assert f.impact == pytest.approx(0.29, abs=0.01)
    assert 0.5 <= f.confidence <= 0.9 and "ncclKernel_AllReduce" in f.summary


def test_jitter_or_tiny_lateness_is_not_a_straggler():
    rotating = metric({0: [0.9, 1.5, 2.5], 1: [0.5, 1.9, 2.5], 2: [0.5, 1.5, 2.9]})
    assert m.straggler_finding(rotating) is None
    tiny = metric({0: [0.50, 1.50, 2.50], 1: [0.53, 1.53, 2.53]})
    assert m.straggler_finding(tiny) is None
    assert m.straggler_finding(metric({0: [0.5, 1.9]})) is None  # one rank: nobody to compare with
    assert m.straggler_finding(metric({})) is None
