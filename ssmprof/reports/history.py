"""The history's trend page and markdown: per configuration, one screen: its change points as a table (the
first run that changed, the run before, what changed and what moved), then step time and host wait, total and
per-category kernel time, the kernels with the most time and those its change points name (time per launch, with
their intervals) and their efficiency, over the runs in order, each run named apart (`run_labels`: its commit and
date, or, without a commit, its date and time). A configuration with fewer runs than a change point needs
(`analysis.change.history.FEWEST_RUNS`) gets a sentence and its latest values, not empty charts.
Look (page, tables, category colours, series palette) from `reports.render` and `reports.style`."""

from __future__ import annotations

import html
import json

import pandas as pd
import plotly.graph_objects as go

from ssmprof.analysis.change.gate import PER_LAUNCH, SITE, TIME
from ssmprof.analysis.change.history import FEWEST_RUNS, LASTING, WINDOW
from ssmprof.reports import figures, style
from ssmprof.reports.render import _page, chart, table_html

TOP_KERNELS = 6  # kernels drawn per configuration: those with the most time in the latest run
EFFICIENCY = {"pct_of_roof": "% of roof", "dram_throughput_pct": "DRAM throughput %",
              "achieved_occupancy_pct": "achieved occupancy %"}
SCALE = {"step_ms": 1.0, "host_wait_ms": 1.0, "gpu_busy_ms": 1.0, TIME: 1e-6, PER_LAUNCH: 1e-3}
UNIT = {"step_ms": "ms", "host_wait_ms": "ms", "gpu_busy_ms": "ms", TIME: "ms", PER_LAUNCH: "us"}
MOST_TICKS = 7  # commit labels on a chart's x axis: a half-width chart holds this many side by side
# The legend under a chart, 10 px text: a row's height, and the width a row holds (a half-width chart's) and an
# entry takes besides its name (its line and marker) and per character of it.
LEGEND_ROW, LEGEND_WIDTH, LEGEND_ENTRY, LEGEND_CHAR = 19, 560, 40, 6
NO_COMMIT = {"", "unknown", "none", "nan"}  # a run's commit where none was recorded (`pipeline.history.commit_of`)
CHANGE_LINE = "#555555"  # a change point's vertical line: grey, no category's colour


def _of(row) -> str:
    """What a series or change point is of."""
    if row["scope"] == "step":
        return {"step_ms": "step time", "host_wait_ms": "host wait"}.get(row["metric"], row["metric"])
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
    return f"{value * SCALE.get(metric, 1.0):,.4g} {UNIT.get(metric, '%')}"


def _title(trend) -> str:
    config = json.loads(trend.config)
    shown = ", ".join(f"{k} {v}" for k, v in config.items() if k in ("batch_size", "seq_len", "layers", "dtype"))
    return f"{trend.workload} --preset {trend.preset} on {trend.gpu} ({shown})"


def run_labels(runs: pd.DataFrame) -> list[str]:
    """Each run (`runs`: run_id, commit, created; in order) as a reader names it, every run apart and none
    "unknown": its commit (short sha) and date where a commit was recorded, else its date and time to the minute.
    Runs that would read alike get more: their time to the minute (reruns of one commit), then to the second, then
    their place among the runs (#1, #2, ...)."""
    commits = ["" if pd.isna(c) or str(c).strip().lower() in NO_COMMIT else str(c)[:7] for c in runs["commit"]]
    created = ["" if pd.isna(c) else str(c).replace("T", " ") for c in runs["created"]]

    def label(i: int, detail: int) -> str:
        when = created[i][:(10, 16, 19, 19)[detail]] + (f" #{i + 1}" if detail == 3 else "")
        return f"{commits[i]} {when}".strip()

    details = [0 if sha else 1 for sha in commits]
    labels = [label(i, d) for i, d in enumerate(details)]
    while len(set(labels)) < len(labels):
        seen = pd.Series(labels)
        for i in seen.index[seen.duplicated(keep=False)]:
            details[i] = min(details[i] + 1, 3)
        labels = [label(i, d) for i, d in enumerate(details)]
    return labels


def change_table(trend) -> pd.DataFrame:
    """One row per change point: the first run that changed, the run before it (two runs, named apart:
    `run_labels`), what changed (each series: before -> after, change) and what moved."""
    labels, rows = run_labels(trend.runs), []
    for position, group in trend.changes.groupby("position", sort=True):
        changed = [f"{_of(r)}: {_value(r['metric'], r['before'])} -> {_value(r['metric'], r['after'])} "
                   f"({100 * r['shift'] / abs(r['before']):+.1f} %)" for r in group.to_dict("records")]
        moved = group["moved"].iloc[0]
        rows.append({"first_changed_run": labels[position], "run_before": labels[position - 1],
                     "what_changed": "; ".join(changed), "what_moved": "; ".join(moved) or "no kernel"})
    return pd.DataFrame(rows, columns=["first_changed_run", "run_before", "what_changed", "what_moved"])


