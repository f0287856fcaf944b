"""Noise: every time with its confidence interval, and a difference called only outside it.

Step time. The harness keeps every timed step (run.json `harness.step_times_ms`); the step time is their median,
so its interval is a percentile bootstrap of the median (RESAMPLES resamples of the kept steps, a fixed seed: the
same run gives the same interval). Steps of several runs of one configuration are pooled into one sample
(`pooled_steps`), which then holds the variation between runs as well. A difference of two step times is their
ratio (A's median over B's: a speedup of B) with the bootstrap interval of that ratio, each side resampled on its
own.

A verdict (`speedup_verdict`) calls B faster or slower only where the interval excludes 1 and the difference
exceeds RERUN_SPREAD_PCT, how far one configuration's step time moved between runs with nothing changed: the steps
of one run cannot show what differs between runs (host, memory layout, autotuning choices), and two runs compared
are always two runs. Otherwise the difference is "within noise".

Kernel time. A run keeps the kernel times of one profiled iteration only, so no interval over iterations exists.
Two honest substitutes, each labelled in a `basis` column: a kernel configuration launched several times for one
problem shape in the iteration (once per layer, as most are) gets a bootstrap interval from its own launches, each
launch's deviation from its shape's mean ("launches": the spread between launches of one iteration, never the
spread between shapes, nor between iterations), and is judged by that interval alone; a kernel whose every shape
is launched once, and an iteration's total kernel time, get the steps' relative interval and the steps' rerun
floor ("steps": the step's spread lent to its kernels, which overstates it where the host adds noise to the step).
Kernels of a category that all move together between two runs are a systematic shift (`analysis.change.compare`), named
as such, not a finding about each kernel.

The profiled iteration. Its kernel span (first start to last end) and busy time must lie within the timed steps'
spread of their median (`profiled_iteration.iteration_check`); where they do not, waits, exposed communication and the
trace describe a slower iteration than the timed ones, and the check says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ssmprof.schema import RunInfo

CONFIDENCE = 0.95
RESAMPLES = 10_000
LAUNCH_RESAMPLES = 2_000  # per kernel configuration; a run has hundreds of them
SEED = 0
# How much one configuration's step time varied between runs on one GPU: mamba2-lm at the paper shape (8,192 tokens
# a step), measured in the bundled suite, the d_state x chunk_size sweep and the seq_len sweep: 214.7, 218.3 and
# 219.2 ms on the H100 (2.1 %; the suite run measured again 2026-11-27, 218.5 ms, is the one bundled now),
# 203.5, 209.2 and 207.7 ms on the H200 (2.8 %; the suite run measured again later, 207.2 ms, is the one bundled
# now). A difference of two runs smaller than this is within noise.
RERUN_SPREAD_PCT = 2.8
FASTER, SLOWER, WITHIN_NOISE, NO_INTERVAL = "faster", "slower", "within noise", "no interval (one sample)"
STEPS, LAUNCHES = "steps", "launches"


@dataclass(frozen=True)
class Interval:
    """A value with its CONFIDENCE interval (NaN bounds where one sample cannot give one) and the sample size."""

    value: float
    low: float
    high: float
    samples: int

    def scaled(self, value: float) -> Interval:
        """`value` with this interval's relative bounds: how the steps' spread is lent to a kernel time."""
        return Interval(value, value * self.low / self.value, value * self.high / self.value, self.samples)

    def spans(self, point: float) -> bool:
        return bool(self.low <= point <= self.high)

    def pct(self) -> str:
        """The interval of a ratio as a percent difference: `-1.2 % to +3.4 %`."""
        return f"{100 * (self.low - 1):+.1f} % to {100 * (self.high - 1):+.1f} %"


def _quantiles(draws: np.ndarray) -> tuple[float, float]:
    tail = 100 * (1 - CONFIDENCE) / 2
    low, high = np.percentile(draws, [tail, 100 - tail])
    return float(low), float(high)


def _median_draws(times: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.median(times[rng.integers(0, len(times), (RESAMPLES, len(times)))], axis=1)


def kept_steps(info: RunInfo) -> list[float]:
    """A run's kept timed steps (ms); its median step alone where run.json holds no steps (no interval then)."""
    return info.harness.step_times_ms or [info.harness.step_ms]


def pooled_steps(infos: list[RunInfo]) -> np.ndarray:
    """The kept timed steps (ms) of one or several runs of one configuration (their run.json), as one sample."""
    return np.concatenate([np.asarray(kept_steps(info), dtype=np.float64) for info in infos])


