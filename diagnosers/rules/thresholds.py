"""Every threshold the rules use, with the principle it comes from.

Each is a share of step time, a ratio to the run's own quiet steps, a physical floor (a link speed,
scheduling jitter) or a count, chosen from that principle so that a healthy run (step-time CV of 10-26%
on a busy host, notes/measured.md) stays well below it. They were checked against live recordings (the
corpus and other workloads, severities, ranks and world sizes), not fitted to them: where a check
showed a principle missing, the principle was added and is written next to its number. None was set or
moved by looking at the recorded cases (cases/recorded/): those are the check that the rules transfer.
"""

from diageval.bundle.attribution import QUEUE_EMPTY_DELAY_US as QUEUE_EMPTY_DELAY

# Data loading: a step that spends a third of its time waiting for the next batch is input-bound by any
# reasonable standard (a healthy pipeline with prefetching hides the load almost entirely).
DATA_WAIT_SHARE = 0.30
# ... and at least this many steps wait that long themselves (a pattern, not one stray wait). In a profile of fewer
# waiting steps, a logged step outside it that is longer than the profiled quick steps by (1 - CUT_SOFTNESS) x the
# smallest profiled wait counts as one (data_wait.logged_like): the profile shows what a wait costs, the log how often
# a step pays it. No new number.
MIN_WAITING_STEPS = 3

# Scheduling jitter on a busy host: a rank can be held a few ms by descheduling alone (measured.md).
# A straggler's lateness, and a stalled collective's time beyond what its payload needs, must exceed it.
LATENCY_ALLOWANCE_US = 5000.0

# Straggler: the late rank must make its peers wait for at least this share of the step, on most steps.
SKEW_SHARE = 0.10
PERSISTENT_SHARE = 0.60
# ... and its own work inside its step before the collective must account for at least this part of the
# skew (median over steps of extra work / skew; otherwise its lateness is explained by something else:
# its data wait, or a pause before its step began such as a save).
COMPUTE_EXPLAINS_SKEW = 0.5

# Collective stall, when the trace records payload sizes: while every rank is inside, the collective
# moves data slower than 100 MB/s of bus bandwidth, slower than a 1 Gbit/s link (the slowest interconnect
# a training job runs over; loopback, NVLink, InfiniBand are 10-1000x faster), and the time beyond what
# that bandwidth needs is at least STALL_MIN_SHARE of the step (otherwise it does not matter).
MIN_BUS_BYTES_PER_S = 100e6
STALL_MIN_SHARE = 0.10

# Without payload sizes: all ranks inside together for this share of the step, while late arrivals
# explain less than half of the time spent inside.
SHARED_COLLECTIVE_SHARE = 0.35
SKEW_OVER_SHARED_MAX = 0.5

# Spikes (blocking checkpoint): a step is a spike when it is at least SPIKE_RATIO x the run's median,
# i.e. the stall costs two extra steps or more (single steps at 2x the median are common on a busy host,
# notes/measured.md, and a routine fast checkpoint costs about one step), and also SPIKE_SIGMAS robust
# standard deviations above the quiet steps; the spikes together must cost at least
# SPIKE_IMPACT of the run's time, and recur (at least MIN_SPIKES of them, the first step excluded).
SPIKE_RATIO = 3.0
SPIKE_SIGMAS = 4.0
SPIKE_IMPACT = 0.10
MIN_SPIKES = 2
# Recurring stalls of one cause are alike: an event costing less than 1/SPIKE_SIMILARITY of the typical
# one is not part of the pattern (a warm-up step, a descheduling hiccup).
SPIKE_SIMILARITY = 3.0
# Steps over this multiple of the median are left out when the quiet level is estimated.
SPIKE_CLIP = 2.0
# The extra time of a spike must sit in unexplained host time (not data wait, ops or collectives).
SPIKE_UNEXPLAINED_SHARE = 0.5
# A rank shares the blame for a spike when its unexplained share is at least this fraction of the worst
# rank's: a saving rank and its peers stalled in the next collective look alike only from far off.
SPIKE_CO_CULPRIT_OF_WORST = 0.5

# The smallest loss the rules name as a cause on a GPU trace: a tenth of the step (as SKEW_SHARE and
# SPIKE_IMPACT above). Below it, a cause is not worth a person's attention and is within the step-time
# noise of a busy host (notes/measured.md: healthy CV 10-26%).
MIN_CAUSE_SHARE = 0.10
# A cause on a GPU trace must recur: at least this many profiler steps, and on PERSISTENT_SHARE of them.
# Three steps are the fewest in which "every step" can be told from "once" (one odd step plus one normal
# one is a coin flip); a one- or two-step trace makes the GPU analysers stay silent.
MIN_PATTERN_STEPS = 3

