"""What CUDA graphs gave back: the step measured without per-launch host cost, beside the host wait it was estimated
from (the step minus the GPU's busy time in the profiled iteration, `host.host_summary`).

On several ranks (`--tp/--dp --cuda-graphs`) both steps are the slowest rank's, step by step, and the busy time is the
described rank's with its collectives' waiting left out (`ranks.rank_host`): the host wait is then what the step
spends beyond that rank's GPU work, the host pace of whichever rank launches last included, not the rank's own
launch gaps (a rank that runs ahead has few gaps and waits in its collectives instead).

A captured step replays the same kernels without Python, framework dispatch or per-launch driver work, so the gain
(eager step minus graphed step) is at most the host wait. The verdict is the speedup's (eager median over graphed
median) with the 95 % bootstrap interval of the two runs of steps (`noise.ratio_interval`, `noise.speedup_verdict`):
a speedup whose interval holds 1 or under the rerun floor is no finding ("within noise"). Not the steps' range: one
slow step (the first replay, or a host-paced --tp step) makes it wide enough to hide a 2x gain; the TP=4 H100 run of
tests/data/tp4-h100-cuda-graphs had eager steps of 132-293 ms and replays of 77.1-133 ms. A graphed step shorter than
the GPU's busy time would mean the two steps did not run the same work (the check).
"""

from __future__ import annotations

import pandas as pd

from ssmprof.analysis.trust.noise import ratio_interval, speedup_verdict

# The graphed step may fall this far under the profiled iteration's busy time (one iteration's kernel times, against
# a median of several steps) before the check fails.
BUSY_TOLERANCE = 0.05


def graph_gain(harness: dict, host: pd.DataFrame) -> pd.DataFrame | None:
    """One row where run.json's `harness.cuda_graphs` exists (None otherwise): the eager and graphed step, the
    measured gain, the host wait estimated from the eager step (the step less `host`'s GPU busy time), the share of
    it the graph removed, the speedup with its 95 % interval and its verdict (faster, slower or within noise; see the
    module docstring) and the busy-time check."""
    graphed = harness.get("cuda_graphs")
    if not graphed:
        return None
    eager_ms, graphed_ms = harness["step_ms"], graphed["step_ms"]
    speedup = ratio_interval(harness["step_times_ms"] or [eager_ms], graphed["step_times_ms"] or [graphed_ms])
    gain_ms = eager_ms - graphed_ms
    busy_ms = float(host["gpu_busy_ms"].iloc[0])
    host_wait_ms = max(eager_ms - busy_ms, 0.0)  # `host_summary`'s gpu_idle_ms; per rank, not the rank's own gaps
    return pd.DataFrame([{
        "step_ms": eager_ms, "graphed_step_ms": graphed_ms, "gain_ms": gain_ms, "speedup": speedup.value,
        "speedup_low": speedup.low, "speedup_high": speedup.high, "host_wait_ms": host_wait_ms,
        "gain_share_of_host_wait": gain_ms / host_wait_ms if host_wait_ms > 0 else float("nan"),
        "verdict": speedup_verdict(speedup), "check": "ok" if graphed_ms >= (1 - BUSY_TOLERANCE) * busy_ms
        else f"graphed step under the GPU's busy time ({busy_ms:.1f} ms): not the same work",
    }])
