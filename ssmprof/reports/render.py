"""Assemble reports from analysis frames: HTML pages, markdown, CSV files.

A page answers in its first screen (findings, the step's breakdown, the chart that matters most) and keeps the
rest (per run, per kernel, per table) in collapsed sections that its findings' links open. Pages load plotly.js
from `PLOTLY_JS` beside them (written once per folder by `pipeline.outputs`): a page is its data, not the
library, and still opens offline."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import plotly.io as pio
from tabulate import tabulate

from ssmprof.analysis.change.projection import ERROR_MIN_SHARE
from ssmprof.analysis.common.sections import Summary
from ssmprof.analysis.findings.phrases import shown_pct
from ssmprof.analysis.findings.run import on_cpu, workload_words
from ssmprof.analysis.limits.tensor_vector import (
    CLASS_RULE,
    STUDY_SSM_DRAM_PCT,
    TENSOR_ONLY,
    TENSOR_ONLY_SHARE,
    VECTOR_ONLY,
    VECTOR_ONLY_SHARE,
)
from ssmprof.analysis.summaries.suite import SuiteOverview
from ssmprof.analysis.trust.noise import CONFIDENCE
from ssmprof.reports import figures, style
from ssmprof.reports.csv_files import write_table
from ssmprof.reports.style import PLOTLY_JS
from ssmprof.schema import STALL_REASONS, Link, ParallelSection, RunInfo

TABLE_TITLES = {
    "by_category": "Kernel time by category",
    "top_kernels": "Top kernels",
    "roofline_summary": "Roofline by category (time-weighted; DRAM throughput is in the cache table)",
    "calibration_defects": "Calibration defects: checked launches faster than a ceiling (the roof is not raised; "
                           "the ceiling's calibration fell short)",
    "caches": "Cache hit rates and DRAM throughput (time-weighted, Nsight Compute)",
    "tensor_vector_ssm": "SSM kernels: tensor vs vector classes",
    "table_ii": "Table II in the study's form and order: SSM kernels per class, forward, backward and the forward "
                "kernels recomputed in backward apart (for mamba2-lm, the study's rows beside ssmprof's). "
                + CLASS_RULE,
    "table_ii_causes": "Why Table II differs from the study's: each cause with its number",
    "dram_beside_study": "SSM kernels' DRAM use beside the study's 57.5 %, each against the ceiling it is taken of",
    "tensor_vector_thresholds": "Tensor vs vector: the tolerance (% of FLOPs off the kernel's main pipe) at which "
                                "each SSM kernel changes class; today's is 1 %",
    "tensor_instructions": "Tensor instructions (Hopper): wgmma or mma.sync, per category (bf16 tensor work)",
    "ssd_analytic_vs_measured": "SSM forward kernels (SSD, Mamba-3, Gated DeltaNet): analytic vs measured (per launch)",
    "ssd_dataflow": "SSD chain data movement, per layer: bytes each kernel reads that an earlier kernel of the chain "
                    "wrote (modelled from the launch shapes), where they came from (DRAM reads beyond the external "
                    "inputs, Nsight Compute)",
    "ssd_fusion": "WHAT-IF (not measured): the SSD chain fused into one kernel per phase, per layer: minimum DRAM "
                  "bytes, time bounded below by the roofs and estimated above as L2-bound at the chain's L2 rate",
    "counter_checks": "Counter self-checks: where each launch's counters come from (share of kernel time)",
    "gemm_work": "GEMM self-check: measured tensor work against 2MNK and against the work whole tiles issue "
                 "(checked counters)",
    "lent_by_grid": "Lent by grid: the held-out check. Each family (one kernel instantiation and tile, launched at "
                    "many grids) was profiled at grid bins and lends to its other launches, work counters scaled by "
                    "grid; its measured launches inside its measured grids, lent to as if unmeasured, give the "
                    "error of that lending (median |lent / measured - 1|), largest share of kernel time first",
    "counter_pass_costs": "The counter plan's cost: each Nsight Compute pass's seconds predicted before it ran "
                          "against its wall time (the prediction's error: how far a --budget can be trusted)",
    "host": "GPU busy share of the step (of each rank's profiled iteration on several ranks, collectives' waiting "
            "excluded): host-bound, GPU-bound or waiting for a late rank",
    "host_time": "Where the host's time goes (sampled steps): the host's step, the share the sampler named, the GPU's "
                 "wait it covers, and what sampling cost the step (its interval)",
    "host_categories": "The host's time by what it did: ms a step (95 % interval over the sampled steps) and share",
    "host_sites": "The host's time by line: the innermost frame outside torch, Triton and the standard library, "
                  "ms a step (95 % interval over the sampled steps) and share",
    "rank_busy": "Per rank: busy time (collectives' waiting excluded) and its share of the rank's profiled "
                 "iteration, compute, transfer and waiting, and the host's launch gaps",
    "rank_hosts": "Per rank: its host's sampled step, what it spent most on and where, garbage collection and "
                  "synchronizing calls; where it ran (CPUs and their NUMA nodes beside its GPU's), its threads, "
                  "context switches and CPU migrations a timed step",
    "late_rank_sites": "The late rank's host against the others': per line, its ms a step beside the other ranks' "
                       "median, the excess and its running share (the lines up to 80 % of its excess)",
    "late_rank": "The late rank: the one the others wait for at the collectives (it arrived last: shortest kernel), "
                 "what it costs the iteration (its noise: the most any other rank costs), what made it late and, where "
                 "the hosts pace the step, the remedy",
    "scaling_efficiency": "Scaling against the single-GPU run: speedup and efficiency with the 95 % interval of "
                          "the two runs' kept timed steps",
    "profiled_iteration": "The profiled iteration against the timed steps: kernel span and busy time beside the "
                          "median step and the steps' spread (representative where within it)",
    "cuda_graphs": "CUDA graphs: the step captured and replayed without per-launch host cost, beside the host wait "
                   "estimated from the eager step (its step minus the GPU's busy time)",
    "limiters_ssm": "What limits each SSM kernel, and the counters that say so",
    "limiters": "What limits the top kernels by time",
    "instruction_bounds": "Instruction-level bounds of the SSM kernels: the busiest pipe, issue slots and shared "
                          "memory, % of peak while the SM is active; the largest binds (warp instructions per shared "
                          "wavefront, L2 and DRAM sector)",
    "stalls": "Why warps wait: each stall reason's share of the warps resident per issue cycle (stall pass)",
    "headroom_by_category": "Headroom by category: step time saved at the roof, and at 80 % of it",
    "headroom": "Headroom: the kernels where an optimization would pay most",
    "per_rank": "Per rank: step time, loss, compute time, and communication time split into transfer and waiting "
                "for the other ranks",
    "collective_counts": "Communication: collectives per layer, measured on every rank vs predicted by the model's "
                         "structure",
    "bus_bandwidth": "Communication: bus bandwidth (NCCL-tests busbw) per collective and size on the transfer "
                     "time (each collective's shortest kernel over the ranks), % of the link's datasheet bandwidth; "
                     "the mean wait for the other ranks beside it",
    "exposed_communication": "Communication: exposed time (no compute overlaps it) and overlap share, per rank and "
                             "phase; the collectives' kernels split into waiting for the other ranks and transfer",
    "rank_imbalance": "Rank imbalance per phase: slowest vs fastest rank",
    "communication_projection": "PROJECTION (not measured): communication time per step at other GPU counts and "
                                "links (alpha-beta ring model at link peak, no overlap; latencies assumed)",
}
# Columns a table does not show: one DRAM figure per page (Nsight Compute's throughput, in the cache table),
# not a second one beside it from the roofline; the stall table's twenty reason shares (its chart draws them,
# the CSV keeps them; the page shows the top three waits); a limiter table's verdict without its number (what
# the headline adds up by; the limiter column says it).
HIDDEN = {"roofline_summary": ("pct_of_dram_peak",), "limiters": ("limiter_name",),
          "limiters_ssm": ("limiter_name",), "stalls": tuple(f"{reason}_share" for reason in STALL_REASONS)}
NOWRAP = {"phase", "category", "counter_status", "verdict", "class", "gpu", "workload"}

STYLE = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1500px;
 padding:0 1.5em;color:#222;line-height:1.4}
h1{margin-bottom:.2em} h2{margin-top:2.2em;border-bottom:2px solid #ddd;padding-bottom:.2em} h3{margin-top:1.6em}
table{border-collapse:collapse;font-size:13px;margin:.5em 0;max-width:100%}
td,th{padding:3px 8px;border-bottom:1px solid #e4e4e4;text-align:right;vertical-align:top;white-space:nowrap}
th{white-space:normal;min-width:4em}
th{background:#f4f4f4;position:sticky;top:0;cursor:pointer;text-align:center}
td.text{text-align:left;max-width:24em;min-width:6em;overflow-wrap:break-word;white-space:normal}
td.nowrap{white-space:nowrap;min-width:0}
.scroll{overflow-x:auto;max-width:100%}
.warning{color:#a40} .note{color:#666;font-style:italic}
.findings{background:#f6f8fa;border-left:4px solid #1f77b4;padding:.6em 1.2em;margin:1em 0}
.findings li{margin:.35em 0} .findings .value{font-weight:600}
table.provenance td{text-align:left;border:none;padding:1px 10px 1px 0;font-size:13px;white-space:normal}
table.provenance td:first-child{color:#666;white-space:nowrap}
.swatch{display:inline-block;width:.8em;height:.8em;margin-right:.3em;vertical-align:middle}
details{margin:.4em 0} details>summary{cursor:pointer;padding:.25em 0}
details.run{border:1px solid #ddd;border-radius:4px;padding:.2em .8em;margin:.5em 0}
details.run>summary{font-size:1.1em} details.run>summary .value{color:#555;font-weight:normal}
details.more>summary{color:#1f4e79}
.first{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(560px,100%),1fr));gap:1em;align-items:start}
.first>div{min-width:0;overflow:hidden}
nav.runs a{white-space:nowrap} nav.runs b{margin-right:.4em}
.modebar-container{opacity:0;transition:opacity .2s} .plotly-graph-div:hover .modebar-container{opacity:1}
"""
# The last rule: plotly's toolbar only while the pointer is on its chart (plotly.js shows it for good where it
# takes the device for a touch screen, headless browsers included), never over a chart's title.
# Click a column header to sort the table by it (numbers by value, text alphabetically).
SORT_SCRIPT = """<script>
document.querySelectorAll('table.data th').forEach(function(th, col){
  th.title = 'click to sort';
  th.addEventListener('click', function(){
    var body = th.closest('table').tBodies[0], rows = Array.from(body.rows);
    var up = th.dataset.up !== '1'; th.dataset.up = up ? '1' : '0';
    var key = function(r){ var t = r.cells[col].dataset.v; var n = parseFloat(t);
                           return isNaN(n) ? r.cells[col].textContent : n; };
    rows.sort(function(a, b){ var x = key(a), y = key(b);
      var c = (typeof x === 'number' && typeof y === 'number') ? x - y : String(x).localeCompare(String(y));
      return up ? c : -c; });
    rows.forEach(function(r){ body.appendChild(r); });
  });
});
function openTo(id){ var e = id && document.getElementById(id); if(!e) return;
  for(var d = e; d; d = d.parentElement){ if(d.tagName === 'DETAILS') d.open = true; }
  e.scrollIntoView(); }
window.addEventListener('hashchange', function(){ openTo(location.hash.slice(1)); });
window.addEventListener('load', function(){ openTo(location.hash.slice(1)); });
document.addEventListener('toggle', function(ev){
  if(!ev.target.open || !window.Plotly) return;
  ev.target.querySelectorAll('.plotly-graph-div').forEach(function(p){ Plotly.Plots.resize(p); });
}, true);
</script>"""