# Host/device sync: the device sits idle while the host thread is blocked in a synchronising call
# (device/stream/event synchronize, a synchronous copy, an async copy that touches pageable memory; a
# cudaFree/hipFree blocks the same way but is allocator churn, below). That idle time is lost to the synchronisation alone: the host could have queued the
# next kernels had it not waited. It is a cause when it is at least MIN_CAUSE_SHARE of the step.
SYNC_IDLE_SHARE = MIN_CAUSE_SHARE

# Launch-bound (the host cannot feed the device), judged by two measurements, not by counts:
# 1. the launch-to-start delay (a kernel's start minus the start of the runtime call that queued it).
#    On an idle device the delay is the launch latency itself: the runtime call, the driver's submission
#    and the device's block scheduling, 5-20 us on CUDA and ROCm (CUPTI/roctracer add a few us). A median
#    under QUEUE_EMPTY_DELAY_US, i.e. under ~2.5x the longest launch latency, means nothing was queued
#    ahead of the kernels: the device was waiting for the host. A device-bound loop keeps its queue
#    milliseconds deep (the host runs ahead), and its delays are 100-1000x longer.
# 2. the device idles in many short gaps between kernels (each at most trace_stats.SHORT_GAP_US, so not a
#    few long stalls, which have causes of their own), for at least MIN_CAUSE_SHARE of the step, after
#    taking out the idle that DataLoader waits and blocking calls already explain.
QUEUE_EMPTY_DELAY_US = QUEUE_EMPTY_DELAY  # 50 us, defined where the time table splits device gaps by it
LAUNCH_GAP_SHARE = MIN_CAUSE_SHARE

# Launch overhead on CPU traces (there is no device to idle, so no queue to measure). Two measures, both must hold:
# 1. the op count: a step made of thousands of host ops (the count is what an expert reads first) is a model whose
#    work is cut into many small ops, where fusing or compiling removes per-op work. (Op density per ms of step was
#    tried and rejected: on a contended host, tiny ops run slowly too, so the density of a sliced model is no higher
#    than a healthy one's.) The count alone does not say the dispatch costs anything: thousands of ops at 5-10 us of
#    dispatch each is 10-20 ms a step, more than a small model's whole step but a few percent of a big one's.
# 2. so the cost is measured, not assumed per op: the time the trace shows the op threads dispatching, over every
#    thread that runs ops (a training step's backward can run on autograd's thread): the time between ops at most
#    SHORT_GAP_US apart (the time table's launch row; Python and framework time between ops, which fusing removes)
#    plus the self time of ops under trace_summary.SHORT_OP_US (an op that short spends its time in the framework's
#    dispatch, not in arithmetic: both are per-op costs a fused model does not pay). It must be a loss worth naming,
#    MIN_CAUSE_SHARE, as every other cause's. Not HOST_CAUSE_SHARE (the time table's own launch claim on a CPU,
#    below): there the count is small and eager dispatch between a few hundred ops is how an unfused model runs, so
#    only a third of the step makes it a bottleneck; here the count already says the model is made of small ops,
#    and the share says only whether that costs a tenth of the step. The short ops' time is an upper bound (a short
#    op on a mid-sized tensor also does some arithmetic); the count keeps it to models that are made of small ops.
MIN_HOST_OPS_PER_STEP = 2000
CPU_DISPATCH_SHARE = MIN_CAUSE_SHARE

# CPU contention (contention.py): a CPU rank's matrix products and convolutions spend all their wall time on a core
# when the rank has its cores; a rank whose CPU time (metrics.jsonl) falls short of that wall time was runnable and not
# running for the shortfall, time the step lost outright (the same ops on a free core end that much sooner), so the bar
# is the smallest loss worth naming, MIN_CAUSE_SHARE, once the shortfall is told from none (ABSENCE_SIGMAS). Waiting
# (data, disk, peers) spends no CPU and counts in neither figure, and extra threads only add CPU, so no other cause
# makes a shortfall. A process's CPU time is read in clock ticks of 1/USER_HZ s (USER_HZ = 100 on every Linux ABI):
# each sample is the difference of two truncated readings, an error of CPU_TICK_S / sqrt(6) in standard deviation.
CONTENTION_SHARE = MIN_CAUSE_SHARE
CPU_TICK_S = 0.01

# Symptoms reported alongside causes (observations only). On GPU traces a collective is "long" by its
# exposed time (communication kernels running while no compute kernel does): overlapped communication
# costs the step nothing.
LONG_COLLECTIVE_SHARE = 0.25
LOW_UTILIZATION_BUSY = 0.5
# symptom.slow_step: the training thread waits (collective, data, host block) at least half of the step.
SLOW_STEP_WAITING_SHARE = 0.5

