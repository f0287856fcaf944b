"""The sweep page: findings, the regime map's charts (lines over one varied setting, heatmaps over two; drawn
here, in the look of `figures.layout`), and its tables, as one offline HTML page or markdown. Frames from
`analysis.summaries.sweep.RegimeTables`; nothing is computed here."""

from __future__ import annotations

import html
from collections.abc import Iterator

import pandas as pd
import plotly.graph_objects as go

from ssmprof.analysis.summaries.sweep import RegimeTables
from ssmprof.reports import figures, style
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


def sweep_lines(frame: pd.DataFrame, x: str, y: str, series: str, title: str, y_title: str,
                text: str | None = None) -> go.Figure:
    """A sweep over one setting: `y` against `x` (log 2 axis: settings are swept in powers of two), a line per
    value of `series` (a workload or a kernel) in the series palette, colour, marker and dash from style; `text`
    labels a point where it changes along its line (a regime), above the line on every other series and below on
    the rest, so two lines' labels do not meet. A series without any value is left out (no blank line)."""
    figure = go.Figure()
    drawn = [(name, rows) for name, rows in frame.sort_values(x).groupby(series, sort=False) if rows[y].notna().any()]
    places = style.series_indices([str(name) for name, _ in drawn])
    for order, (name, rows) in enumerate(drawn):
        index = places[str(name)]
        changed = rows[text].where(rows[text] != rows[text].shift(), "") if text else None  # a regime once per run
        figure.add_scatter(x=rows[x], y=rows[y], name=str(name), mode="lines+markers+text" if text else "lines+markers",
                           text=changed, textposition="bottom center" if order % 2 else "top center",
                           marker={"symbol": style.series_symbol(index), "size": 9, "color": style.series_color(index)},
                           line={"color": style.series_color(index), "dash": style.series_dash(index)},
                           hovertemplate=f"{x} %{{x}}<br>{y_title}: %{{y:.3g}}<extra>{name}</extra>")
    return figures.layout(figure, title, xaxis={"type": "log", "title": x, "tickvals": sorted(frame[x].unique())},
                   yaxis_title=y_title)


def sweep_heatmap(frame: pd.DataFrame, x: str, y: str, z: str, title: str, z_title: str,
                  text: str | None = None) -> go.Figure:
    """A sweep over two settings: `z` on the (`x`, `y`) grid, a sequential scale; each cell says its value, or
    `text` (a regime) above it. Missing cells (failed points) stay blank."""
    grid = frame.pivot_table(index=y, columns=x, values=z, aggfunc="first")
    labels = (frame.assign(_label=frame[text].astype(str) + "<br>" + frame[z].map(lambda v: f"{v:.3g}"))
              .pivot_table(index=y, columns=x, values="_label", aggfunc="first").reindex_like(grid)
              if text else grid.map(lambda v: "" if pd.isna(v) else f"{v:.3g}"))
    figure = go.Figure(go.Heatmap(z=grid.to_numpy(), x=[str(v) for v in grid.columns], y=[str(v) for v in grid.index],
                                  text=labels.fillna("").to_numpy(), texttemplate="%{text}",
                                  colorscale=style.HEATMAP_SCALE, colorbar={"title": z_title},
                                  hovertemplate=f"{x} %{{x}}, {y} %{{y}}<br>{z_title}: %{{z:.3g}}<extra></extra>"))
    return figures.layout(figure, title, xaxis={"title": x, "type": "category"}, yaxis={"title": y, "type": "category"})


def sweep_category_bars(frame: pd.DataFrame, x: str, title: str, unit: str) -> go.Figure:
    """GPU kernel time per item at each value of `x`, stacked by category (each in its category's colour)."""
    figure = go.Figure()
    for category, rows in frame.sort_values(x).groupby("category", sort=False):
        figure.add_bar(name=category, x=rows[x].astype(str), y=rows["us_per_item"],
                       marker_color=style.category_color(category),
                       hovertemplate=f"{x} %{{x}}<br>{category}: %{{y:.3g}} us per {unit}<extra></extra>")
    return figures.layout(figure, title, barmode="stack", xaxis={"title": x, "type": "category"},
                   yaxis_title=f"kernel time per {unit} (us)")