# Shown where plotly.js did not load (the page moved without the file beside it): the charts' absence explained.
NO_PLOTLY = (f'<p id="no-plotly" class="warning" style="display:none">The charts of this page are not drawn: '
             f'{PLOTLY_JS} is missing beside it (ssmprof writes it with the page; copy it along, or render the '
             f'page again).</p><script>if(!window.Plotly){{document.getElementById("no-plotly").style.display='
             f'"block";}}</script>')


def _page(title: str, body: list[str]) -> str:
    """A page whose browser tab says what it is (`title`), loading plotly.js from beside it."""
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f'<script src="{PLOTLY_JS}"></script><style>{STYLE}</style></head><body>{NO_PLOTLY}{"".join(body)}'
            f"{SORT_SCRIPT}</body></html>")


def _title(info: RunInfo) -> str:
    """What a run is, in one line: workload, preset, GPU, and for a multi-GPU run its layout."""
    device = "CPU" if on_cpu(info) else info.gpu.name
    title = f"{workload_words(info)} on {device}"
    parallel = info.parallel
    if parallel:
        units = "processes" if on_cpu(info) else "GPUs"  # gloo ranks on the CPU: no GPU among them
        title += f", TP={parallel.tp} DP={parallel.dp} ({parallel.world_size} {units}" + \
                 ("" if parallel.sequence_parallel else ", no sequence parallelism") + ")"
    return title