def change_lines(trend) -> list[str]:
    """One line per change point and series, as `ssmprof history` prints them: the series, its first changed run
    and the run before (`run_labels`), its level before (the segment's median) and after (the median of the runs
    from the change on), the change, and the noise band it lies beyond (the detector's: the largest of 3x the
    segment's run-to-run spread, the series' relative floor and the runs' own 95 % interval half-width)."""
    labels = run_labels(trend.runs)
    return [f"  change point: {_of(r)}: first changed run {labels[r['position']]}, run before "
            f"{labels[r['position'] - 1]}: {_value(r['metric'], r['before'])} -> {_value(r['metric'], r['after'])} "
            f"({100 * r['shift'] / abs(r['before']):+.1f} %), beyond its noise band "
            f"+-{_value(r['metric'], r['band'])}" for r in trend.changes.to_dict("records")]


def _summary(trend) -> str:
    shared = int((trend.runs["gpu_shared"] == "yes").sum())
    runs, changes, labels = len(trend.runs), trend.change_count, run_labels(trend.runs)
    return (f"{runs} run{'s' * (runs != 1)}, {labels[0]} to {labels[-1]}; "
            f"{changes} change point{'s' * (changes != 1)}"
            + (f"; {shared} run{'s' * (shared != 1)} on a shared GPU" if shared else "") + ".")


def _too_few(trend) -> str:
    return (f"A change point needs {FEWEST_RUNS} runs ({WINDOW} to judge against, {LASTING} that changed): "
            f"trends are drawn from then on.")


def history_markdown(trends: list) -> str:
    """Per configuration: its runs and its change points (first changed run, the run before, what changed and
    what moved)."""
    lines = ["# ssmprof history", ""]
    for trend in trends:
        lines += [f"## {_title(trend)}", "", _summary(trend), ""]
        if len(trend.runs) < FEWEST_RUNS:
            lines += [_too_few(trend), ""]
            continue
        table = change_table(trend)
        if table.empty:
            lines += ["No change point.", ""]
            continue
        lines += ["| first changed run | run before | what changed | what moved |", "|---|---|---|---|"]
        lines += [f"| {' | '.join(str(v) for v in row)} |" for row in table.itertuples(index=False)] + [""]
    return "\n".join(lines).rstrip() + "\n"


