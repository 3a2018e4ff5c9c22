"""Every threshold the rules use, with the principle it comes from.

None of these is fitted to the public cases: each is a share of step time, a ratio to the run's own
quiet steps, or a per-op cost, chosen so that a healthy run (step-time CV of 10-26% on a busy host,
see notes/measured.md) stays well below it.
"""

# Data loading: a step that spends a third of its time waiting for the next batch is input-bound by any
# reasonable standard (a healthy pipeline with prefetching hides the load almost entirely).
DATA_WAIT_SHARE = 0.30

# Straggler: the late rank must make its peers wait for at least this share of the step, on most steps.
SKEW_SHARE = 0.10
PERSISTENT_SHARE = 0.60
# ... and its own non-waiting work must account for at least this part of the skew (otherwise its
# lateness is explained by something else, e.g. its data wait).
COMPUTE_EXPLAINS_SKEW = 0.5

# Collective stall: all ranks are inside the collective together for this share of the step, while
# late arrivals explain less than half of the time spent inside.
SHARED_COLLECTIVE_SHARE = 0.35
SKEW_OVER_SHARED_MAX = 0.5

# Spikes (blocking checkpoint): a step is a spike when it is at least SPIKE_RATIO x the run's median
# and also SPIKE_SIGMAS robust standard deviations above it; the spikes together must cost at least
# SPIKE_IMPACT of the run's time (a tenth: a save that costs less is a benign, routine checkpoint), and recur (at least MIN_SPIKES of them, the first step excluded).
SPIKE_RATIO = 1.5
SPIKE_SIGMAS = 4.0
SPIKE_IMPACT = 0.10
MIN_SPIKES = 2
# The extra time of a spike must sit in unexplained host time (not data wait, ops or collectives).
SPIKE_UNEXPLAINED_SHARE = 0.5

# Launch overhead: top-level host ops under 50 us (trace_summary.SHORT_OP_US) fill half the step, and
# there are many of them (a few hundred per step: dispatch cost of ~5-10 us each is then milliseconds).
SHORT_OP_SHARE = 0.50
MIN_OPS_PER_STEP = 200
# On a GPU: the device is idle more than half of the step while kernels average under 20 us.
DEVICE_BUSY_MAX = 0.5
SHORT_KERNEL_US = 20.0

# Symptoms reported alongside causes (observations only).
LONG_COLLECTIVE_SHARE = 0.25
LOW_UTILIZATION_BUSY = 0.5
