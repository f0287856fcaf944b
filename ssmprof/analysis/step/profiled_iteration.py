"""The profiled iteration against the timed steps: is it one of them (`iteration_check`), and the line a report
shows where it is not (`iteration_note`). The harness times many steps but traces one iteration (or, with the
timing pass, times the kernels over pipelined steps); a traced iteration slower than the steps it stands for
describes waits, exposed communication and a trace of a slower step, while its kernel durations stand. Each
rank's span is read on its own; busy time leaves out what collectives spend waiting for other ranks
(`communication.transfer_split`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ssmprof.analysis.step.communication import transfer_split
from ssmprof.analysis.step.host import busy_ns
from ssmprof.analysis.trust.noise import kept_steps
from ssmprof.schema import RunInfo


def iteration_check(kernels: pd.DataFrame, info: RunInfo) -> pd.DataFrame:
    """One row: is the profiled iteration one of the timed steps? Its kernel span (first start to last end; the
    longest rank's) and GPU busy time (`host.busy_ns`; collectives' waiting excluded, `transfer_split`) beside
    the median timed step and the steps' spread (slowest minus fastest). `representative` where the span lies
    within the spread of the median and the busy time does not exceed the median by more than the spread (None
    where run.json keeps fewer than two steps); `timed_by`: where the kernel times come from: the timing pass
    (CUDA activity alone over pipelined steps, run.json `collectors.timeline.timing`), with the span the detail
    pass alone had (`detail_span_ms`, host ops recorded: what every traced iteration was before the timing pass),
    or the traced iteration itself."""
    steps = np.asarray(kept_steps(info), dtype=np.float64)
    median, spread = float(np.median(steps)), float(steps.max() - steps.min())
    ranks = [rank for rank in _per_rank(kernels) if len(rank)]
    span = max(((rank["start_ns"] + rank["duration_ns"]).max() - rank["start_ns"].min()) / 1e6 for rank in ranks)
    moving = transfer_split(kernels) if "rank" in kernels and kernels["rank"].nunique() > 1 else kernels
    busy = max(busy_ns(rank) / 1e6 for rank in _per_rank(moving) if len(rank))
    span_ok, busy_ok = abs(span - median) <= spread, busy <= median + spread
    why = [] if span_ok else [f"its kernels span {span:.1f} ms against a {median:.1f} ms median step"]
    if not busy_ok:
        why.append(f"its kernels keep the GPU busy {busy:.1f} ms")
    return pd.DataFrame([{"span_ms": span, "busy_ms": busy, "step_ms": median, "step_spread_ms": spread,
                          "steps": len(steps), "span_off_pct": 100 * (span / median - 1),
                          **_timed_by(info),
                          "representative": bool(span_ok and busy_ok) if len(steps) > 1 else None,
                          "why": "; ".join(why) if len(steps) > 1 else "one timed step: no spread to check against"}],
                        dtype=object)


def iteration_note(check: pd.DataFrame, whose: str = "the profiled iteration") -> str | None:
    """One line where the profiled iteration is not representative (`iteration_check`), None otherwise."""
    row = check.iloc[0]
    if row["representative"] is not False:
        return None
    return (f"{whose} is not one of the timed steps ({row['why']}; the {row['steps']} timed steps "
            f"spread {row['step_spread_ms']:.1f} ms): its waits, exposed communication and trace describe a slower "
            f"iteration; kernel durations stand, gaps between them do not")


def _per_rank(kernels: pd.DataFrame) -> list[pd.DataFrame]:
    if "rank" in kernels.columns and kernels["rank"].notna().any():
        return [group for _, group in kernels.groupby("rank")]
    return [kernels]


def _timed_by(info: RunInfo) -> dict:
    timing = info.collectors.timeline.timing
    if timing is None or timing.joined != "joined":
        why = f" ({timing.joined})" if timing is not None else ""
        return {"timed_by": f"the traced iteration{why}", "detail_span_ms": float("nan")}
    return {"timed_by": f"timing pass (median of {timing.iterations} pipelined steps)",
            "detail_span_ms": timing.detail_span_ms}
