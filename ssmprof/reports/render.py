"""Assemble reports from analysis frames: one self-contained offline HTML page, markdown, CSV files."""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd
import plotly.io as pio

from ssmprof.analysis.tensor_vector import TENSOR_ONLY, TENSOR_ONLY_SHARE, VECTOR_ONLY, VECTOR_ONLY_SHARE
from ssmprof.reports import figures

TABLE_TITLES = {
    "by_category": "Kernel time by category",
    "top_kernels": "Top kernels",
    "roofline_summary": "Roofline by category (time-weighted)",
    "caches": "Cache hit rates and DRAM throughput (time-weighted)",
    "tensor_vector_ssm": "SSM kernels: tensor vs vector classes",
    "ssd_analytic_vs_measured": "SSD forward kernels: analytic vs measured (per launch)",
    "counter_checks": "Counter self-checks: where each launch's counters come from (share of kernel time)",
    "host": "GPU busy share of the step: host-bound or GPU-bound",
    "limiters_ssm": "What limits each SSM kernel, and the counters that say so",
    "limiters": "What limits the top kernels by time",
    "headroom_by_category": "Headroom by category: step time saved at the roof, and at 80 % of it",
    "headroom": "Headroom: the kernels where an optimization would pay most",
}


def _title(info: dict) -> str:
    workload = info["workload"]
    return f"{workload['name']} --preset {workload['preset']} on {info['gpu']['name']}"


def _figures(info: dict, tables: dict[str, pd.DataFrame]):
    name = _title(info)
    yield figures.breakdown_bars(tables["breakdown"], f"Where the time goes: {name}")
    if "roofline" in tables:
        yield figures.roofline_scatter(tables["roofline"], f"Roofline: {name}")
    if tables["caches"][["l1_hit_rate_pct", "l2_hit_rate_pct"]].notna().any().any():
        yield figures.rate_bars(tables["caches"], f"Caches and DRAM: {name}")
    if "tensor_vector_ssm" in tables:
        yield figures.class_bars(tables["tensor_vector_ssm"], f"Tensor vs vector, SSM kernels: {name}")


OVERVIEW_TITLES = {
    "step_times": "Runs: step time, throughput, memory, profiling cost",
    "category_shares": "Where the time goes: % of kernel time per category",
    "ssm_kernels": "SSM kernels: share of time, DRAM % of peak, hit rates, tensor/vector classes (% of SSM time)",
}


def _overview_html(overview: dict[str, pd.DataFrame]) -> list[str]:
    parts = ["<h2>Suite overview</h2>",
             pio.to_html(figures.share_bars(overview["category_shares"], "Kernel time by category, per workload"),
                         full_html=False, include_plotlyjs=True)]
    if len(overview["ssm_roofline"]):
        figure = figures.roofline_scatter(overview["ssm_roofline"], "Roofline of the SSM kernels of every workload",
                                          color_by="workload")
        parts.append(pio.to_html(figure, full_html=False, include_plotlyjs=False))
    for key, title in OVERVIEW_TITLES.items():
        parts.append(f"<h3>{html.escape(title)}</h3>")
        parts.append(overview[key].to_html(index=False, escape=True, float_format=lambda v: f"{v:.4g}"))
    return parts