def _trend_figure(trend, rows: pd.DataFrame, name, color, title: str, y_title: str,
                  log: bool = False) -> go.Figure:
    """One line per series of `rows` over the runs (x: commit and date), 95 % intervals as error bars where
    known, the change points of the configuration as grey dashed lines before their first changed run; `log`: a
    log y axis, where series of one chart differ by orders of magnitude (categories, kernels)."""
    order = {run: i for i, run in enumerate(trend.runs["run_id"])}
    labels = run_labels(trend.runs)
    figure, drawn = go.Figure(), []
    for index, (_, series) in enumerate(rows.groupby(["scope", "kernel_name", "phase", "category", "grid_x",
                                                      "grid_y", "grid_z", "block_x", "block_y", "block_z",
                                                      "metric"], sort=False)):
        first = series.iloc[0]
        scale = SCALE.get(first["metric"], 1.0)
        has = series["high"].notna()
        drawn += [series[column] * scale for column in ("value", "low", "high")]
        error = dict(type="data", symmetric=False, array=((series["high"] - series["value"]) * scale).where(has),
                     arrayminus=((series["value"] - series["low"]) * scale).where(has)) if has.any() else None
        figure.add_scatter(
            x=series["run_id"].map(order), y=series["value"] * scale, mode="lines+markers", name=name(first),
            line={"color": color(first, index), "dash": style.series_dash(index)},
            marker={"color": color(first, index), "symbol": style.series_symbol(index), "size": 7}, error_y=error,
            hovertemplate=f"%{{text}}<br>%{{y:.4g}} {y_title}<extra>{html.escape(name(first))}</extra>",
            text=[labels[order[r]] for r in series["run_id"]])
    for position in trend.changes["position"].unique():
        figure.add_vline(x=position - 0.5, line_dash="dash", line_color=CHANGE_LINE)
    ticks = list(range(len(trend.runs)))
    step = -(-len(ticks) // MOST_TICKS)  # labels a half-width chart holds without overlapping
    figure.update_layout(
        title={"text": title, "font": {"size": 13}, "x": 0.01, "xanchor": "left"}, font={"family": style.FONT},
        height=300 + LEGEND_ROW * _legend_rows([trace.name for trace in figure.data]),
        margin={"l": 60, "r": 10, "t": 40, "b": 10},
        legend={"font": {"size": 10}, "orientation": "h", "yanchor": "top", "y": -0.22, "x": 0},
        xaxis={"tickangle": 0, "tickvals": ticks[::step],
               "ticktext": [labels[i].replace(" ", "<br>") for i in ticks[::step]]},
        yaxis={"title": y_title, "type": "log" if log else "linear"})
    values = pd.concat(drawn) if drawn else pd.Series(dtype=float)
    values = values[values > 0]
    if log and len(values):  # ticks labelled in full, none of plotly's squashed minor digits
        figure.update_yaxes(**figures.log_ticks(float(values.min()), float(values.max())))
    return figure


def _legend_rows(names: list[str]) -> int:
    """Rows the legend under a chart takes: as many entries a row as the longest name lets fit. The chart grows by
    them, so that its plot keeps its height (about 200 px) however many series it draws: with the kernels' long
    names one a row, a 364 px chart had 100 px left to plot them and its log axis' labels ran together."""
    longest = max((len(name or "") for name in names), default=0)
    per_row = max(1, LEGEND_WIDTH // (LEGEND_ENTRY + LEGEND_CHAR * longest))
    return -(-len(names) // per_row)


def _plotted_kernels(trend) -> pd.Series:
    """Rows of the kernels (launch configurations) a page plots: the `TOP_KERNELS` with the most time in the latest
    run, and every configuration of each site (kernel name, phase, launching op) a change point names, as a
    changed series or as what moved, so that the kernel a change point names is always drawn."""
    rows = trend.rows
    key = ["kernel_name", "phase", "launch_op", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]
    kernel = rows["scope"] == "kernel"
    latest = rows[(rows["run_id"] == trend.runs["run_id"].iloc[-1]) & kernel]
    table = latest.pivot_table(index=key, columns="metric", values="value", aggfunc="first")
    chosen = pd.Series(False, index=rows.index)
    if PER_LAUNCH in table and "launches" in table:
        ranked = (table[PER_LAUNCH] * table["launches"]).nlargest(TOP_KERNELS).index
        chosen |= pd.MultiIndex.from_frame(rows[key]).isin(ranked)
    changes = trend.changes
    named = changes[changes["scope"].isin(["site", "kernel"])][SITE].itertuples(index=False, name=None) \
        if "scope" in changes else []
    sites = set(named) | {tuple(site) for listed in changes.get("moved_sites", []) for site in listed}
    chosen |= pd.MultiIndex.from_frame(rows[SITE]).isin(list(sites))
    return chosen & kernel


def _palette(row, index: int) -> str:
    return style.series_color(index)


def _by_category(row, index: int) -> str:
    """A category's or kernel's line in its category's colour (the report's); the total in the series palette."""
    return style.category_color(row["category"]) if row["scope"] != "total" else style.series_color(0)


def _figures(trend) -> list[go.Figure]:
    rows = trend.rows
    top = _plotted_kernels(trend)
    charts = [
        _trend_figure(trend, rows[(rows["scope"] == "step") & rows["metric"].isin(["step_ms", "host_wait_ms"])],
                      _of, _palette, "Step time and host wait (median of the timed steps, 95 % interval)", "ms"),
        _trend_figure(trend, rows[rows["scope"].isin(["total", "category"]) & (rows["metric"] == TIME)], _of,
                      _by_category, "Kernel time: total and per category", "ms", log=True),
        _trend_figure(trend, rows[top & (rows["metric"] == PER_LAUNCH)], _of, _by_category,
                      f"Time per launch: the {TOP_KERNELS} kernels with the most time, and those that changed "
                      "(95 % interval)",
                      "us per launch", log=True),
    ]
    efficiency = rows[top & rows["metric"].isin(list(EFFICIENCY))]
    if len(efficiency):
        charts.append(_trend_figure(trend, efficiency, lambda r: f"{_of(r)} {EFFICIENCY[r['metric']]}",
                                     _by_category, "Efficiency of those kernels", "%"))
    return charts


def history_html(trends: list) -> str:
    """One offline page: per configuration one screen: what it is, its change points, its trend charts."""
    body = ["<h1>ssmprof history</h1>",
            '<p class="note">A change point is the first run the gate would fail against the runs since the last '
            "change, when the next run fails too (docs/ci.md). Dashed grey lines mark them on every chart.</p>"]
    for trend in trends:
        body += [f"<h2>{html.escape(_title(trend))}</h2>", f"<p>{html.escape(_summary(trend))}</p>"]
        if len(trend.runs) < FEWEST_RUNS:
            body.append(f'<p class="note">{html.escape(_too_few(trend))}</p>')
            continue
        table = change_table(trend)
        body.append(table_html(table) if len(table) else "<p>No change point.</p>")
        body.append('<div class="first">' + "".join(f"<div>{chart(f)}</div>" for f in _figures(trend)) + "</div>")
    return _page("ssmprof history", body)
