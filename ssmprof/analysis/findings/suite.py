"""A suite's findings (several workloads on one page): the largest category of each workload, the SSM kernels' range
of share, bound and roof, the host-bound runs and which runs' counters are checked. Each run is read through its
own findings' fields (status) and its host table, never through their sentences."""

from __future__ import annotations

import pandas as pd

from ssmprof.analysis.findings.phrases import Finding, of_kind, ranked, span
from ssmprof.analysis.findings.run import COUNTERS_NONE, COUNTERS_REMOVED, COUNTERS_UNCHECKED


def _busy(host: pd.DataFrame) -> str:
    """A run's GPU busy share of the step as the suite lists it: per rank for a multi-rank run, `all of it` where
    the profiled iteration's kernels outlasted the median step."""
    row = host.iloc[0]
    if "iteration_ms" in row:
        return f"{row['gpu_busy_pct']:.0f} % busy per rank"
    return f"{row['gpu_busy_pct']:.0f} %" if row["gpu_busy_pct"] <= 100 else "all of it"


def _host(findings: dict[str, pd.DataFrame], hosts: dict[str, pd.DataFrame]) -> Finding:
    host_bound = [w for w, f in findings.items() if (row := of_kind(f, "host")) is not None
                  and row["status"] == "host-bound"]
    return Finding("host", "host-bound" if host_bound else "none host-bound", f"{len(host_bound)} host-bound",
                   ("Host-bound: " + ", ".join(host_bound) + ". " if host_bound else "No run is host-bound. ")
                   + "GPU busy share of the step: " + ", ".join(f"{w} {_busy(host)}" for w, host in hosts.items())
                   + ".", "step_times")


def _counters(findings: dict[str, pd.DataFrame]) -> Finding:
    status = {w: row["status"] for w, f in findings.items() if (row := of_kind(f, "counters")) is not None}
    without = [w for w, s in status.items() if s == COUNTERS_NONE]
    counted = {w: s for w, s in status.items() if s != COUNTERS_NONE}
    unchecked = [w for w, s in counted.items() if s == COUNTERS_UNCHECKED]
    removed = [w for w, s in counted.items() if s == COUNTERS_REMOVED]
    if not counted:
        return Finding("counters", COUNTERS_NONE, "none", f"No run has counters (timeline only): {', '.join(without)}.",
                       "step_times")
    text = (f"Counters unchecked (written before the self-checks) in {len(unchecked)} of {len(counted)} runs"
            + (f": {', '.join(unchecked)}" if len(unchecked) < len(counted) else "") + ". "
            if unchecked else "Counters checked in the one run with counters. " if len(counted) == 1
            else f"Counters checked in all {len(counted)} runs. ")
    text += (f"The self-checks removed counters in {', '.join(removed)} (see each run's findings)." if removed else
             "The self-checks removed no counters." if len(unchecked) < len(counted) else "")
    text += f" No counters in {', '.join(without)}." if without else ""
    checked = len(counted) - len(unchecked)
    return Finding("counters", "checked" if checked == len(counted) else "unchecked", f"{checked} checked",
                   text.strip(), "step_times")


def suite_findings(category_shares: pd.DataFrame, ssm_kernels: pd.DataFrame, findings: dict[str, pd.DataFrame],
                   hosts: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Findings across a suite (frames of `summaries.suite`; each run's own findings and host table by workload)."""
    rows = []
    shares = category_shares.set_index("workload")
    largest = [f"{w} {shares.loc[w].idxmax()} ({shares.loc[w].max():.0f} %)" for w in shares.index]
    rows.append(Finding("where the time goes", "measured", f"{len(shares)} workloads",
                        "Largest category per workload: " + ", ".join(largest) + ".", "category_shares"))
    if len(ssm_kernels):
        s = ssm_kernels
        low, high = s.loc[s["ssm_time_pct"].idxmin()], s.loc[s["ssm_time_pct"].idxmax()]
        bound = ", ".join(f"{r.workload} {r.memory_bound_pct:.0f} %" if pd.notna(r.memory_bound_pct)
                          else f"{r.workload} unknown (no counters)" for r in s.itertuples())
        checked = s[s["counters_checked"]]
        roof = (f"at {span(checked['pct_of_roof'].min(), checked['pct_of_roof'].max())} of the roof where "
                f"counters are checked ({', '.join(checked['workload'])})" if len(checked) else
                "roof unknown (no run's counters are checked)")
        dram = s["dram_pct_of_peak"].dropna()
        dram_text = (f"DRAM throughput {span(dram.min(), dram.max())} of peak (Nsight Compute)" if len(dram) else
                     "DRAM throughput unknown (no counters)")
        text = f"SSM kernels take {low['ssm_time_pct']:.0f} % ({low['workload']}) to {high['ssm_time_pct']:.0f} % " \
               f"({high['workload']}) of kernel time, {roof}, with {dram_text}. Share of SSM time memory-bound: " \
               f"{bound}."
        rows.append(Finding("SSM kernels", "measured", span(low["ssm_time_pct"], high["ssm_time_pct"]), text,
                            "ssm_kernels"))
    rows.append(_host(findings, {w: h for w, h in hosts.items() if of_kind(findings[w], "host") is not None}))
    rows.append(_counters(findings))
    return ranked(rows)
