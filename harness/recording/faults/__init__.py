"""The fault-injector registry: name -> FaultInfo. Importing this module never imports torch.

Live faults (:class:`diageval.recording.faults.base.LiveFault`) act inside the rank processes while the workload
trains; evidence faults (:class:`~diageval.recording.faults.base.BundleFault`) edit the finished bundle.
"""

from __future__ import annotations

from diageval.recording.faults import params as p
from diageval.recording.plugin import FaultInfo

FAULTS: dict[str, FaultInfo] = {
    info.name: info
    for info in [
        FaultInfo("dataloader_starvation", "DataLoader workers take longer per batch than the step can hide",
                  p.DataloaderStarvationParams, "diageval.recording.faults.data:DataloaderStarvation",
                  p.check_dataloader_starvation, injects=("input.dataloader_starvation",)),
        FaultInfo("blocking_checkpoint", "Rank 0 saves checkpoints synchronously to slow storage",
                  p.BlockingCheckpointParams, "diageval.recording.faults.checkpoint:BlockingCheckpoint",
                  p.check_blocking_checkpoint, injects=("checkpoint.blocking_save",)),
        FaultInfo("collective_stall", "Every rank's collective sockets are rate-capped (slow network)",
                  p.CollectiveStallParams, "diageval.recording.faults.network:CollectiveStall", p.check_collective_stall, injects=("comm.collective_stall",)),
        FaultInfo("slow_rank", "One rank computes slower; its peers wait in the collective",
                  p.SlowRankParams, "diageval.recording.faults.compute:SlowRank", p.check_slow_rank, injects=("compute.straggler_rank",)),
        FaultInfo("kernel_launch_overhead", "Each layer runs as many small ops over batch slices (same math)",
                  p.KernelLaunchOverheadParams, "diageval.recording.faults.compute:KernelLaunchOverhead", injects=("launch.kernel_launch_overhead",)),
        FaultInfo("one_off_pause", "Every rank stalls once at one step (a benign hiccup, for confounders)",
                  p.OneOffPauseParams, "diageval.recording.faults.compute:OneOffPause", p.check_one_off_pause),
        FaultInfo("collective_hang", "One rank skips, reorders or stalls before a collective; its peers time out",
                  p.CollectiveHangParams, "diageval.recording.faults.hang:CollectiveHang", p.check_collective_hang,
                  injects=("comm.collective_hang",)),
        FaultInfo("late_rank", "One rank is late once, by less than the collective timeout (a benign look-alike)",
                  p.LateRankParams, "diageval.recording.faults.hang:LateRank", p.check_late_rank),
        FaultInfo("drop_rank_trace", "Remove one rank's profiler trace from the bundle",
                  p.DropRankTraceParams, "diageval.recording.faults.bundle_edits:DropRankTrace", p.check_drop_rank_trace),
        FaultInfo("truncate_trace", "Cut one rank's profiler trace short (invalid JSON)",
                  p.TruncateTraceParams, "diageval.recording.faults.bundle_edits:TruncateTrace", p.check_truncate_trace),
        FaultInfo("clock_offset", "One rank's host clock is off (trace, step log, metrics, log stamps shifted)",
                  p.ClockOffsetParams, "diageval.recording.faults.bundle_edits:ClockOffset", p.check_clock_offset),
        FaultInfo("sample_rank_traces", "Keep the profiler traces of a sample of ranks only",
                  p.SampleRankTracesParams, "diageval.recording.faults.bundle_edits:SampleRankTraces",
                  p.check_sample_rank_traces),
        FaultInfo("trace_window", "Keep a shorter window of profiled steps in every trace",
                  p.TraceWindowParams, "diageval.recording.faults.bundle_edits:TraceWindow", p.check_trace_window),
        FaultInfo("scale_out", "Derive an N-rank job: the kept rank placed among jittered, clock-skewed copies of the other",
                  p.ScaleOutParams, "diageval.recording.faults.scale_out:ScaleOut", p.check_scale_out),
        FaultInfo("drop_step_markers", "Remove the ProfilerStep markers from every trace (no profiler schedule)",
                  p.DropStepMarkersParams, "diageval.recording.faults.bundle_edits:DropStepMarkers"),
        FaultInfo("drop_device_events", "Remove the device events of every trace, keeping the host's runtime calls",
                  p.DropDeviceEventsParams, "diageval.recording.faults.bundle_edits:DropDeviceEvents"),
        FaultInfo("host_device_sync", "The host waits for the device inside the step (.item() or synchronize) [CUDA]",
                  p.HostDeviceSyncParams, "diageval.recording.faults.cuda:HostDeviceSync", injects=("host.device_sync",)),
        FaultInfo("pageable_copies", "Host data in pageable memory copied to the device inside the step [CUDA]",
                  p.PageableCopiesParams, "diageval.recording.faults.cuda:PageableCopies", injects=("host.device_sync",)),
        FaultInfo("allocator_churn", "The CUDA caching allocator is emptied every step [CUDA]",
                  p.AllocatorChurnParams, "diageval.recording.faults.cuda:AllocatorChurn", p.check_allocator_churn,
                  injects=("memory.allocator_churn",)),
        FaultInfo("cpu_contention", "Other busy processes share the core one rank is bound to",
                  p.CpuContentionParams, "diageval.recording.faults.host:CpuContention", p.check_cpu_contention,
                  injects=("host.cpu_contention",)),
        FaultInfo("exposed_communication", "Gradients all-reduced in one blocking call after backward instead of overlapped with it",
                  p.ExposedCommunicationParams, "diageval.recording.faults.overlap:ExposedCommunication",
                  p.check_exposed_communication, injects=("comm.exposed_communication",)),
        FaultInfo("load_imbalance", "One rank's batches are larger (longer sequences or more rows); its peers wait for it",
                  p.LoadImbalanceParams, "diageval.recording.faults.imbalance:UnevenShards", p.check_load_imbalance,
                  injects=("compute.load_imbalance",)),
        FaultInfo("costly_profiling", "The profiler also records Python stacks and allocations (the observer effect)",
                  p.CostlyProfilingParams, "diageval.recording.faults.versions:CostlyProfiling",
                  injects=("measurement.profiler_overhead",)),
        FaultInfo("wider_numbers", "The model and its inputs in float64 where they were float32",
                  p.WiderNumbersParams, "diageval.recording.faults.versions:WiderNumbers",
                  injects=("compute.numeric_precision",)),
        FaultInfo("recompiling_model", "The model torch.compile'd with static shapes while batch shapes vary",
                  p.RecompilingModelParams, "diageval.recording.faults.versions:RecompilingModel",
                  p.check_recompiling_model, injects=("compile.recompilation",)),
    ]
}
