"""The history's trend page and markdown: per configuration, step time and host wait, total kernel time, time per
category, the kernels with the most time (time per launch, with their intervals) and efficiency, over the runs
in order, each change point marked and named with the commits around it and what moved."""

from __future__ import annotations

import html
import json

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from ssmprof.analysis.regress import PER_LAUNCH, TIME

TOP_KERNELS = 8  # kernels drawn per configuration: those with the most time in the latest run
SERIES_LABEL = {"step_ms": "step time (ms)", "host_wait_ms": "host wait (ms)", TIME: "time (ms)",
                PER_LAUNCH: "time per launch (us)", "pct_of_roof": "% of roof", "dram_throughput_pct": "DRAM %",
                "achieved_occupancy_pct": "achieved occupancy %"}
SCALE = {"step_ms": 1.0, "host_wait_ms": 1.0, TIME: 1e-6, PER_LAUNCH: 1e-3}


def _of(row) -> str:
    """What a series or change point is of."""
    if row["scope"] == "step":
        return row["metric"].replace("_ms", "").replace("_", " ")
    if row["scope"] == "total":
        return "total kernel time"
    if row["scope"] == "category":
        return f"category {row['category']}"
    if row["scope"] == "phase":
        return f"phase {row['phase']}"
    where = f"{row['kernel_name']} [{row['phase']}]"
    if row["scope"] == "kernel":
        where += f" grid {row['grid_x']}x{row['grid_y']}x{row['grid_z']} block {row['block_x']}x{row['block_y']}x" \
                 f"{row['block_z']}"
    return where


def _value(metric: str, value: float) -> str:
    scaled = value * SCALE.get(metric, 1.0)
    unit = {"step_ms": " ms", "host_wait_ms": " ms", TIME: " ms", PER_LAUNCH: " us"}.get(metric, " %")
    return f"{scaled:,.3g}{unit}"


def _title(trend) -> str:
    config = json.loads(trend.config)
    shown = ", ".join(f"{k} {v}" for k, v in config.items() if k in ("batch_size", "seq_len", "layers", "dtype"))
    return f"{trend.workload} --preset {trend.preset} on {trend.gpu} ({shown}): {len(trend.runs)} runs"


