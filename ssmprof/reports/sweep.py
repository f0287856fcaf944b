"""The sweep page: findings, the regime map's figures (lines over one varied setting, heatmaps over two),
and its tables, as one offline HTML page or markdown. Frames from `pipeline.regimes.tables`; nothing is
computed here."""

from __future__ import annotations

import html

import pandas as pd

from ssmprof.reports import figures
from ssmprof.reports.render import (
    _page,
    collapsed,
    figures_html,
    findings_html,
    findings_markdown,
    human_markdown_table,
    tables_html,
)

TITLES = {
    "crossover": "Crossover: where one workload overtakes another per token (step time; kernel time beside it)",
    "best": "Best value per GPU (step time per token; by the SSM kernels' time beside it)",
    "per_item": "Per point: step, GPU kernel and SSM kernel time per token",
    "regime_map": "The heaviest SSM kernels: regime (bandwidth / compute / latency) and DRAM % per point",
    "ssm_kernels": "Every SSM kernel per point: limiter, regime, DRAM %, roofline verdict",
    "model": "Analytic SSD model vs measured, forward kernels, per point (per launch)",
    "points": "Points: how each ended",
}


def _series(frame: pd.DataFrame, *columns: str) -> pd.Series:
    """A line's name: its columns joined, the GPU named only where the frame holds several."""
    shown = [c for c in columns if c != "gpu" or frame["gpu"].nunique() > 1]
    return frame[shown].astype(str).agg(" ".join, axis=1)


def _no_dram(what: str, rows: pd.DataFrame) -> str:
    """Why a DRAM chart is left out: none of its points has DRAM counters (a gap in the data, not a finding)."""
    return (f"No DRAM chart for {what}: none of its {len(rows)} points has DRAM counters for these kernels; "
            "the tables below list the points.")


def sweep_figures(tables: dict[str, pd.DataFrame], axes: list[str]):
    """(figure or None, why not) for each chart of the regime map."""
    per_item, regimes, model = tables["per_item"], tables["regime_map"], tables["model"]
    if per_item.empty:
        yield None, "No complete point: nothing to draw."
        return
    unit = per_item["unit"].iloc[0].rstrip("s")
    if len(axes) == 1:
        x = axes[0]
        yield figures.sweep_lines(per_item.assign(line=_series(per_item, "workload", "gpu")), x,
                                  "step_us_per_item", "line", f"Step time per {unit} over {x}",
                                  f"us per {unit}"), ""
        for (workload, gpu), rows in tables["category_time"].groupby(["workload", "gpu"], sort=False):
            yield figures.sweep_category_bars(rows, x, f"{workload} on {gpu}: kernel time per {unit} by category",
                                              unit), ""
        for (workload, gpu), rows in regimes.groupby(["workload", "gpu"], sort=False) if len(regimes) else []:
            if rows["dram_throughput_pct"].isna().all():
                yield None, _no_dram(f"{workload} on {gpu}", rows)
                continue
            yield figures.sweep_lines(rows.assign(line=rows["kernel_name"] + " (" + rows["phase"] + ")"), x,
                                      "dram_throughput_pct", "line",
                                      f"{workload} on {gpu}: the heaviest SSM kernels' DRAM throughput and regime",
                                      "DRAM throughput, % of peak", text="regime"), ""
        if len(model):
            yield figures.sweep_lines(model.assign(line=_series(model, "kernel", "workload", "gpu")), x,
                                      "flops_ratio", "line", "Analytic SSD model: measured / analytic FLOPs per launch",
                                      "measured / analytic FLOPs"), ""
    elif len(axes) == 2:
        y, x = axes
        for (workload, gpu), rows in per_item.groupby(["workload", "gpu"], sort=False):
            yield figures.sweep_heatmap(rows, x, y, "step_us_per_item", f"{workload} on {gpu}: step time per {unit}",
                                        f"us per {unit}"), ""
        for (workload, gpu, name, phase), rows in (regimes.groupby(["workload", "gpu", "kernel_name", "phase"],
                                                                   sort=False) if len(regimes) else []):
            if rows["dram_throughput_pct"].isna().all():
                yield None, _no_dram(f"{workload} on {gpu}, {name} ({phase})", rows)
                continue
            yield figures.sweep_heatmap(rows, x, y, "dram_throughput_pct",
                                        f"{workload} on {gpu}: {name} ({phase}), DRAM % and regime",
                                        "DRAM %", text="regime"), ""
    else:
        yield None, f"{len(axes)} settings varied: the figures draw one or two; the tables hold every point."


def render_sweep(title: str, tables: dict[str, pd.DataFrame], axes: list[str], fmt: str) -> str:
    if fmt == "md":
        lines = [f"# ssmprof sweep: {title}", "", "## Findings", ""] + findings_markdown(tables["findings"])
        for key, heading in TITLES.items():
            if key in tables and len(tables[key]):
                lines += ["", f"## {heading}", "", human_markdown_table(tables[key], key)]
        return "\n".join(lines) + "\n"
    parts = [f"<h1>ssmprof sweep</h1><h2>{html.escape(title)}</h2>", findings_html(tables["findings"], "sweep")]
    drawn = figures_html(sweep_figures(tables, axes))
    parts.append(f'<div class="first">{"".join(drawn[:2])}</div>')
    if drawn[2:]:
        parts.append(collapsed(f"More charts ({len(drawn) - 2}): per workload, per kernel", "".join(drawn[2:])))
    shown = {key: tables[key] for key in TITLES if key in tables and len(tables[key])}
    gpus = sorted({str(gpu) for table in tables.values() if "gpu" in table for gpu in table["gpu"].dropna()})
    return _page(f"{title} on {', '.join(gpus)} - ssmprof sweep", parts + tables_html(shown, TITLES, "sweep"))