# Allocator churn (host_sync.py, beside the sync rule): memory handed back to the driver and requested again inside the loop. A
# cudaFree/hipFree synchronises the device, so the device drains its queue and idles while the host frees.
# Like a synchronising call, it is a cause when that idle time is at least MIN_CAUSE_SHARE of the step on
# PERSISTENT_SHARE of at least MIN_PATTERN_STEPS steps: the bar is the same because the mechanism (the host
# blocked while the device idles) is the same; only the call differs, and with it the remedy (keep the
# caching allocator: no empty_cache() in the loop, no PYTORCH_NO_CUDA_CACHING_ALLOC).
CHURN_IDLE_SHARE = MIN_CAUSE_SHARE

# --- how much evidence a judgement needs ------------------------------------------------------------------
# A step of a GPU trace counts as evidence of a pattern only when it holds at least this many kernels: every
# GPU rule reads per-step medians or shares of kernel gaps and launch delays, and the median of n values has
# a standard error of ~1.25 sigma / sqrt(n), so under ten kernels a step's median is not within half a
# spread of the truth. With MIN_PATTERN_STEPS such steps the rules can tell "every step" from "once";
# with fewer, a cause cannot be separated from noise (a 2-step trace of 14 kernels, one 13-second step of
# start-up): that is "too little evidence", an abstention, unless the bound below already rules every cause out.
MIN_KERNELS_PER_STEP = 10

# A trace without ProfilerStep markers is cut into this many equal windows of its time span (or into the
# job's own logged steps, when steps.jsonl covers it) and each window is judged like a step. Ten: the
# persistence share (PERSISTENT_SHARE) is then resolved in tenths, MIN_PATTERN_STEPS windows are a third
# of the span (a pattern, not a burst), and a trace of a few hundred kernels still holds MIN_KERNELS_PER_STEP
# in each window that has device work at all. The windows cover the span from the first device event to the
# last: before the first kernel the job is creating its CUDA context, building the model or loading its first
# batch, which is not the loop a cause is about (a trace of a job without an accelerator: its whole span).
STEPLESS_WINDOWS = 10

# What one rank's trace bounds (the "peer bound"). A missing peer can cost a rank only where the two must
# meet: in communication it waits for (exposed communication kernels on a GPU, time inside collectives on a
# CPU), and on a GPU in device idle time, which is where a host waiting on anything outside the rank shows.
# Device idle plus exposed communication is therefore the most every missing rank together can cost it.
# When that bound is under MIN_CAUSE_SHARE, no cause worth naming can hide outside the evidence: a
# single-rank view of a multi-rank job, or a trace too short for a pattern, can be called healthy. The same
# bound on a GPU trace caps every host-side cause (data, launches, syncs, allocations cost only device idle).
PEER_BOUND_SHARE = MIN_CAUSE_SHARE

# --- graded confidence ----------------------------------------------------------------------------------
# Every cut above is a round figure ("a tenth", "a third") whose neighbours are as defensible: another expert
# could put the line a quarter higher or lower. So a measurement is compared with a fuzzy cut: the
# confidence of a cause is the probability that the measured share exceeds the cut, Phi((value - cut) /
# sigma), where sigma combines the measurement's own standard error across steps with CUT_SOFTNESS x cut
# (the cut's own spread). At the cut it is 0.5; one softness below it (value = 0.75 x cut) about 0.16, where
# claims stop (CLAIM_FLOOR_SIGMAS); far above it, MAX_CONFIDENCE. A step "shows" a cause when its own share
# reaches the same lower edge, (1 - CUT_SOFTNESS) x cut, so that a run just under a cut is named at a
# confidence just under 0.5, never dropped to nothing.
CUT_SOFTNESS = 0.25
CLAIM_FLOOR_SIGMAS = 1.0
# The rules read mechanisms from traces and can misread one (a wait the trace attributes to the wrong call,
# a job whose structure the rules do not know): never certain.
MAX_CONFIDENCE = 0.95

# Load imbalance (load_imbalance.py) adds no number of its own. A balanced data-parallel job runs the same
# shapes on every rank, so equal arithmetic per rank is exact, not approximate: the heavier rank must do
# at least MIN_CAUSE_SHARE more multiply-adds than its peers (less cannot cost a tenth of a step even when
# the step is all compute), its compute must take SKEW_SHARE of the step longer (its peers wait that long,
# the straggler's bar), on PERSISTENT_SHARE of a block of steps; and the extra work, at its peers' speed,
# must account for COMPUTE_EXPLAINS_SKEW of its extra compute time for it to replace a straggler claim.