def render_html(runs: list[tuple[dict, dict[str, pd.DataFrame], list[str]]],
                overview: dict[str, pd.DataFrame] | None = None) -> str:
    """One page for all runs (a suite overview first, if given); plotly.js is embedded once, so the file works
    offline."""
    parts = _overview_html(overview) if overview else []
    first = not overview
    for info, tables, notes in runs:
        parts.append(f"<h2>{html.escape(_title(info))}</h2>")
        parts += [f'<p class="warning">{html.escape(note)}</p>' for note in notes]
        harness = info["harness"]
        parts.append(f"<p>step {harness['step_ms']:.2f} ms, {harness['throughput']:,.0f} {harness['unit']}/s, "
                     f"{info['coverage']['launches']} kernel launches; kernels: "
                     f"{html.escape(', '.join(f'{k}={v}' for k, v in info['provenance'].items()))}</p>")
        for figure in _figures(info, tables):
            parts.append(pio.to_html(figure, full_html=False, include_plotlyjs=first))
            first = False
        for key, title in TABLE_TITLES.items():
            if key in tables:
                parts.append(f"<h3>{html.escape(title)}</h3>")
                parts.append(tables[key].to_html(index=False, escape=True, float_format=lambda v: f"{v:.4g}"))
    style = "body{font-family:sans-serif;margin:2em} table{border-collapse:collapse} td,th{padding:2px 8px}" \
            " .warning{color:#a40}"
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>ssmprof report</title><style>{style}"
            f"</style></head><body><h1>ssmprof report</h1>{''.join(parts)}</body></html>")


COMPARE_COLUMNS = ["kernel_name", "phase", "match", "launches_a", "launches_b", "time_ns_a", "time_ns_b", "speedup",
                   "dram_throughput_pct_a", "dram_throughput_pct_b", "flop_per_s_a", "flop_per_s_b",
                   "l2_hit_rate_pct_a", "l2_hit_rate_pct_b", "ai_shift"]