def step_interval(times_ms) -> Interval:
    """The median step and the bootstrap interval of the median."""
    times = np.asarray(times_ms, dtype=float)
    median = float(np.median(times))
    if len(times) < 2:
        return Interval(median, np.nan, np.nan, len(times))
    return Interval(median, *_quantiles(_median_draws(times, np.random.default_rng(SEED))), len(times))


# How tightly the timed steps must pin their median before the harness stops adding steps (`steady`): both ends of
# its 95 % interval within this share of it. Host-paced steps vary from step to step far more than GPU-paced ones
# (mamba2-lm small: medians of 29 and 47 ms in two runs of ten steps), so ten steps do not pin them down.
STEADY_PCT = 5.0


def steady(times_ms) -> bool:
    """Whether the steps' median is pinned down: its interval (`step_interval`) within STEADY_PCT of it."""
    interval = step_interval(times_ms)
    reach = max(interval.value - interval.low, interval.high - interval.value)
    return bool(interval.samples > 2 and reach <= STEADY_PCT / 100 * interval.value)


def steps_to_steady(times_ms) -> int:
    """About how many steps would pin the median down (`steady`), from these: a median's interval narrows as one
    over the square root of the steps, so n steps whose interval reaches r % of the median need n (r / STEADY_PCT)^2.
    A script's timed steps are what its own loop gives (`--script` cannot add rounds as the harness does)."""
    interval = step_interval(times_ms)
    reach = max(interval.value - interval.low, interval.high - interval.value) / interval.value * 100
    return max(interval.samples, math.ceil(interval.samples * (reach / STEADY_PCT) ** 2))


def ratio_interval(times_a, times_b) -> Interval:
    """A's median step over B's (a speedup of B where above 1) and the bootstrap interval of that ratio."""
    a, b = np.asarray(times_a, dtype=float), np.asarray(times_b, dtype=float)
    value = float(np.median(a) / np.median(b))
    if len(a) < 2 or len(b) < 2:
        return Interval(value, np.nan, np.nan, min(len(a), len(b)))
    rng = np.random.default_rng(SEED)
    draws = _median_draws(a, rng) / _median_draws(b, rng)
    return Interval(value, *_quantiles(draws), min(len(a), len(b)))


def speedup_verdict(speedup: Interval, floor_pct: float = RERUN_SPREAD_PCT) -> str:
    """B against A, from A's time over B's: faster / slower beyond the interval and the rerun floor, else within
    noise (see the module docstring)."""
    if np.isnan(speedup.low) or np.isnan(speedup.high):
        return NO_INTERVAL
    if speedup.spans(1.0) or abs(speedup.value - 1) * 100 < floor_pct:
        return WITHIN_NOISE
    return FASTER if speedup.value > 1 else SLOWER