def chart(figure) -> str:
    """A figure as a div and the call that draws it; plotly.js itself comes from the page's head. Every chart
    carries the one small template of `style.LAYOUT`, never plotly's default (its 5.5 KB a chart made a suite page
    of 54 charts 0.3 MB heavier)."""
    figure.layout.template = style.LAYOUT["template"]
    return pio.to_html(figure, full_html=False, include_plotlyjs=False, default_height=figure.layout.height or 480,
                       config={"displaylogo": False, "responsive": True, "displayModeBar": "hover"})


def collapsed(summary: str, body: str, ident: str | None = None, kind: str = "more", open_: bool = False) -> str:
    """A section shown by its one-line summary; the body opens on a click (or on a link into it)."""
    attributes = f' class="{kind}"' + (f' id="{html.escape(ident)}"' if ident else "") + (" open" if open_ else "")
    return f"<details{attributes}><summary>{summary}</summary>{body}</details>"


def shown(table: pd.DataFrame, key: str = "") -> tuple[pd.DataFrame, list[str]]:
    """The columns a page shows of `table` (less `HIDDEN`'s), and each row's unit: where the row's numbers are in
    a unit of its own (`style.ROW_UNIT`), those cells carry it and the `unit` column goes."""
    table = table.drop(columns=[c for c in HIDDEN.get(key, ()) if c in table.columns])
    if "unit" in table and any(column in table for column in style.ROW_UNIT):
        return table.drop(columns="unit"), table["unit"].fillna("").astype(str).tolist()
    return table, [""] * len(table)


