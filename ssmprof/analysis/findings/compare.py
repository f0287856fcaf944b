"""A comparison's findings (run A against run B): the step and its speedup judged against its noise, the work both
runs do alike and how its time changed, and what differs in launches (never a speedup across different launch
counts), as typed rows (`phrases.Finding`) with their sentences."""

from __future__ import annotations

import pandas as pd

from ssmprof.analysis.change.compare import SAME
from ssmprof.analysis.findings.phrases import Finding, ms, ranked
from ssmprof.analysis.trust.noise import FASTER, RERUN_SPREAD_PCT, SLOWER


def _host_share(a: pd.Series, b: pd.Series) -> str:
    """A note where the host wait, not the kernels, moved the step."""
    busy, host = a["gpu_busy_ms"] - b["gpu_busy_ms"], a["host_wait_ms"] - b["host_wait_ms"]
    if abs(host) > abs(busy):
        return f" Most of the step's change is the host wait ({host:+.1f} ms against {busy:+.1f} ms of GPU busy " \
               "time): the GPUs explain the smaller part."
    return ""


def _step_verdict(speedup: pd.DataFrame | None) -> str:
    """`compare.step_speedup` in words: B faster / slower than A with the interval, or within noise."""
    if speedup is None:
        return ""
    s = speedup.iloc[0]
    interval = f"95 % interval {s['speedup_low']:.3f}-{s['speedup_high']:.3f}x over {s['steps_a']} and " \
               f"{s['steps_b']} kept steps"
    if s["vs_noise"] in (FASTER, SLOWER):
        return f" B is {s['vs_noise']} than A: {s['speedup']:.3f}x ({interval})."
    return f" A difference of {s['speedup']:.3f}x is {s['vs_noise']} ({interval}; one configuration's step " \
           f"moves {RERUN_SPREAD_PCT} % between runs)."


def compare_findings(steps: pd.DataFrame, categories: pd.DataFrame, launches: pd.DataFrame,
                     speedup: pd.DataFrame | None = None) -> pd.DataFrame:
    """Findings of a comparison (frames of `compare.step_split_table`, `compare_categories_launches`,
    `compare_launches` and `compare.step_speedup`, A first): the step first, then the largest change of time."""
    a, b = steps.iloc[0], steps.iloc[1]
    vs_noise = speedup.iloc[0]["vs_noise"] if speedup is not None else "measured"
    verdict = f" ({vs_noise})" if speedup is not None else ""
    rows = [Finding("step", vs_noise, f"{a['step_ms'] / b['step_ms']:.2f}x step{verdict}",
                    f"Step {a['step_ms']:.1f} ms (A) vs {b['step_ms']:.1f} ms (B).{_step_verdict(speedup)} GPU "
                    f"busy {a['gpu_busy_ms']:.1f} vs {b['gpu_busy_ms']:.1f} ms, waiting for the host "
                    f"{a['host_wait_ms']:.1f} vs {b['host_wait_ms']:.1f} ms." + _host_share(a, b),
                    "steps", abs(float(a["step_ms"] - b["step_ms"])))]
    same = launches[launches["status"] == SAME]
    if len(same):
        time_a, time_b = same["time_ns_a"].sum(), same["time_ns_b"].sum()
        share = time_a / launches["time_ns_a"].sum()
        rows.append(Finding("same work", "same launches", f"{time_a / time_b:.2f}x",
                            f"{len(same)} kernel configurations launch the same number of times in both runs "
                            f"({100 * share:.0f} % of A's kernel time): {ms(time_a)} in A, {ms(time_b)} in B.",
                            "kernels", abs(time_a - time_b) / 1e6))
        big = same[same["time_ns_a"] >= 0.01 * launches["time_ns_a"].sum()]
        if len(big):
            fast, slow = big.loc[big["speedup"].idxmax()], big.loc[big["speedup"].idxmin()]
            rows.append(Finding("largest changes", "measured", f"{fast['speedup']:.2f}x / {slow['speedup']:.2f}x",
                                f"Among those above 1 % of A's time, the largest speedup is {fast['kernel_name']} "
                                f"({fast['phase']}, {fast['speedup']:.2f}x{_kernel_interval(fast)}), the "
                                f"smallest {slow['kernel_name']} ({slow['phase']}, {slow['speedup']:.2f}x"
                                f"{_kernel_interval(slow)}).", "kernels",
                                max(abs(row["time_ns_a"] - row["time_ns_b"]) for row in (fast, slow)) / 1e6))
    moved = launches[launches["status"] != SAME]
    if len(moved):
        rows.append(Finding("launches differ", "differ", f"{len(moved)} configurations",
                            f"{len(moved)} kernel configurations launch a different number of times "
                            f"({ms(moved['time_ns_a'].sum())} in A, {ms(moved['time_ns_b'].sum())} in B); "
                            f"compare them per launch, not in total. {_moved_kernels(moved)}",
                            "kernels", abs(moved["time_ns_a"].sum() - moved["time_ns_b"].sum()) / 1e6))
    differ = categories[categories["speedup"].isna()]
    if len(differ):
        rows.append(Finding("categories", "differ", f"{len(differ)} categories",
                            "Launch counts differ in " + ", ".join(differ["category"]) + ": no speedup shown "
                            "for them.", "categories"))
    return ranked(rows, headlines=1)


def _kernel_interval(row: pd.Series) -> str:
    """`, 1.02-1.05x over launches: faster` where the row carries an interval (`compare.with_kernel_intervals`)."""
    if "speedup_low" not in row or row["speedup_low"] != row["speedup_low"]:
        return ""
    return f", {row['speedup_low']:.2f}-{row['speedup_high']:.2f}x over {row['basis']}: {row['vs_noise']}"


def _moved_kernels(moved: pd.DataFrame, named: int = 4) -> str:
    """Which kernels' launches moved: first those whose launches went to another kernel or launch shape of the
    same op (a partner in `moved_to`: autotuning or a library's heuristic chose differently), by name; then
    those whose count changed without a partner, each with its two counts."""
    partnered = moved[moved["moved_to"].astype(bool)]
    alone = moved[~moved["moved_to"].astype(bool)]
    text = ""
    if len(partnered):
        names = list(dict.fromkeys(partnered["kernel_name"]))
        text += f"Launches moved to another launch shape or kernel of the same op in {len(names)} kernels: " \
                + ", ".join(names[:named]) + (f" and {len(names) - named} more" if len(names) > named else "") + ". "
    if len(alone):
        counts = [f"{r.kernel_name} ({r.phase}) {r.launches_a} vs {r.launches_b}"
                  for r in alone.head(named).itertuples()]
        text += "Launch count changed without such a partner: " + ", ".join(counts) \
                + (f" and {len(alone) - named} more" if len(alone) > named else "") + "."
    return text.strip()
