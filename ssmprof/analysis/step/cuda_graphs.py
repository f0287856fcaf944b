"""What CUDA graphs gave back: the step measured without per-launch host cost, beside the host wait it was estimated
from (`host.host_summary`: the step minus the GPU's busy time in the profiled iteration).

A captured step replays the same kernels without Python, framework dispatch or per-launch driver work, so the gain
(eager step minus graphed step) is at most the host wait; a gain within the step times' spread is no finding
("within noise"), and a graphed step shorter than the GPU's busy time would mean the two steps did not run the same
work (the check).
"""

from __future__ import annotations

import pandas as pd

# The graphed step may fall this far under the profiled iteration's busy time (one iteration's kernel times, against
# a median of several steps) before the check fails.
BUSY_TOLERANCE = 0.05


def graph_gain(harness: dict, host: pd.DataFrame) -> pd.DataFrame | None:
    """One row where run.json's `harness.cuda_graphs` exists (None otherwise): the eager and graphed step, the
    measured gain, the host wait estimated from the eager step, the share of it the graph removed, the verdict
    against the noise (half the spread of each step's timed steps, added) and the busy-time check."""
    graphed = harness.get("cuda_graphs")
    if not graphed:
        return None
    eager_ms, graphed_ms = harness["step_ms"], graphed["step_ms"]
    noise_ms = (_spread(harness["step_times_ms"]) + _spread(graphed["step_times_ms"])) / 2
    gain_ms = eager_ms - graphed_ms
    host_wait_ms = float(host["gpu_idle_ms"].iloc[0])
    busy_ms = float(host["gpu_busy_ms"].iloc[0])
    verdict = "within noise" if abs(gain_ms) <= noise_ms else "faster" if gain_ms > 0 else "slower"
    return pd.DataFrame([{
        "step_ms": eager_ms, "graphed_step_ms": graphed_ms, "gain_ms": gain_ms, "noise_ms": noise_ms,
        "host_wait_ms": host_wait_ms,
        "gain_share_of_host_wait": gain_ms / host_wait_ms if host_wait_ms > 0 else float("nan"),
        "verdict": verdict, "check": "ok" if graphed_ms >= (1 - BUSY_TOLERANCE) * busy_ms
        else f"graphed step under the GPU's busy time ({busy_ms:.1f} ms): not the same work",
    }])


def _spread(times: list[float]) -> float:
    return max(times) - min(times) if times else 0.0