def table_html(table: pd.DataFrame, key: str = "", anchor: str | None = None) -> str:
    """A frame as an HTML table: human headers, formatted numbers with units, long names wrapped, sortable."""
    table, units = shown(table, key)
    head = "".join(f"<th>{html.escape(style.header(str(c)))}</th>" for c in table.columns)
    rows = []
    for unit, values in zip(units, table.itertuples(index=False), strict=True):
        cells = []
        for column, value in zip(table.columns, values, strict=True):
            text = style.cell(str(column), value, unit)
            numeric = isinstance(value, int | float) and not isinstance(value, bool)
            if numeric:
                sort = "" if pd.isna(value) else f' data-v="{float(value)!r}"'
                cells.append(f"<td{sort}>{html.escape(text)}</td>")
            else:
                swatch = (f'<span class="swatch" style="background:{style.category_color(text)}"></span>'
                          if column == "category" else "")
                wrap = " nowrap" if column in NOWRAP else ""
                cells.append(f'<td class="text{wrap}">{swatch}{html.escape(text)}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    ident = f' id="{html.escape(anchor)}"' if anchor else ""
    return (f'<div class="scroll"><table class="data"{ident}><thead><tr>{head}</tr></thead><tbody>'
            f"{''.join(rows)}</tbody></table></div>")


def provenance_html(provenance: pd.DataFrame, other: pd.DataFrame | None = None,
                    labels: tuple[str, str] = ("", "")) -> str:
    """What a run is (item: value), or two runs side by side (item: A, B)."""
    head = ""
    if other is not None:
        head = f"<tr><td></td><td><b>{html.escape(labels[0])}</b></td><td><b>{html.escape(labels[1])}</b></td></tr>"
    rows = []
    for index, r in enumerate(provenance.itertuples()):
        cells = f"<td>{html.escape(str(r.item))}</td><td>{html.escape(str(r.value))}</td>"
        if other is not None:
            cells += f"<td>{html.escape(str(other['value'].iloc[index]))}</td>"
        rows.append(f"<tr>{cells}</tr>")
    return f'<table class="provenance">{head}{"".join(rows)}</table>'


FIRST_FINDINGS = 5  # findings a first screen shows; the rest one click away, so the first chart stays in view


def findings_html(findings: pd.DataFrame, prefix: str) -> str:
    """The findings in their order (most important first): the first `FIRST_FINDINGS` shown, the rest collapsed
    under one line that says how many more there are."""
    items = [f'<li><span class="value">{html.escape(str(r.value))}</span> &middot; {html.escape(r.finding)} '
             f'<a href="#{prefix}-{html.escape(r.anchor)}">evidence</a></li>' for r in findings.itertuples()]
    rest = items[FIRST_FINDINGS:]
    more = collapsed(f"{len(rest)} more finding{'s' if len(rest) > 1 else ''}",
                     f'<ol start="{FIRST_FINDINGS + 1}">{"".join(rest)}</ol>') if rest else ""
    return f'<div class="findings"><b>Findings</b><ol>{"".join(items[:FIRST_FINDINGS])}</ol>{more}</div>'


def _figures(info: RunInfo, summary: Summary):
    """(figure or None, why not) for each chart of a run, the two of its first screen first (the step's
    breakdown, the roofline): a chart without data is left out, and says so."""
    name = _title(info)
    yield figures.breakdown_bars(summary.breakdown, "Where the time goes: kernel time per phase"), ""
    points = summary.roofline_points if summary.roofline_points is not None else summary.roofline
    if points is not None:
        yield figures.roofline_scatter(points, "Roofline: each kernel (per launch configuration) against its roof"), ""
    else:
        yield None, "No roofline: this run has no counters (profile with --counters sampled or all)."
    if summary.caches[["l1_hit_rate_pct", "l2_hit_rate_pct"]].notna().any().any():
        yield figures.rate_bars(summary.caches, f"Caches and DRAM: {name}"), ""
    else:
        yield None, "No cache chart: no kernel of this run has hit-rate counters."
    if summary.stalls is not None:
        yield figures.stall_bars(summary.stalls, f"Why warps wait, kernels the stall pass measured: {name}"), ""
    if summary.instruction_bounds is not None and len(summary.instruction_bounds):
        yield figures.bound_bars(summary.instruction_bounds, f"What bounds the SSM kernels' instructions: {name}"), ""
    if summary.tensor_vector_ssm is not None:
        if len(summary.tensor_vector_ssm):
            yield figures.class_bars(summary.tensor_vector_ssm, f"Tensor vs vector, SSM kernels: {name}"), ""
        else:
            yield None, "No tensor vs vector chart: no SSM kernels in this run."


def figures_html(charts) -> list[str]:
    """Each (figure or None, why not) of `charts` as HTML, a chart left out as its reason."""
    return [chart(figure) if figure is not None else f'<p class="note">{html.escape(why)}</p>'
            for figure, why in charts]


def tables_html(tables: dict[str, pd.DataFrame], titles: dict[str, str], prefix: str) -> list[str]:
    """Each table under its title, collapsed: a finding's evidence link opens the one it names."""
    return [collapsed(html.escape(title), table_html(tables[key], key, f"{prefix}-{key}"))
            for key, title in titles.items() if key in tables]


OVERVIEW_TITLES = {
    "step_times": "Runs: step time, throughput, memory, profiling cost",
    "category_shares": "Where the time goes: % of kernel time per category",
    "ssm_kernels": "SSM kernels: share of time, DRAM % of peak, hit rates, tensor/vector classes (% of SSM time)",
    "ssd_dataflow_by_cache": "SSD chain data movement per layer with the caches flushed before each Nsight Compute "
                             "pass (its default: cold L2) and kept (what the kernels before left in L2), side by "
                             "side: chain bytes read from DRAM in each, and what L2 serves once kept",
    "scaling": "Scaling: step time from 1 to N GPUs (speedup and efficiency over the single-GPU run)",
    "parallel": "Communication per multi-GPU run: collectives per layer (as the structure predicts?), exposed transfer "
                "and wait per step, bus bandwidth of the layers' largest collectives",
    "late_ranks": "The late rank of each run where one costs the others more than its noise (the most any other "
                  "rank costs): its cost to the profiled iteration, what made it late, whether the hosts pace the "
                  "step and the remedy",
    "late_rank_gaps": "Where the late rank's launch gaps exceed the others', launch by launch (the n-th compute "
                      "launch of every rank aligned): its GPU idle before each launch less the other ranks' median, "
                      "summed by phase, layer and the kernel whose launch waited; per way, the fewest groups making "
                      "80 % of the excess, with the median gap before their launches on the late rank and the others",
}


PARALLEL_KEYS = ("scaling", "parallel", "late_ranks", "late_rank_gaps")  # a multi-GPU page's first tables, open


def _parallel_html(overview: SuiteOverview) -> list[str]:
    """A multi-GPU page's first screen: its findings (scaling, communication, the late rank), the speedups with
    their intervals and the transfer against the waiting per run, then their tables open."""
    parts = [findings_html(overview.parallel_findings, "suite")]
    first = [chart(figures.scaling_bars(overview.scaling, f"Speedup over one GPU per run ({100 * CONFIDENCE:.0f} % "
                                        "interval), "
                                        "against perfect scaling")),
             chart(figures.communication_bars(overview.parallel, "Communication per step no compute hides: "
                                              "transfer and waiting for the other ranks"))]
    parts.append(f'<div class="first">{"".join(first)}</div>')
    tables = overview.frames()
    parts += [collapsed(html.escape(OVERVIEW_TITLES[key]), table_html(tables[key], key, f"suite-{key}"), open_=True)
              for key in PARALLEL_KEYS if len(tables[key])]
    return ['<h2 id="scaling">Scaling and communication</h2>', *parts]


def _overview_html(overview: SuiteOverview) -> list[str]:
    """The suite's first screen (findings, kernel time by category per workload, the SSM kernels' roofline), then
    its tables but the multi-GPU ones, collapsed; a page of multi-GPU runs leads with their scaling and
    communication (`_parallel_html`), the runs as a suite after them."""
    parts = [findings_html(overview.findings, "suite")]
    first = [chart(figures.share_bars(overview.category_shares, "Where the time goes: % of kernel time per "
                                      "category, per workload"))]
    if len(overview.ssm_roofline):
        first.append(chart(figures.roofline_scatter(overview.ssm_roofline, "The SSM kernels of every workload "
                                                    "against their roofs", color_by="workload")))
    else:
        first.append('<p class="note">No SSM roofline: no run of this set has counters.</p>')
    parts.append(f'<div class="first">{"".join(first)}</div>')
    tables = {key: frame for key, frame in overview.frames().items() if key not in PARALLEL_KEYS}
    parts += tables_html(tables, OVERVIEW_TITLES, "suite")
    if overview.parallel_findings is None:
        return parts
    return [*_parallel_html(overview), '<h2 id="suite">The runs as a suite</h2>', *parts]


def _run_html(index: int, info: RunInfo, summary: Summary, notes: list[str]) -> list[str]:
    """One run: what it is, its findings, its breakdown and roofline side by side, then the rest collapsed."""
    prefix = f"run{index}"
    parts = [provenance_html(summary.provenance), findings_html(summary.findings, prefix)]
    parts += [f'<p class="warning">{html.escape(note)}</p>' for note in notes]
    drawn = figures_html(_figures(info, summary))
    parts.append(f'<div class="first">{"".join(drawn[:2])}</div>')
    if drawn[2:]:
        parts.append(collapsed("More charts: caches, warp stalls, tensor vs vector", "".join(drawn[2:])))
    return parts + tables_html(summary.frames(), TABLE_TITLES, prefix)


def _run_summary(label: str, info: RunInfo) -> str:
    step = info.harness.step_ms
    value = f" &middot; step {step:.2f} ms" if step is not None else ""
    return f'<b>{html.escape(label)}</b> <span class="value">{html.escape(_title(info))}{value}</span>'


def _navigation(labels: list[str], infos: list[RunInfo]) -> str:
    """Links to every run, single-GPU and multi-GPU runs on lines of their own."""
    groups: dict[str, list[str]] = {}
    for index, (label, info) in enumerate(zip(labels, infos, strict=True)):
        parallel = info.parallel
        group = f"TP={parallel.tp} DP={parallel.dp}" if parallel else "Single GPU"
        groups.setdefault(group, []).append(f'<a href="#run{index}">{html.escape(label)}</a>')
    lines = [f"<b>{html.escape(group)}:</b> " + " &middot; ".join(links) for group, links in groups.items()]
    return f'<nav class="runs"><p>{"<br>".join(lines)}</p></nav>'


def render_html(runs: Sequence[tuple[RunInfo, Summary, list[str]]],
                overview: SuiteOverview | None = None, labels: list[str] | None = None,
                notes: Sequence[str] = ()) -> str:
    """One page for all runs: a suite's first screen answers (findings linked to their evidence, kernel time per
    category, the SSM roofline) and each run follows collapsed under a line saying what it is; a single run's
    page opens with its findings, breakdown and roofline. `labels` tell the runs apart (default: workload names);
    `notes` are said under the title (e.g. where these runs were measured)."""
    labels = labels or [info.workload.name for info, _, _ in runs]
    if overview is None and len(runs) == 1:
        (info, summary, warnings), = runs
        parts = [f"<h1>ssmprof report: {html.escape(_title(info))}</h1>"]
        parts += [f'<p class="note">{html.escape(note)}</p>' for note in notes]
        return _page(f"{_title(info)} - ssmprof report", parts + _run_html(0, info, summary, warnings))
    gpus = html.escape(", ".join(sorted({info.gpu.name for info, _, _ in runs})))
    heading = _suite_heading(len(runs), [info for info, _, _ in runs])
    parts = [f"<h1>ssmprof {heading} on {gpus}</h1>",
             _navigation(labels, [info for info, _, _ in runs])]
    parts += [f'<p class="note">{html.escape(note)}</p>' for note in notes]
    parts += _overview_html(overview) if overview is not None else []
    parts.append('<h2 id="runs">Each run (click to open)</h2>')
    for index, (info, summary, warnings) in enumerate(runs):
        body = "".join(_run_html(index, info, summary, warnings))
        parts.append(collapsed(_run_summary(labels[index], info), body, f"run{index}", kind="run"))
    return _page(f"{heading} on {', '.join(sorted({info.gpu.name for info, _, _ in runs}))} - ssmprof", parts)


def _suite_heading(count: int, infos: list[RunInfo]) -> str:
    """What a page of several runs is: multi-GPU runs beside their single-GPU baselines, or a suite."""
    if any(info.parallel for info in infos):
        return f"multi-GPU scaling: {count} runs"
    return f"suite: {count} runs"


COMPARE_COLUMNS = ["config", "phase", "status", "launches_a", "launches_b", "per_launch_ns_a", "per_launch_ns_b",
                   "per_launch_speedup", "time_ns_a", "time_ns_b", "speedup", "speedup_low", "speedup_high",
                   "vs_noise", "basis", "moved_to"]


def render_compare(info_a: RunInfo, info_b: RunInfo, categories: pd.DataFrame, kernels: pd.DataFrame, notes: list[str],
                   fmt: str, top: int = 30, rooflines: tuple[pd.DataFrame, pd.DataFrame] | None = None,
                   steps: pd.DataFrame | None = None, provenance: tuple[pd.DataFrame, pd.DataFrame] | None = None,
                   findings: pd.DataFrame | None = None) -> str:
    """Run A against run B (frames of `analysis.change.compare`): findings, the step split into GPU busy and host wait,
    categories and the top kernels (launch counts and per-launch times side by side; a speedup only where the
    launches are the same), as HTML or markdown; in HTML also both runs on one roofline, each on its own GPU's
    ceilings (`rooflines`, where both have counters)."""
    title = f"{_title(info_a)}  vs  {_title(info_b)}"
    kernels = kernels[[c for c in COMPARE_COLUMNS if c in kernels.columns]].head(top)
    heading_kernels = f"Kernels (top {len(kernels)} by time; speedup = A's time / B's time, only where the " \
                      "launches are the same)"
    if fmt == "md":
        lines = [f"# ssmprof compare: {title}", ""] + [f"> {note}" for note in notes]
        if findings is not None:
            lines += ["", "## Findings", ""] + [f"{i}. **{r.value}** {r.finding}"
                                                for i, r in enumerate(findings.itertuples(), 1)]
        if steps is not None:
            lines += ["", "## Step time: GPU busy and host wait", "", human_markdown_table(steps)]
        lines += ["", "## By category", "", human_markdown_table(categories), "", f"## {heading_kernels}", "",
                  human_markdown_table(kernels)]
        return "\n".join(lines) + "\n"
    label_a, label_b = f"A: {info_a.gpu.name}", f"B: {info_b.gpu.name}"
    parts = [f"<h1>ssmprof compare</h1><h2>{html.escape(title)}</h2>"]
    if findings is not None:
        parts.append(findings_html(findings, "compare"))
    parts += [f'<p class="warning">{html.escape(note)}</p>' for note in notes]
    first = [chart(figures.compare_bars(categories, label_a, label_b))]
    if rooflines is not None:
        first.append(chart(figures.roofline_overlay({label_a: rooflines[0], label_b: rooflines[1]},
                                                    "Roofline: both runs, each on its own GPU's ceilings")))
    parts.append(f'<div class="first">{"".join(first)}</div>')
    if steps is not None:
        parts.append("<h3>Step time: GPU busy and host wait</h3>" + table_html(steps, "steps", "compare-steps"))
    if provenance is not None:
        parts.append(collapsed("What each run is (provenance)",
                               provenance_html(provenance[0], provenance[1], (label_a, label_b))))
    parts.append(collapsed("By category (speedup = A's time / B's time, only where the launches are the same)",
                           table_html(categories, "categories", "compare-categories")))
    parts.append(collapsed(html.escape(heading_kernels), table_html(kernels, "kernels", "compare-kernels")))
    return _page(f"{info_a.workload.name}: {info_a.gpu.name} vs {info_b.gpu.name} - ssmprof compare", parts)


def render_projection(info: RunInfo, target_gpu: str, categories: pd.DataFrame, step: pd.DataFrame,
                      checked: tuple[RunInfo, pd.DataFrame, list[str]] | None = None,
                      sources: tuple[str, str] = ("", ""), limits: Sequence[str] = ()) -> str:
    """Markdown of a projection, headed as one, with where each side's ceilings come from (`sources`: measured
    GPU, target) and what it cannot know (`limits`) before its numbers: the step there first (`step`,
    `projection.project_step`), then per category; with the error against a run measured on the target, and the
    categories that error table leaves out named."""
    s = step.iloc[0]
    lines = [f"# PROJECTION (not a measurement): {info.workload.name} from {info.gpu.name} to "
             f"{target_gpu}", "", "Roofline floor on the target plus each kernel's measured time above its floor "
             f"(ceilings: {sources[0]} on the measured GPU; {sources[1]} on the target).",
             *[f"\n> {note}" for note in limits], "",
             f"**Step: {s['measured_step_ms']:.1f} ms measured ({s['measured_step_low_ms']:.1f}-"
             f"{s['measured_step_high_ms']:.1f}, 95 % interval of the timed steps), about "
             f"{s['projected_step_ms']:.1f} ms projected on the {target_gpu} ({s['projected_step_low_ms']:.1f}-"
             f"{s['projected_step_high_ms']:.1f}: the steps' noise only, not the projection's own error), "
             f"{s['speedup']:.2f}x.** The host's wait is carried over as measured.", "",
             human_markdown_table(categories)]
    if checked is not None:
        target_info, errors, dropped = checked
        lines += ["", f"## Against the run measured on {target_info.gpu.name}", "",
                  f"Step: {s['projected_step_ms']:.1f} ms projected, {s['target_step_ms']:.1f} ms measured there "
                  f"({s['error_pct']:+.1f} %).", "", human_markdown_table(errors)]
        if dropped:
            lines += ["", f"Left out of this table, each under {100 * ERROR_MIN_SHARE:.0f} % of the measured target's "
                          "kernel time: "
                          f"{', '.join(dropped)} (projected above)."]
    return "\n".join(lines) + "\n"


def overview_markdown(overview: SuiteOverview) -> list[str]:
    """The suite overview's titled tables as markdown sections, in the page's order (OVERVIEW_TITLES)."""
    lines, tables = [], overview.frames()
    for key, title in OVERVIEW_TITLES.items():
        if key in tables:
            lines += ["", f"## {title}", "", human_markdown_table(tables[key], key)]
    return lines


def render_markdown(runs: Sequence[tuple[RunInfo, Summary, list[str]]],
                    overview: SuiteOverview | None = None) -> str:
    """The report as markdown (for CI summaries): per run, provenance, findings, warnings, then the tables."""
    lines = ["# ssmprof report"]
    if overview is not None:
        if overview.parallel_findings is not None:
            lines += ["", "## Scaling and communication", ""] + findings_markdown(overview.parallel_findings)
        lines += ["", "## Suite findings", ""] + findings_markdown(overview.findings)
        lines += overview_markdown(overview)
    for info, summary, notes in runs:
        lines += ["", f"## {_title(info)}", ""]
        lines += [f"- {r.item}: {r.value}" for r in summary.provenance.itertuples()] + [""]
        lines += ["### Findings", ""] + findings_markdown(summary.findings) + [""]
        lines += [f"> {note}" for note in notes]
        tables = summary.frames()
        for key, title in TABLE_TITLES.items():
            if key in tables:
                lines += ["", f"### {title}", "", human_markdown_table(tables[key], key)]
    return "\n".join(lines) + "\n"


def findings_markdown(findings: pd.DataFrame) -> list[str]:
    return [f"{i}. **{r.value}**: {r.finding}" for i, r in enumerate(findings.itertuples(), 1)]


def human_markdown_table(table: pd.DataFrame, key: str = "") -> str:
    """A frame as a markdown table with human headers and formatted numbers (as the HTML tables)."""
    table, units = shown(table, key)
    rows = [[style.cell(str(c), v, unit) for c, v in zip(table.columns, row, strict=True)]
            for unit, row in zip(units, table.itertuples(index=False), strict=True)]
    return _markdown([style.header(str(c)) for c in table.columns], rows)


def render_parallel_results(label: str, folder: str, parallel: ParallelSection, table: pd.DataFrame) -> str:
    """The README Results' paragraph on the multi-GPU runs bundled for one GPU (`communication.parallel_overview`);
    `parallel`: one of those runs' run.json `parallel` section (world size, link, NCCL)."""
    link = parallel.link or Link()
    return "\n".join([
        "", f"**Tensor parallelism on {parallel.world_size} {label}s** ({link.name}, "
        f"NCCL {parallel.nccl_version or 'n/a'}; paper presets, 14 layers; `ssmprof report {folder}/*`): per "
        "run, the step time and its speedup over the single-GPU run of the same host, the collectives each layer "
        "issues forward and backward (`as_predicted`: as the model's structure says, on every layer and rank), the "
        "transfer time per step no compute hides and the time spent waiting for the other rank (the larger rank's), "
        "and the bus bandwidth of the layers' largest collectives (lowest and highest over phases; the link's "
        f"datasheet: {'n/a' if link.gb_s is None else link.gb_s} GB/s a direction).", "",
        markdown_table(table.round(2)), ""])


def markdown_table(table: pd.DataFrame) -> str:
    def cell(value) -> str:
        if isinstance(value, float) and value != value:  # NaN: not measured, or not on this chip
            return "n/a"
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    return _markdown([str(c) for c in table.columns], [[cell(v) for v in row] for row in table.itertuples(index=False)])


def _markdown(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub markdown table of cells already formatted (tabulate reads none of them as numbers); a `|` in a
    cell is escaped, as GitHub would otherwise split the cell there."""
    escaped = [[text.replace("|", "\\|") for text in row] for row in rows]
    return tabulate(escaped, headers=header, tablefmt="github", disable_numparse=True)


def write_csv(tables: dict[str, pd.DataFrame], folder: Path, prefix: str) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for key, table in tables.items():
        path = folder / f"{prefix}{key}.csv"
        write_table(table, path)
        paths.append(path)
    return paths


RESULTS_START, RESULTS_END = "<!-- results:start -->", "<!-- results:end -->"


def _study_memory_lines(gpu: str, table: pd.DataFrame, longest: pd.DataFrame) -> list[str]:
    """The study's 57.5 % under each definition and cache setting measured (`suite.ssm_memory_table`), and why the
    numbers part: a paragraph whose every number is read from the two tables."""
    def value(caches: str, definition: str, column: str = "mean_over_configurations_pct") -> str:
        row = table[(table["caches"] == caches) & (table["definition"] == definition)].iloc[0]
        return f"{row[column]:.1f} %"

    dram, sol = "DRAM throughput", "SpeedOfLight Memory Throughput"
    first = longest.iloc[0]
    scans = ", ".join(longest["kernel_name"])
    why = (f"Why ours differs: the study gives {STUDY_SSM_DRAM_PCT} % without its definition. Averaged over the SSM "
           f"kernels' launch configurations, as a mean over \"the kernels\" would be, DRAM alone reads "
           f"{value('flush', dram)} with the caches flushed before each replay (Nsight Compute's default and ours) "
           f"and {value('keep', dram)} with them kept, and the SpeedOfLight Memory Throughput (the busiest memory "
           f"unit, not DRAM alone) {value('flush', sol)} and {value('keep', sol)}: the study's number lies between "
           f"the two definitions. Weighted by time, as ssmprof's headline is, DRAM falls to "
           f"{value('flush', dram, 'time_weighted_pct')}: the longest kernels ({scans}: "
           f"{longest['time_share_pct'].sum():.0f} % of the SSM time) are held by {first['busiest_unit']} "
           f"({first['kernel_name']}: DRAM {first['dram_throughput_pct']:.1f} %, its busiest unit "
           f"{first['memory_throughput_pct']:.1f} %), not by DRAM. Nsight Compute's default clock control (locked "
           "base clocks) is not measured: these hosts do not permit changing clocks, so every row ran at the clocks "
           "the GPU chose.")
    return ["", f"**The study's 57.5 % under each definition** (mamba2-lm paper on the {gpu}, the 8B Mamba-2 block "
            "shapes the study cites; `scripts/study_dram.py`, one launch of each SSM launch configuration, "
            "bundled beside the runs as `study-ssm-memory.csv`):", "", markdown_table(table.round(1)), "", why]


def render_results(labels: tuple[str, str], step_times: pd.DataFrame, cost: pd.DataFrame, shares: pd.DataFrame,
                   ssm: pd.DataFrame, pair: pd.DataFrame, errors: pd.DataFrame,
                   study: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame],
                   study_memory: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> str:
    """The Results section of docs/results.md (markdown between RESULTS_START and RESULTS_END), from the bundled
    runs; `study`: the first GPU's mamba2-lm Table II beside the study's, its causes and its SSM DRAM use beside
    the study's (`tensor_vector.table_ii_beside_study`, `table_ii_causes`, `suite.dram_beside_study`);
    `study_memory`: the SSM kernels' memory use under the study's definitions and its longest kernels
    (`suite.ssm_memory_table`, `ssm_memory_longest`), where measured."""
    table_ii, causes, dram = study
    a, b = labels
    steps = step_times.astype({"throughput": "int64"}).assign(  # the coverage as every page shows it
        counter_coverage_pct=step_times["counter_coverage_pct"].map(shown_pct))
    rounded = {name: frame.round(1) for name, frame in
               (("steps", steps), ("shares", shares), ("ssm", ssm), ("errors", errors))}
    rounded["pair"] = pair.round(2)
    lines = [
        RESULTS_START,
        "_Generated by `ssmprof results --readme docs/results.md` (`make results`) from the reference runs bundled in "
        "`ssmprof/reference/` "
        "(paper presets, sampled counters); do not edit by hand. `make profile` on a machine without a GPU renders "
        "the full reports._",
        "", f"**Runs** ({a} and {b}): step time, throughput, peak memory, launches per iteration, share of kernel "
        "time with counters, and the wall time of profiling each (harness + Nsight Compute).", "",
        markdown_table(rounded["steps"]),
        "", f"**Where the time goes** on the {a}: % of kernel time per category.", "",
        markdown_table(rounded["shares"]),
        "", f"**SSM kernels** on the {a}: their share of kernel time, time-weighted DRAM throughput (% of peak), L1/L2 "
        "hit rates, % of the roof at their intensity (measured ceilings), share of SSM time memory-bound, share of "
        "SSM time in kernels whose tensor work runs on mma.sync rather than wgmma (Hopper; n/a: no tensor work), and "
        "the share of forward / backward SSM time in each tensor/vector class, defined on compute time at the GPU's "
        f"peaks ({TENSOR_ONLY}: >= {100 * TENSOR_ONLY_SHARE:.0f} % of it on the tensor path; {VECTOR_ONLY}: <= "
        f"{100 * VECTOR_ONLY_SHARE:.0f} %).", "", markdown_table(rounded["ssm"]),
        "", f"**Table II beside the study's** (mamba2-lm on the {a}; seeds/001's Table II, Mamba2 on an H100): SSM "
        "kernels per class on FLOPs, as the study counts them, in its order; the forward kernels mamba-ssm launches "
        "again in backward are a row of their own.", "", markdown_table(table_ii),
        "", "Why the two differ, each cause with its number:", "", markdown_table(causes),
        "", f"**SSM DRAM use beside the study's** (mamba2-lm on the {a}), each against the ceiling it is taken of:",
        "", markdown_table(dram.round(1)),
        *(_study_memory_lines(a, *study_memory) if study_memory is not None else []),
        "", f"**{a} vs {b}** (A = {a}, B = {b}): speedup = A's time over B's; `slow_iteration`: a run whose profiled "
        "iteration kept the GPU busy longer than its median step, by how much (its kernel times describe a slower "
        "step than the timed ones).", "", markdown_table(rounded["pair"]),
        "", "**Projection check**: each run projected onto the other GPU (`ssmprof project --check`), largest "
        "per-category error over categories above 5 % of kernel time.", "", markdown_table(rounded["errors"]),
        "", "**Profiling cost** of these runs per GPU (sum over the paper suite's workloads; later "
        "measurements in \"Cost of the counters\").", "", markdown_table(cost.round(0)),
        RESULTS_END,
    ]
    return "\n".join(lines) + "\n"