# --- time attribution (attributed.py; the table is diageval.bundle.attribution) ----------------------------
# On a trace with device events each rank's wall time is split into what the device did and, for every instant it
# idled, what the launching threads were doing; a cause is named from its share of that table. Every host-side
# cause costs the step only the device idle it explains, so one bar serves them all: MIN_CAUSE_SHARE, the smallest
# loss worth naming (a tenth of the step), compared fuzzily (graded_confidence). The loader's own cut above
# (DATA_WAIT_SHARE, a third of a step's wall time) is for CPU traces, where a wait is not split from the work it may
# overlap; on a GPU trace only the wait the device idles through is counted, so the general bar applies.
ATTRIBUTED_CAUSE_SHARE = MIN_CAUSE_SHARE
# A share is told from its absence when it is at least this many standard errors above zero: a one-sided test at
# 5% (a share cannot be negative, so only "more than none" is asked), z = 1.645. The standard error comes from the occurrences the share is made of (waits, blocking
# calls, device gaps, CPU ops: the square root of the sum of their squared times, a compound-Poisson total) or
# from its spread over steps/windows, whichever is larger. n equal occurrences give share / se = sqrt(n): one wait
# (1.0) or two (1.4) cannot be told from a stray event, three (1.7) can, wherever they sit (one step or thirty).
# A cause share that would matter (from the cut's lower edge) but is not told from its absence is the only
# "too little evidence" on such a trace.
ABSENCE_SIGMAS = 1.645
# The table's own splits use two numbers defined beside it (diageval.bundle): a gap between device activities of at
# most trace_stats.SHORT_GAP_US (1 ms, a visible stall; 50-200x a launch's latency) is the host dispatching, longer
# ones are charged to what the host was doing; and a CPU op that queues no device work is work of its own (input made
# inline before the step's first kernel, else the model's host work) only when it runs at least SHORT_GAP_US, shorter
# ones being the model's own dispatch (views, empty tensors). A gap is "queued" (the device's own, not the host's)
# when the activity that ends it was queued more than QUEUE_EMPTY_DELAY_US before it started.

# On a host-only (CPU) trace the table splits the main thread's time (attribution._attribute_host): the CPU is the
# "device", the main thread outside the model's ops its idle. Two of its parts are named: input made inline (Python
# before the step's first op, no DataLoader marker; a DataLoader wait stays with the data-wait judge) and dispatch
# (gaps of at most SHORT_GAP_US between ops: the Python and framework time between many small ops, where the op
# count below does not already name it). Both against a third of the step, DATA_WAIT_SHARE, the CPU trace's own cut
# for the input pipeline, not the GPU's MIN_CAUSE_SHARE: on a GPU an idle instant is lost outright (the device could
# have run), while on a CPU the main thread outside the model's math is still the CPU working: input made inline runs
# on the cores the model would use, so moving it off the main thread saves only what it can overlap (at most
# min(input, model) of their sum); eager dispatch between ops is how an unfused model runs, and only the part that
# fusing or compiling removes is saved. A step that spends a third of its time on either is bound by it by any
# reasonable standard, as a third spent waiting for data is. On a GPU a launch claim also needs the queue found
# empty (QUEUE_EMPTY_DELAY_US); a CPU has no queue, so the share alone, at the CPU's higher cut, carries it.
# The untraced part (a long stretch of Python the profiler does not record, inside or after the model's work) makes
# the rules abstain only on a table too short to show a pattern (below); with more units it is the step-time judges'
# (spikes). A host-only table of at least MIN_PATTERN_STEPS units whose part is not told from none (ABSENCE_SIGMAS)
# holds that part in a few of its units: a one-off, not a pattern too thin to see, so it is neither claimed nor "too
# little evidence" (fewer units: too little evidence, as on a GPU).
# Where the occurrences are too few to separate a part (one profiled step, one stretch of inline Python) and the job's
# step log holds MIN_PATTERN_STEPS steps, the log is asked instead (attributed.logged_share): a one-off in a profiled
# step makes it longer than the log's median step, so only the step's excess over the median can be a one-off; the
# rest recurs, with the log's robust_sigma per profiled step as its error. No new number: the median, robust_sigma
# and ABSENCE_SIGMAS are the ones used everywhere else. Profiled steps of such a job are likewise not "too little
# evidence" (the log shows the step times beyond them, as evidence.RankReach already reads a CPU trace).
# A window started by hand (no step markers) is asked the same way: it lies in logged steps, which ones unknown, and
# touches at most (its length // the shortest logged step) + 2 of them, so at most that many of the log's largest
# excesses over the median step can be a one-off (attributed._window_logged_share). Such a window that names nothing
# cannot call the job healthy where the step it does not cover (1 - its length / the median logged step) is as large
# as a cause's share (the cut's lower edge): the unseen part could hold it. No new number.
HOST_CAUSE_SHARE = DATA_WAIT_SHARE
