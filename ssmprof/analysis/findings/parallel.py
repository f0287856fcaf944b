"""The findings a page of multi-GPU runs answers first (`communication.scaling`, `communication.parallel_overview`,
`ranks.late_ranks`): how well each run scales over its single-GPU run, where its communication time goes, which rank
the others wait for, and whether the collectives are the ones the model's structure predicts; each headline a
number that answers its question, as typed rows (`phrases.Finding`)."""

from __future__ import annotations

import pandas as pd

from ssmprof.analysis.findings.phrases import Finding, graphed_words, ms_span, ranked, span
from ssmprof.analysis.trust.noise import CONFIDENCE


def parallel_findings(scaling: pd.DataFrame, parallel: pd.DataFrame, late: pd.DataFrame) -> pd.DataFrame:
    """Scaling (speedup and efficiency with their intervals), the communication no compute hides against waiting
    for the other ranks, the late rank and the collectives against the model's structure."""
    rows = [_scaling_overview(scaling)]
    runs = [f"{r.run} {r.exposed_transfer_ms:.1f} ms transfer, {r.wait_ms:.1f} ms waiting"
            for r in parallel.itertuples()]
    waiting_more = int((parallel["wait_ms"] > parallel["exposed_transfer_ms"]).sum())
    rows.append(Finding("communication", "waiting" if 2 * waiting_more > len(parallel) else "transfer",
                        f"{ms_span(parallel['exposed_transfer_ms'])} transfer, {ms_span(parallel['wait_ms'])} waiting",
                        "Communication per step no compute hides (the larger rank's, forward and backward): "
                        + "; ".join(runs) + f". Waiting for the other ranks outweighs the transfer in "
                        f"{waiting_more} of {len(parallel)} runs.", "parallel"))
    if len(late):
        rows.append(_late_rank(late))
    else:
        rows.append(Finding("late rank", "none late", "no rank late",
                            "No run has a rank that costs the others more than its noise.", "parallel"))
    predicted = int(parallel["as_predicted"].sum())
    rows.append(Finding("collectives", "as predicted" if predicted == len(parallel) else "not as predicted",
                        f"{predicted} of {len(parallel)} as predicted",
                        f"Collectives per layer as the model's structure predicts in {predicted} of "
                        f"{len(parallel)} runs; the layers' largest collectives reach "
                        f"{parallel['busbw_gb_per_s_min'].min():.0f}-{parallel['busbw_gb_per_s_max'].max():.0f}"
                        " GB/s bus bandwidth.", "parallel"))
    return ranked(rows)


def _scaling_overview(scaling: pd.DataFrame) -> Finding:
    """The scaling finding: each multi-GPU run's speedup and efficiency over its single-GPU run, with intervals;
    the runs without a single-GPU run beside them named, as they have no speedup."""
    multi = scaling[scaling["world_size"] > 1]
    measured, alone = multi[multi["speedup"].notna()], multi[multi["speedup"].isna()]
    gpus = span(multi["world_size"].min(), multi["world_size"].max(), "")
    runs = [f"{r.run} {r.speedup:.2f}x ({r.speedup_low:.2f}-{r.speedup_high:.2f}x), {r.efficiency_pct:.0f} % "
            f"efficiency ({r.efficiency_pct_low:.0f}-{r.efficiency_pct_high:.0f} %)" + graphed_words(r._asdict())
            for r in measured.itertuples()]
    text = (f"Speedup over the same workload's single-GPU run ({100 * CONFIDENCE:.0f} % intervals of the two runs' "
            "timed steps): " + "; ".join(runs) + "." if runs else "No multi-GPU run has its single-GPU run here.")
    text += f" No single-GPU run here for {', '.join(alone['run'])}: no speedup." if len(alone) and runs else ""
    if not runs:
        return Finding("scaling", "no twin", "no speedup measured", text, "scaling")
    speedups = span(measured["speedup"].min(), measured["speedup"].max(), "x", "{:.2f}")
    efficiency = span(measured["efficiency_pct"].min(), measured["efficiency_pct"].max())
    graphed = measured["graphed_speedup"].dropna() if "graphed_speedup" in measured else pd.Series(dtype=float)
    as_graph = f"; {span(graphed.min(), graphed.max(), 'x', '{:.2f}')} as one CUDA graph" if len(graphed) else ""
    return Finding("scaling", "measured", f"{speedups} on {gpus} GPUs ({efficiency} efficiency){as_graph}", text,
                   "scaling")


def _late_rank(late: pd.DataFrame) -> Finding:
    """The late rank of the run where it costs most (`ranks.late_ranks`), what made it late, how far its launch gaps
    exceed the other ranks' launch by launch and where 80 % of that falls (`ranks.gap_excess_words`), and the others
    late beyond noise. Where the hosts pace that run's step (`ranks.hosts_pace`) it says so, not "late": the rank is
    the last to launch (another run of the same job can name another), and the remedy is what takes the launches off
    the hosts."""
    worst = late.iloc[0]
    paced = bool(worst.get("hosts_pace", False))
    others = "; ".join(f"{r.run} rank {r.late_rank} ({r.cost_pct:.0f} %)" for r in late.iloc[1:].itertuples())
    value = (f"hosts pace, rank {worst['late_rank']} last" if paced else f"rank {worst['late_rank']} late") + \
        f": {worst['cost_pct']:.0f} % of an iteration"
    text = (f"In {worst['run']} the others wait for rank {worst['late_rank']}: {worst['cost_ms']:.1f} ms of its "
            f"{worst['iteration_ms']:.1f} ms iteration (noise {worst['cost_noise_ms']:.1f} ms); what made it late: "
            f"{worst['cause'].split(';')[0]}; launch by launch, {worst['gap_excess_where']}."
            + (f" Remedy: {worst['remedy']}." if paced else "")
            + (f" Late beyond noise elsewhere: {others}." if others else ""))
    return Finding("late rank", "hosts pace" if paced else "late", value, text, "late_ranks")
