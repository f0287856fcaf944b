"""One function per figure: a summary frame in, a plotly Figure out. No metric is computed here."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go


def breakdown_bars(breakdown: pd.DataFrame, title: str) -> go.Figure:
    """Stacked bars: kernel time (ms) per category, one segment per phase."""
    figure = go.Figure()
    for phase, rows in breakdown.groupby("phase"):
        figure.add_bar(name=phase, x=rows["category"], y=rows["time_ms"],
                       hovertemplate="%{x}<br>" + phase + ": %{y:.3f} ms<extra></extra>")
    figure.update_layout(barmode="stack", title=title, yaxis_title="kernel time (ms)")
    return figure


def _add_kernels(figure: go.Figure, roofline: pd.DataFrame, name: str) -> None:
    """One scatter trace of the launches with FLOPs and a DRAM intensity (hover: kernel, phase, category)."""
    rows = roofline[roofline["ai_dram"].notna() & (roofline["flops"] > 0)]
    figure.add_scatter(
        x=rows["ai_dram"], y=rows["flop_per_s"], mode="markers", name=name,
        customdata=rows[["kernel_name", "phase", "verdict", "category"]].to_numpy(),
        hovertemplate="%{customdata[0]}<br>%{customdata[1]}, %{customdata[3]}"
        + "<br>AI %{x:.3g} FLOP/B<br>%{y:.3g} FLOP/s<br>%{customdata[2]}<extra>" + name + "</extra>")


def _add_roofs(figure: go.Figure, roofline: pd.DataFrame, prefix: str = "") -> None:
    """The roofs (tensor and/or vector path) the verdicts of `roofline` were made against, dotted."""
    for path, rows in roofline.groupby("path"):
        peak, ridge = rows["peak_flop_per_s"].iloc[0], rows["ridge_ai"].iloc[0]
        figure.add_scatter(x=[ridge / 1e3, ridge, ridge * 1e3], y=[peak / 1e3, peak, peak], mode="lines",
                           name=f"{prefix}roof ({path}, {rows['ceiling_source'].iloc[0]})", line={"dash": "dot"})


def _log_axes(figure: go.Figure, title: str) -> go.Figure:
    figure.update_layout(title=title, xaxis={"type": "log", "title": "arithmetic intensity at DRAM (FLOP/byte)"},
                         yaxis={"type": "log", "title": "achieved FLOP/s"})
    return figure


def roofline_scatter(roofline: pd.DataFrame, title: str, color_by: str = "category") -> go.Figure:
    """Achieved FLOP/s against DRAM arithmetic intensity, log-log, with the roofs the verdicts used;
    one colour per value of `color_by` (category, or workload for a suite's SSM kernels)."""
    figure = go.Figure()
    for group, rows in roofline.groupby(color_by, sort=False):
        _add_kernels(figure, rows, str(group))
    _add_roofs(figure, roofline)
    return _log_axes(figure, title)


def roofline_overlay(rooflines: dict[str, pd.DataFrame], title: str) -> go.Figure:
    """Two (or more) runs on one log-log roofline, each with its kernels and its own GPU's roofs."""
    figure = go.Figure()
    for label, roofline in rooflines.items():
        _add_kernels(figure, roofline, label)
        _add_roofs(figure, roofline, f"{label} ")
    return _log_axes(figure, title)


def rate_bars(caches: pd.DataFrame, title: str) -> go.Figure:
    """Time-weighted L1 / L2 hit rates and DRAM throughput per category."""
    figure = go.Figure()
    for column, label in (("l1_hit_rate_pct", "L1 hit %"), ("l2_hit_rate_pct", "L2 hit %"),
                          ("dram_throughput_pct", "DRAM % of peak")):
        figure.add_bar(name=label, x=caches["category"], y=caches[column])
    figure.update_layout(barmode="group", title=title, yaxis={"title": "%", "range": [0, 100]})
    return figure


def class_bars(classes: pd.DataFrame, title: str) -> go.Figure:
    """Share of SSM-kernel time per tensor/vector class, forward and backward."""
    figure = go.Figure()
    for name, rows in classes.groupby("class", sort=False):
        figure.add_bar(name=name, x=rows["phase"], y=100 * rows["time_share"],
                       customdata=rows["kernels"], hovertemplate="%{x}: %{y:.1f} % (%{customdata} kernels)")
    figure.update_layout(barmode="stack", title=title, yaxis={"title": "% of SSM kernel time"})
    return figure


def compare_bars(categories: pd.DataFrame, label_a: str, label_b: str) -> go.Figure:
    """Kernel time per category, run A beside run B."""
    figure = go.Figure()
    figure.add_bar(name=label_a, x=categories["category"], y=categories["time_ms_a"])
    figure.add_bar(name=label_b, x=categories["category"], y=categories["time_ms_b"])
    figure.update_layout(barmode="group", title="Kernel time by category", yaxis_title="ms")
    return figure


def share_bars(shares: pd.DataFrame, title: str) -> go.Figure:
    """Stacked bars: % of kernel time per category, one bar per workload."""
    figure = go.Figure()
    for category in shares.columns.drop("workload"):
        figure.add_bar(name=category, x=shares["workload"], y=shares[category],
                       hovertemplate="%{x}<br>" + category + ": %{y:.1f} %<extra></extra>")
    figure.update_layout(barmode="stack", title=title, yaxis={"title": "% of kernel time", "range": [0, 100]})
    return figure