def sweep_figures(tables: RegimeTables, axes: list[str]) -> Iterator[tuple[go.Figure | None, str]]:
    """(figure or None, why not) for each chart of the regime map."""
    per_item, regimes, model = tables.per_item, tables.regime_map, tables.model
    if per_item.empty:
        yield None, "No complete point: nothing to draw."
        return
    unit = per_item["unit"].iloc[0].rstrip("s")
    if len(axes) == 1:
        x = axes[0]
        yield sweep_lines(per_item.assign(line=_series(per_item, "workload", "gpu")), x,
                                  "step_us_per_item", "line", f"Step time per {unit} over {x}",
                                  f"us per {unit}"), ""
        for (workload, gpu), rows in tables.category_time.groupby(["workload", "gpu"], sort=False):
            yield sweep_category_bars(rows, x, f"{workload} on {gpu}: kernel time per {unit} by category",
                                              unit), ""
        for (workload, gpu), rows in regimes.groupby(["workload", "gpu"], sort=False) if len(regimes) else []:
            if rows["dram_throughput_pct"].isna().all():
                yield None, _no_dram(f"{workload} on {gpu}", rows)
                continue
            yield sweep_lines(rows.assign(line=rows["kernel_name"] + " (" + rows["phase"] + ")"), x,
                                      "dram_throughput_pct", "line",
                                      f"{workload} on {gpu}: the heaviest SSM kernels' DRAM throughput and regime",
                                      "DRAM throughput, % of peak", text="regime"), ""
        if len(model):
            yield sweep_lines(model.assign(line=_series(model, "kernel", "workload", "gpu")), x,
                                      "flops_ratio", "line", "Analytic SSD model: measured / analytic FLOPs per launch",
                                      "measured / analytic FLOPs"), ""
    elif len(axes) == 2:
        y, x = axes
        for (workload, gpu), rows in per_item.groupby(["workload", "gpu"], sort=False):
            yield sweep_heatmap(rows, x, y, "step_us_per_item", f"{workload} on {gpu}: step time per {unit}",
                                        f"us per {unit}"), ""
        for (workload, gpu, name, phase), rows in (regimes.groupby(["workload", "gpu", "kernel_name", "phase"],
                                                                   sort=False) if len(regimes) else []):
            if rows["dram_throughput_pct"].isna().all():
                yield None, _no_dram(f"{workload} on {gpu}, {name} ({phase})", rows)
                continue
            yield sweep_heatmap(rows, x, y, "dram_throughput_pct",
                                        f"{workload} on {gpu}: {name} ({phase}), DRAM % and regime",
                                        "DRAM %", text="regime"), ""
    else:
        yield None, f"{len(axes)} settings varied: the figures draw one or two; the tables hold every point."


def render_sweep(title: str, tables: RegimeTables, axes: list[str], fmt: str) -> str:
    """The sweep page as HTML or markdown (`fmt`): its findings, its charts (HTML only), and each table of TITLES
    the sweep has with rows, in TITLES' order."""
    frames = tables.frames()
    if fmt == "md":
        lines = [f"# ssmprof sweep: {title}", "", "## Findings", ""] + findings_markdown(tables.findings)
        for key, heading in TITLES.items():
            if key in frames and len(frames[key]):
                lines += ["", f"## {heading}", "", human_markdown_table(frames[key], key)]
        return "\n".join(lines) + "\n"
    parts = [f"<h1>ssmprof sweep</h1><h2>{html.escape(title)}</h2>", findings_html(tables.findings, "sweep")]
    drawn = figures_html(sweep_figures(tables, axes))
    parts.append(f'<div class="first">{"".join(drawn[:2])}</div>')
    if drawn[2:]:
        parts.append(collapsed(f"More charts ({len(drawn) - 2}): per workload, per kernel", "".join(drawn[2:])))
    shown = {key: frames[key] for key in TITLES if key in frames and len(frames[key])}
    gpus = sorted({str(gpu) for table in frames.values() if "gpu" in table for gpu in table["gpu"].dropna()})
    return _page(f"{title} on {', '.join(gpus)} - ssmprof sweep", parts + tables_html(shown, TITLES, "sweep"))