def render_compare(info_a: dict, info_b: dict, categories: pd.DataFrame, kernels: pd.DataFrame, notes: list[str],
                   fmt: str, top: int = 30, rooflines: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> str:
    """Run A against run B: categories and the top kernels (by A's time), as HTML or markdown; in HTML also
    both runs on one roofline, each on its own GPU's ceilings (`rooflines`, where both have counters)."""
    title = f"{_title(info_a)}  vs  {_title(info_b)}"
    kernels = kernels[COMPARE_COLUMNS].head(top)
    if fmt == "md":
        lines = [f"# ssmprof compare: {title}", ""] + [f"> {note}" for note in notes]
        lines += ["", "## By category", "", markdown_table(categories), "", "## Kernels", "",
                  markdown_table(kernels)]
        return "\n".join(lines) + "\n"
    figure = figures.compare_bars(categories, f"A: {info_a['gpu']['name']}", f"B: {info_b['gpu']['name']}")
    parts = [f"<h1>ssmprof compare</h1><h2>{html.escape(title)}</h2>"]
    parts += [f'<p class="warning">{html.escape(note)}</p>' for note in notes]
    parts.append(pio.to_html(figure, full_html=False, include_plotlyjs=True))
    if rooflines is not None:
        overlay = figures.roofline_overlay({f"A: {info_a['gpu']['name']}": rooflines[0],
                                            f"B: {info_b['gpu']['name']}": rooflines[1]},
                                           "Roofline: both runs, each on its own GPU's ceilings")
        parts.append(pio.to_html(overlay, full_html=False, include_plotlyjs=False))
    for heading, table in (("By category", categories), ("Kernels (top by time in A)", kernels)):
        parts.append(f"<h3>{heading}</h3>" + table.to_html(index=False, escape=True, float_format=lambda v: f"{v:.4g}"))
    return f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>ssmprof compare</title></head><body>" \
           f"{''.join(parts)}</body></html>"


def render_projection(info: dict, target_gpu: str, categories: pd.DataFrame,
                      checked: tuple[dict, pd.DataFrame] | None = None) -> str:
    """Markdown of a projection, headed as one; with the error against a run measured on the target."""
    lines = [f"# PROJECTION (not a measurement): {info['workload']['name']} from {info['gpu']['name']} to "
             f"{target_gpu}", "", "Roofline floor on the target (datasheet ceilings) plus each kernel's measured "
             "time above its floor.",
             "", markdown_table(categories)]
    if checked is not None:
        target_info, errors = checked
        lines += ["", f"## Against the run measured on {target_info['gpu']['name']}", "", markdown_table(errors)]
    return "\n".join(lines) + "\n"


def overview_markdown(overview: dict[str, pd.DataFrame], level: str = "##") -> list[str]:
    lines = []
    for key, title in OVERVIEW_TITLES.items():
        lines += ["", f"{level} {title}", "", markdown_table(overview[key])]
    return lines


def render_markdown(runs: list[tuple[dict, dict[str, pd.DataFrame], list[str]]],
                    overview: dict[str, pd.DataFrame] | None = None) -> str:
    lines = ["# ssmprof report"] + (overview_markdown(overview) if overview else [])
    for info, tables, notes in runs:
        lines += ["", f"## {_title(info)}", ""] + [f"> {note}" for note in notes]
        for key, title in TABLE_TITLES.items():
            if key in tables:
                lines += ["", f"### {title}", "", markdown_table(tables[key])]
    return "\n".join(lines) + "\n"


def markdown_table(table: pd.DataFrame) -> str:
    def cell(value) -> str:
        text = f"{value:.4g}" if isinstance(value, float) else str(value)
        return text.replace("|", "\\|")

    header = "| " + " | ".join(map(str, table.columns)) + " |"
    rule = "|" + "---|" * len(table.columns)
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join([header, rule, *rows])


def write_csv(tables: dict[str, pd.DataFrame], folder: Path, prefix: str) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for key, table in tables.items():
        path = folder / f"{prefix}{key}.csv"
        table.to_csv(path, index=False)
        paths.append(path)
    return paths


RESULTS_START, RESULTS_END = "<!-- results:start -->", "<!-- results:end -->"


def render_results(labels: tuple[str, str], step_times: pd.DataFrame, shares: pd.DataFrame, ssm: pd.DataFrame,
                   pair: pd.DataFrame, errors: pd.DataFrame) -> str:
    """The README's Results section (markdown between RESULTS_START and RESULTS_END), from the bundled runs."""
    a, b = labels
    rounded = {name: frame.round(1) for name, frame in
               (("steps", step_times.astype({"throughput": "int64"})), ("shares", shares), ("ssm", ssm),
                ("errors", errors))}
    rounded["pair"] = pair.round(2)
    cost = step_times.groupby("gpu", sort=False).agg(workloads=("workload", "size"), launches=("launches", "sum"),
                                                    profile_wall_s=("profile_wall_s", "sum")).reset_index().round(0)
    lines = [
        RESULTS_START,
        "_Generated by `ssmprof results --readme README.md` from the reference runs bundled in `ssmprof/reference/` "
        "(paper presets, sampled counters); do not edit by hand. `make profile` on a machine without a GPU renders "
        "the full reports._",
        "", f"**Runs** ({a} and {b}): step time, throughput, peak memory, launches per iteration, share of kernel "
        "time with counters, and the wall time of profiling each (harness + Nsight Compute).", "",
        markdown_table(rounded["steps"]),
        "", f"**Where the time goes** on the {a}: % of kernel time per category.", "",
        markdown_table(rounded["shares"]),
        "", f"**SSM kernels** on the {a}: their share of kernel time, time-weighted DRAM throughput (% of peak), L1/L2 "
        "hit rates, % of the roof at their intensity (measured ceilings), share of SSM time memory-bound, and the "
        f"share of forward / backward SSM time in each tensor/vector class ({TENSOR_ONLY}: >= "
        f"{100 * TENSOR_ONLY_SHARE:.0f} % of FLOPs on the tensor path; {VECTOR_ONLY}: <= {100 * VECTOR_ONLY_SHARE:.0f} "
        "%).", "", markdown_table(rounded["ssm"]),
        "", f"**{a} vs {b}** (A = {a}, B = {b}): speedup = A's time over B's.", "", markdown_table(rounded["pair"]),
        "", "**Projection check**: each run projected onto the other GPU (`ssmprof project --check`), largest "
        "per-category error over categories above 5 % of kernel time.", "", markdown_table(rounded["errors"]),
        "", "**Profiling cost** per GPU (sum over the suite's workloads).", "", markdown_table(cost),
        RESULTS_END,
    ]
    return "\n".join(lines) + "\n"