SHAPE = "launch_shapes"  # a launch's problem (the launching op's input shapes): one configuration can hold several
# What makes launches the same work: the kernel, its launch configuration and phase, and its problem shape
PROBLEM_KEY = ("kernel_name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "phase", SHAPE)


def _configuration_draws(durations: np.ndarray, shapes: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
    """Bootstrap draws of the total time of one kernel configuration's launches, each launch its shape's mean time
    times a relative deviation drawn from the configuration's own launches (each launch over its shape's mean,
    from the shapes launched more than once). Launches of different shapes (an LM head's GEMM beside the layers'
    in one configuration, 274 against 2,538 us) are never pooled as one sample: their spread would be the
    shapes', not the noise's. None where no shape is launched twice (no deviation to draw)."""
    frame = pd.DataFrame({"time": durations, "shape": shapes})
    means = frame.groupby("shape")["time"].transform("mean").to_numpy()
    repeated = frame.groupby("shape")["time"].transform("size").to_numpy() > 1
    deviations = durations[repeated] / means[repeated]
    if len(deviations) < 2:
        return None
    return deviations[rng.integers(0, len(deviations), (LAUNCH_RESAMPLES, len(durations)))] @ means


def difference_words(speedup: Interval, verdict: str) -> str:
    """B against A as a sentence states it, from the verdict the tables give (`speedup_verdict`, `said_why`):
    "6 % faster (1.06x, 95 % interval 1.06-1.07x)", or "7 % apart, within noise (...)". Prose that states a
    difference takes its words from here, so that it never calls faster what its table calls noise."""
    size = f"{100 * abs(speedup.value - 1):.0f} %"
    interval = f"({speedup.value:.2f}x, 95 % interval {speedup.low:.2f}-{speedup.high:.2f}x)"
    if verdict in (FASTER, SLOWER):
        return f"{size} {verdict} {interval}"
    return f"{size} apart, {verdict} {interval}"


def launch_intervals(kernels: pd.DataFrame, key: list[str], steps: Interval) -> pd.DataFrame:
    """Per group of `key` (e.g. `frame.LAUNCH_KEY`): launches, total time and its interval (`time_ns_low`,
    `time_ns_high`) and the interval's `basis`: "launches" (`_configuration_draws`: its own launches' spread,
    problem by problem: `PROBLEM_KEY`) where a problem of the group is launched more than once, else "steps"
    (`steps`: the run's step interval, lent). A group of several kernels (a category) draws each launch's
    deviation from the group's repeated problems alike."""
    rng = np.random.default_rng(SEED)
    problem = [c for c in PROBLEM_KEY if c in kernels.columns]  # one kernel configuration's one problem shape
    frame = kernels.assign(**{SHAPE: kernels[problem].astype(str).agg("|".join, axis=1)})
    rows = []
    for group, launches in frame.groupby(key, sort=False):
        values = launches["duration_ns"].to_numpy(dtype=float)
        total = float(values.sum())
        draws = _configuration_draws(values, launches[SHAPE].to_numpy(), rng) if len(values) > 1 else None
        if draws is not None:
            (low, high), basis = _quantiles(draws), LAUNCHES
        else:
            lent = steps.scaled(total)
            low, high, basis = lent.low, lent.high, STEPS
        rows.append({**dict(zip(key, group if isinstance(group, tuple) else (group,), strict=True)),
                     "time_ns_low": low, "time_ns_high": high, "basis": basis})
    return pd.DataFrame(rows, columns=[*key, "time_ns_low", "time_ns_high", "basis"])


def kernel_speedups(merged: pd.DataFrame) -> pd.DataFrame:
    """`merged` (A's and B's `launch_intervals` joined: `time_ns_{a,b}`, `time_ns_{a,b}_low/high`, `speedup`,
    `basis`) with `speedup_low`, `speedup_high` and `vs_noise`: the interval of A's time over B's bounded by the
    two intervals (A's low over B's high to A's high over B's low: conservative, as each side's interval holds its
    own noise). A kernel judged on its own launches (basis "launches") is judged by its own interval alone; the
    step's rerun floor (`RERUN_SPREAD_PCT`) is the step's ruler and applies only where the step's interval was
    lent (basis "steps")."""
    frame = merged.copy()
    shown = frame["speedup"].notna()
    frame["speedup_low"] = (frame["time_ns_a_low"] / frame["time_ns_b_high"]).where(shown)
    frame["speedup_high"] = (frame["time_ns_a_high"] / frame["time_ns_b_low"]).where(shown)
    frame["vs_noise"] = [
        said_why(Interval(s, low, high, 2), 0.0 if basis == LAUNCHES else RERUN_SPREAD_PCT) if s == s else ""
        for s, low, high, basis in zip(frame["speedup"], frame["speedup_low"], frame["speedup_high"], frame["basis"],
                                       strict=True)]
    return frame


def said_why(speedup: Interval, floor_pct: float) -> str:
    """`speedup_verdict`, saying why where a difference whose interval excludes 1 is within noise: it is under
    the rerun floor (`floor_pct`), the step's spread between runs."""
    verdict = speedup_verdict(speedup, floor_pct)
    if verdict == WITHIN_NOISE and not speedup.spans(1.0):
        return f"{WITHIN_NOISE}: under the {floor_pct:g} % rerun spread of the step"
    return verdict


def rerun_key(info: RunInfo) -> tuple:
    """What makes two runs reruns of one configuration: GPU model, workload, its config and the parallel split."""
    parallel = info.parallel
    split = (parallel.world_size, parallel.tp, parallel.dp, parallel.sequence_parallel) if parallel else (None,) * 4
    return (info.gpu.name, info.workload.name, repr(sorted(info.workload.config.items())), split)


def reruns(infos: list[RunInfo]) -> dict[tuple, list[RunInfo]]:
    """The runs (run.json) grouped by `rerun_key`: each group's steps pool into one sample (`pooled_steps`)."""
    groups: dict[tuple, list[RunInfo]] = {}
    for info in infos:
        groups.setdefault(rerun_key(info), []).append(info)
    return groups