def _changes_markdown(trend) -> list[str]:
    if not len(trend.changes):
        return ["No change point.", ""]
    lines = ["| run | commits | of | metric | before | after | change | band | what moved |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in trend.changes.to_dict("records"):
        moved = "; ".join(row["moved"][:4]) + (f" (+{len(row['moved']) - 4} more)" if len(row["moved"]) > 4 else "")
        lines.append(f"| {row['position']} | {row['commit_before'][:10]} -> {row['commit_after'][:10]} | {_of(row)} | "
                     f"{row['metric']} | {_value(row['metric'], row['before'])} | {_value(row['metric'], row['after'])}"
                     f" | {100 * row['shift'] / abs(row['before']):+.1f} % | {_value(row['metric'], row['band'])} | "
                     f"{moved or '-'} |")
    return lines + [""]


def history_markdown(trends: list) -> str:
    """Per configuration: its runs, its change points (run, commits around it, series, before/after, what
    moved)."""
    lines = ["# ssmprof history", ""]
    for trend in trends:
        shared = int((trend.runs["gpu_shared"] == "yes").sum())
        lines += [f"## {_title(trend)}", "",
                  f"Runs {trend.runs['created'].iloc[0]} to {trend.runs['created'].iloc[-1]}; "
                  f"{len(trend.changes)} change points"
                  + (f"; {shared} runs on a shared GPU" if shared else "") + ".", ""]
        lines += _changes_markdown(trend)
    return "\n".join(lines).rstrip() + "\n"


def _series(trend, mask: pd.Series, label) -> go.Figure:
    """One line per series of `trend.rows[mask]` over the runs, 95 % intervals as error bars, change points of
    those series as vertical lines."""
    order = {run: i for i, run in enumerate(trend.runs["run_id"])}
    commits = dict(zip(trend.runs["run_id"], trend.runs["commit"], strict=True))
    figure = go.Figure()
    rows = trend.rows[mask]
    for key, series in rows.groupby(["scope", "kernel_name", "phase", "category", "grid_x", "grid_y", "grid_z",
                                     "block_x", "block_y", "block_z", "metric"], sort=False):
        scale = SCALE.get(key[-1], 1.0)
        x = series["run_id"].map(order)
        has = series["high"].notna()
        figure.add_trace(go.Scatter(
            x=x, y=series["value"] * scale, mode="lines+markers", name=label(series.iloc[0]),
            text=series["run_id"].map(commits).str[:10], hovertemplate="run %{x}, commit %{text}: %{y:.4g}",
            error_y=dict(type="data", symmetric=False, array=((series["high"] - series["value"]) * scale).where(has),
                         arrayminus=((series["value"] - series["low"]) * scale).where(has)) if has.any() else None))
    for position in trend.changes["position"].unique():
        figure.add_vline(x=position - 0.5, line_dash="dash", line_color="#c0392b")
    figure.update_layout(height=320, margin=dict(l=40, r=10, t=30, b=30), xaxis_title="run",
                         legend=dict(font=dict(size=10)))
    return figure


def _figures(trend) -> list[tuple[str, go.Figure]]:
    rows = trend.rows
    latest = rows[rows["run_id"] == trend.runs["run_id"].iloc[-1]]
    top = latest[(latest["scope"] == "kernel") & (latest["metric"] == "launches")]
    per_launch = latest[(latest["scope"] == "kernel") & (latest["metric"] == PER_LAUNCH)]
    ranked = per_launch.assign(time=per_launch["value"].to_numpy() * top["value"].reindex(per_launch.index)
                               .fillna(1).to_numpy()).nlargest(TOP_KERNELS, "time") if len(per_launch) else per_launch
    kernel_key = ["kernel_name", "phase", "launch_op", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]
    chosen = rows[kernel_key].merge(ranked[kernel_key].drop_duplicates(), how="left", indicator=True)["_merge"]
    is_top = pd.Series((chosen == "both").to_numpy(), index=rows.index) & (rows["scope"] == "kernel")
    charts = [
        ("Step time and host wait", _series(trend, (rows["scope"] == "step") & rows["metric"].isin(
            ["step_ms", "host_wait_ms"]), lambda r: _of(r))),
        ("Kernel time: total and per category", _series(trend, rows["scope"].isin(["total", "category"]) &
                                                        (rows["metric"] == TIME), lambda r: _of(r))),
        (f"Time per launch of the {TOP_KERNELS} kernels with the most time", _series(
            trend, is_top & (rows["metric"] == PER_LAUNCH), lambda r: _of(r))),
    ]
    efficiency = is_top & rows["metric"].isin(["pct_of_roof", "dram_throughput_pct", "achieved_occupancy_pct"])
    if efficiency.any():
        charts.append(("Efficiency of those kernels", _series(trend, efficiency,
                                                               lambda r: f"{_of(r)} {SERIES_LABEL[r['metric']]}")))
    return charts


def history_html(trends: list) -> str:
    """One offline page: per configuration, its change points and its trend figures."""
    body, embed = ["<h1>ssmprof history</h1>"], True
    for trend in trends:
        body.append(f"<h2>{html.escape(_title(trend))}</h2>")
        table = "\n".join(_changes_markdown(trend))
        body.append(f"<pre>{html.escape(table)}</pre>")
        for title, figure in _figures(trend):
            body.append(f"<h3>{html.escape(title)}</h3>")
            body.append(pio.to_html(figure, full_html=False, include_plotlyjs=embed))
            embed = False
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>ssmprof history</title></head><body>"
            f"{''.join(body)}</body></html>")
