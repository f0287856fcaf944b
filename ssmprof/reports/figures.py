"""One function per figure: a summary frame in, a plotly Figure out. No metric is computed here; colours,
markers and fonts come from `style` (one colour per category on every chart)."""

from __future__ import annotations

import math
import textwrap

import pandas as pd
import plotly.graph_objects as go

from ssmprof.reports import style

TITLE_CHARS = 64  # characters of a chart title's line: a 560 px chart (the page's narrowest) at plotly's 17 px


def layout(figure: go.Figure, title: str, **settings) -> go.Figure:
    """The common look; a title longer than a 560 px chart holds goes on as many lines as it needs (plotly
    draws a title on one line and cuts it at both ends), the top margin grown to fit them."""
    lines = textwrap.wrap(title, TITLE_CHARS)
    figure.update_layout(title=title if len(lines) < 2 else "<br>".join(lines), font={"family": style.FONT},
                         **style.LAYOUT)
    figure.update_layout(margin={"t": style.MARGIN_TOP + 18 * (len(lines) - 1)})
    figure.update_layout(**settings)
    return figure


def breakdown_bars(breakdown: pd.DataFrame, title: str) -> go.Figure:
    """Stacked bars: kernel time (ms) per phase, one segment per category (in the category's colour)."""
    figure = go.Figure()
    for category, rows in breakdown.groupby("category", sort=False):
        figure.add_bar(name=category, x=rows["phase"], y=rows["time_ms"], marker_color=style.category_color(category),
                       hovertemplate="%{x}<br>" + category + ": %{y:.2f} ms<extra></extra>")
    return layout(figure, title, barmode="stack", yaxis_title="kernel time (ms)")


def _add_kernels(figure: go.Figure, roofline: pd.DataFrame, name: str, color: str, symbol: str = "circle",
                 size: int = 7, group: str | None = None, show: bool = True) -> None:
    """One scatter trace of the kernels with FLOPs and a DRAM intensity (one point per kernel and launch
    configuration, `analysis.limits.roofline.roofline_points`); hover: kernel, phase, category, time, launches, limiter,
    % of roof."""
    rows = roofline[roofline["ai_dram"].notna() & (roofline["flops"] > 0)]
    if rows.empty:
        return
    launches = rows["launches"] if "launches" in rows else pd.Series(1, rows.index)
    limiter = rows["roof_limiter"] if "roof_limiter" in rows else rows["verdict"]
    figure.add_scatter(
        x=_rounded(rows["ai_dram"]), y=_rounded(rows["flop_per_s"]), mode="markers", name=name, legendgroup=group,
        showlegend=show,
        marker={"color": color, "symbol": symbol, "size": size, "line": {"width": 1.5, "color": color}},
        customdata=pd.DataFrame({
            "kernel": rows["kernel_name"], "phase": rows["phase"], "category": rows["category"],
            "time": rows["duration_ns"].map(style.duration), "launches": launches.map("{:,}".format),
            "limiter": limiter.astype(str) + " (" + rows["verdict"].astype(str) + ")",
            "roof": rows["pct_of_roof"].map(lambda v: "" if pd.isna(v) else f"{v:.0f} % of its roof")}).to_numpy(),
        hovertemplate="<b>%{customdata[0]}</b><br>%{customdata[1]}, %{customdata[2]}"
        "<br>%{customdata[3]} over %{customdata[4]} launches<br>limiter: %{customdata[5]}, %{customdata[6]}"
        "<br>%{x:.3g} FLOP/byte, %{y:.3s}FLOP/s<extra>" + name + "</extra>")


def _short(name: str, most: int = 48) -> str:
    """A kernel's name as an axis label: cuDNN's run to 150 characters and would push the plot off its chart;
    the table beside the chart holds the whole name."""
    return name if len(name) <= most else name[:most - 1] + "\u2026"


def _rounded(values: pd.Series) -> list[float]:
    """Four significant digits: what a chart can show, and a page a third the size of full precision's."""
    return [float(f"{v:.4g}") for v in values]


def _add_roofs(figure: go.Figure, roofline: pd.DataFrame, ranges: tuple[tuple[float, float], list[float]],
               prefix: str = "", color: str = style.ROOF_COLORS[0], second: bool = False) -> None:
    """The roofs (tensor and/or vector path) the verdicts of `roofline` were made against, grey, dashed by path,
    across the axis range (`ranges`: the log10 x and y ranges), each ceiling labelled on the chart with its value,
    once (the paths share their bandwidth slopes), where the chart shows its line and no marker lies under the
    label (`_place`; the markers are those already drawn: add the kernels first). A `second` run's peaks are
    labelled under their line first, so that the two runs' labels keep apart."""
    low, high = (10 ** bound for bound in ranges[0])
    labelled = {annotation.text.replace("<br>", " ") for annotation in figure.layout.annotations}
    for path, rows in roofline.groupby("path"):
        peak = rows["peak_flop_per_s"].iloc[0]
        source = rows["ceiling_source"].iloc[0]
        levels = [("DRAM", rows["ridge_ai"].iloc[0], 1.5)]
        if "l2_ridge_ai" in rows and pd.notna(rows["l2_ridge_ai"].iloc[0]):
            levels.append(("L2", rows["l2_ridge_ai"].iloc[0], 0.8))  # the hierarchical roof's L2 level
        for level, ridge, width in levels:
            xs = [x for x in (low, ridge, high) if low <= x <= high] or [low, high]
            figure.add_scatter(x=xs, y=[min(peak, peak * x / ridge) for x in xs], mode="lines", hoverinfo="name",
                               name=f"{prefix}roof: {path}, {level} ({source})", showlegend=False,
                               line={"dash": style.ROOF_DASH.get(path, "solid"), "color": color, "width": width})
            name, value = f"{prefix}{level}", style.si(peak / ridge, "B/s")
            if f"{name} {value}" not in labelled:
                labelled.add(f"{name} {value}")
                _label(figure, _place(figure, (name, value), _slope_spots(math.log10(peak), math.log10(ridge),
                                                                          ranges), ranges), color)
        flat = math.log10(min(ridge for _, ridge, _ in levels))  # where the path's flat roof begins
        _label(figure, _place(figure, (f"{prefix}{path} peak", style.si(peak, "FLOP/s")),
                              _peak_spots(math.log10(peak), flat, ranges, second), ranges), color)


# A roof label's size in a roofline chart's plot area at its narrowest (a 560 px chart beside its legend, 560 px
# high): what `_place` takes a label and a marker to cover, in decades of the chart's log axes.
PLOT_PX = (300, 420)  # the plot area's width and height
LABEL_PX = (7.0, 15)  # an 11 px label's character width (capitals and digits) and line height
MARKER_PX = 6  # a marker's radius, the largest drawn (11 px diamonds) and its line
SPOT_STEP = 0.2  # decades between the places a label is tried at along its line
ON_LINE = 0.3  # decades of a compute roof's flat line a label of it ends over, at least: it labels that line


def _slope_spots(peak: float, ridge: float, ranges) -> list[tuple[float, float, str, str]]:
    """Where a bandwidth roof's label may go (log10 x, log10 y, xanchor, yanchor): on its slope where the chart
    shows it (from where it enters the plot, above the y axis' minimum, to its ridge), the label above the line and
    left of the point (nothing is above a roof but another roof), from the lowest place up; then under it."""
    (x_low, x_high), (y_low, _) = ranges
    start, stop = max(x_low, ridge - peak + y_low), min(ridge, x_high)
    xs = [start + SPOT_STEP * k for k in range(int(max(stop - start, 0) / SPOT_STEP) + 1)]
    return [(x, peak + x - ridge, "right", "bottom") for x in xs] + [(x, peak + x - ridge, "left", "top") for x in xs]


def _peak_spots(peak: float, flat: float, ranges, under_first: bool = False) -> list[tuple[float, float, str, str]]:
    """Where a compute roof's label may go: right-aligned on its line, above it first (under it first for
    `under_first`), from the chart's right edge leftward while the label ends over the flat part of the line (from
    `flat`, its first ridge, on) by `ON_LINE` decades; then, where kernels crowd the flat part, further left at its
    height."""
    (x_low, x_high), _ = ranges
    steps = int((x_high - x_low) / SPOT_STEP) + 1
    on_line = min(steps, int(max(x_high - flat - ON_LINE, 0) / SPOT_STEP) + 1)
    sides = ("top", "bottom") if under_first else ("bottom", "top")
    return [(x_high - SPOT_STEP * k, peak, "right", side) for ks in (range(on_line), range(on_line, steps))
            for side in sides for k in ks]


def _box(spot: tuple[float, float, str, str], text: str, ranges) -> tuple[float, float, float, float]:
    """The box (x0, x1, y0, y1, in log10 units) a label of `text` (lines split at <br>) covers at `spot`."""
    (x_low, x_high), (y_low, y_high) = ranges
    lines = text.split("<br>")
    width = max(len(line) for line in lines) * LABEL_PX[0] * (x_high - x_low) / PLOT_PX[0]
    height = len(lines) * LABEL_PX[1] * (y_high - y_low) / PLOT_PX[1]
    x, y, xanchor, yanchor = spot
    x0 = x - width if xanchor == "right" else x
    y0 = y if yanchor == "bottom" else y - height
    return x0, x0 + width, y0, y0 + height


def _place(figure: go.Figure, label: tuple[str, str], spots, ranges) -> tuple[float, float, str, str, str]:
    """Where a roof's label (its name and value) goes, and its text: the first of `spots` where it lies inside the
    plot (or in the margin above it) over no marker and no other label, on one line, else on two (name over value,
    half as wide: kernels crowd a roof); else the place over the fewest (a label out of the plot, never)."""
    (x_low, x_high), (y_low, y_high) = ranges
    pad = (MARKER_PX * (x_high - x_low) / PLOT_PX[0], MARKER_PX * (y_high - y_low) / PLOT_PX[1])
    points = [(math.log10(x), math.log10(y)) for trace in figure.data if "markers" in (trace.mode or "")
              for x, y in zip(() if trace.x is None else trace.x, () if trace.y is None else trace.y, strict=True)
              if x is not None and y is not None and x > 0 and y > 0]
    taken = [_box((a.x, a.y, a.xanchor, a.yanchor), a.text, ranges) for a in figure.layout.annotations]

    def cost(placed: tuple[float, float, str, str, str]) -> float:
        x0, x1, y0, y1 = _box(placed[:4], placed[4], ranges)
        outside = x0 < x_low or x1 > x_high or y0 < y_low or y0 > y_high  # the top margin holds a label above
        covered = sum(x0 - pad[0] < x < x1 + pad[0] and y0 - pad[1] < y < y1 + pad[1] for x, y in points)
        crossed = sum(x0 < b[1] and b[0] < x1 and y0 < b[3] and b[2] < y1 for b in taken)
        return 1000 * outside + 100 * crossed + covered

    name, value = label
    tried = [(*spot, text) for text in (f"{name} {value}", f"{name}<br>{value}") for spot in spots]
    return min(tried, key=cost)  # the first of the cheapest: in order of preference


def _label(figure: go.Figure, placed: tuple[float, float, str, str, str], color: str) -> None:
    x, y, xanchor, yanchor, text = placed
    figure.add_annotation(x=x, y=y, text=text, **style.ROOF_LABEL, textangle=0, xanchor=xanchor, yanchor=yanchor,
                          font={"color": color, "size": 11})


def _x_range(*rooflines: pd.DataFrame) -> tuple[float, float]:
    """log10 range of the x axis: the kernels' intensities and the ridges, half a decade either side."""
    values = pd.concat([pd.concat([r[c][(r[c] > 0) & (r[c] < math.inf)] for c in ("ai_dram", "ai_l2", "ridge_ai",
                                                                               "l2_ridge_ai") if c in r])
                        for r in rooflines]).dropna()
    if values.empty:
        return (-1.0, 3.0)
    return (math.log10(values.min()) - 0.5, math.log10(values.max()) + 0.5)


def _y_range(*rooflines: pd.DataFrame) -> list[float]:
    values = pd.concat([pd.concat([r["flop_per_s"][r["flop_per_s"] > 0], r["peak_flop_per_s"]])
                        for r in rooflines]).dropna()
    if values.empty:
        return [9.0, 16.0]
    return [math.log10(values.min()) - 0.3, math.log10(values.max()) + 0.3]


MOST_DECADES = 8  # ticks on a log axis: more, and their labels run into each other on a 560 px chart


def _decades(log_range) -> dict:
    """Tick the powers of ten of a log10 range (every other one, or fewer, beyond `MOST_DECADES`), labelled 1G,
    10G, 100G, 1T, ..."""
    decades = range(math.floor(log_range[0]), math.ceil(log_range[1]) + 1)
    values = [10.0 ** k for k in decades[::math.ceil(len(decades) / MOST_DECADES)]]
    return {"tickvals": values, "ticktext": [style.decade_label(v) for v in values]}


MOST_LOG_TICKS = 6  # labels on a log axis spanning few decades (a history chart's plot, about 220 px high)
LOG_STEPS = ((1, 2, 5), (1, 3), (1,))  # ticks within a decade: the finest that keeps to MOST_LOG_TICKS


def _tick_text(value: float) -> str:
    """A log axis' tick in full: 0.5, 20, 500, 2k (a unit's prefix would read as one: 500m ms)."""
    return f"{value:g}" if value < 1000 else style.decade_label(value)


def log_ticks(low: float, high: float) -> dict:
    """The y axis of a log chart over values from `low` to `high` (both > 0): ticks at 1, 2 and 5 times the powers
    of ten (or 1 and 3 times, or the powers alone, the finest that keeps to `MOST_LOG_TICKS`; beyond, every other
    power or fewer), from the tick at or below `low` to the one at or above `high`, each labelled in full
    (`_tick_text`), the range their span. Plotly's own ticks label the minor ones with their first digit in a
    smaller font, squashed together where the axis is short (2 5 2 5)."""
    decades = range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 2)
    for steps in LOG_STEPS:
        ladder = [m * 10.0 ** k for k in decades for m in steps]
        first = max(value for value in ladder if value <= low * (1 + 1e-9))
        last = min(value for value in ladder if value >= high * (1 - 1e-9))
        values = [value for value in ladder if first <= value <= last]
        if len(values) <= MOST_LOG_TICKS:
            break
    values = values[::math.ceil(len(values) / MOST_LOG_TICKS)]
    return {"tickvals": values, "ticktext": [_tick_text(v) for v in values],
            "range": [math.log10(first) - 0.05, math.log10(last) + 0.05]}


def _log_axes(figure: go.Figure, title: str, x_range, y_range, l2_points: bool = False) -> go.Figure:
    x_title = "FLOP per DRAM byte" + ("; open grey: per L2 byte" if l2_points else "")  # fits a 560 px chart
    return layout(figure, title, height=560,
                   xaxis={"type": "log", "title": x_title, "range": list(x_range), **_decades(x_range)},
                   yaxis={"type": "log", "title": "achieved FLOP/s", "range": y_range, **_decades(y_range)})


def roofline_scatter(roofline: pd.DataFrame, title: str, color_by: str = "category") -> go.Figure:
    """Achieved FLOP/s against DRAM arithmetic intensity, log-log, with the roofs the verdicts used. By category:
    the category's colour; by workload (a suite's SSM kernels): a colour and an open shape per workload, from the
    series palette (never a category's colour), the workload's own on every page (`style.series_indices`)."""
    figure = go.Figure()
    x_range = _x_range(roofline)
    places = style.series_indices([str(group) for group in roofline[color_by].unique()], color_by == "workload")
    for group, rows in roofline.groupby(color_by, sort=False):
        if color_by == "category":
            _add_kernels(figure, rows, str(group), style.category_color(str(group)))
        else:
            place = places[str(group)]
            _add_kernels(figure, rows, str(group), style.series_color(place), style.series_symbol(place), 9)
    l2_points = _add_l2_points(figure, roofline)
    y_range = _y_range(roofline)
    _add_roofs(figure, roofline, (x_range, y_range))
    return _log_axes(figure, title, x_range, y_range, l2_points)


def _add_l2_points(figure: go.Figure, roofline: pd.DataFrame) -> bool:
    """The same launches at their L2 intensity (small open grey markers), against the L2 roof; False where no
    L2 ceiling is known."""
    if "ai_l2" not in roofline or "l2_ridge_ai" not in roofline or roofline["l2_ridge_ai"].isna().all():
        return False
    rows = roofline[roofline["ai_l2"].notna() & (roofline["flops"] > 0)]
    figure.add_scatter(x=_rounded(rows["ai_l2"]), y=_rounded(rows["flop_per_s"]), mode="markers",
                       name="the same kernels at L2 intensity",
                       marker={"symbol": "circle-open", "size": 5, "color": style.ROOF_COLORS[0]},
                       customdata=rows[["kernel_name", "phase"]].to_numpy(),
                       hovertemplate="%{customdata[0]} (%{customdata[1]})<br>L2 intensity %{x:.3g} FLOP/B"
                       + "<extra></extra>")
    return True


def roofline_overlay(rooflines: dict[str, pd.DataFrame], title: str) -> go.Figure:
    """Two runs on one log-log roofline: colour by category, a marker shape per run (A filled circles, B open
    diamonds drawn larger, so B never hides A), each run's own roofs in its own grey."""
    figure = go.Figure()
    x_range = _x_range(*rooflines.values())
    for index, label in enumerate(rooflines):  # legend: a grey marker per run, then the categories once
        figure.add_scatter(x=[None], y=[None], mode="markers", name=label, legendgroup=label,
                           marker={"color": style.ROOF_COLORS[0], "symbol": style.RUN_SYMBOLS[index],
                                   "size": style.RUN_SIZES[index]})
    shown = set()
    for index, (label, roofline) in enumerate(rooflines.items()):
        for category, rows in roofline.groupby("category", sort=False):
            _add_kernels(figure, rows, f"{label}: {category}", style.category_color(str(category)),
                         style.RUN_SYMBOLS[index], style.RUN_SIZES[index], group=label, show=False)
            shown.add(str(category))
    y_range = _y_range(*rooflines.values())
    for index, (label, roofline) in enumerate(rooflines.items()):  # every run's kernels drawn: labels avoid them all
        _add_roofs(figure, roofline, (x_range, y_range), f"{label.split(':')[0]}: ", style.ROOF_COLORS[index % 2],
                   second=index % 2 == 1)  # "A: " on the chart; the legend says which GPU A is
    for category in [c for c in style.CATEGORY_COLORS if c in shown]:
        figure.add_scatter(x=[None], y=[None], mode="markers", name=category,
                           marker={"color": style.category_color(category), "symbol": "square", "size": 9})
    return _log_axes(figure, title, x_range, y_range)


def rate_bars(caches: pd.DataFrame, title: str) -> go.Figure:
    """Time-weighted L1 / L2 hit rates and DRAM throughput per category (metrics in neutral greys)."""
    figure = go.Figure()
    for index, (column, label) in enumerate((("l1_hit_rate_pct", "L1 hit %"), ("l2_hit_rate_pct", "L2 hit %"),
                                             ("dram_throughput_pct", "DRAM throughput, % of peak (Nsight Compute)"))):
        figure.add_bar(name=label, x=caches["category"], y=caches[column], marker_color=style.METRIC_COLORS[index],
                       hovertemplate="%{x}<br>" + label + ": %{y:.1f} %<extra></extra>")
    return layout(figure, title, barmode="group", yaxis={"title": "%", "range": [0, 100]},
                   xaxis={"tickangle": -30})  # 13 category names side by side overlap at any angle but a slant


def class_bars(classes: pd.DataFrame, title: str) -> go.Figure:
    """Share of SSM-kernel time per tensor/vector class, forward and backward."""
    figure = go.Figure()
    for index, (name, rows) in enumerate(classes.groupby("class", sort=False)):
        figure.add_bar(name=name, x=rows["phase"], y=100 * rows["time_share"], customdata=rows["kernels"],
                       marker_color=style.METRIC_COLORS[index % len(style.METRIC_COLORS)],
                       hovertemplate="%{x}: %{y:.1f} % (%{customdata} kernels)<extra>" + name + "</extra>")
    return layout(figure, title, barmode="stack", yaxis={"title": "% of SSM kernel time", "range": [0, 100]})


def compare_bars(categories: pd.DataFrame, label_a: str, label_b: str) -> go.Figure:
    """Kernel time per category, run A (solid) beside run B (hatched), each bar in its category's colour; the
    legend shows the two runs in grey (a bar's legend swatch would otherwise take one category's colour)."""
    colors = [style.category_color(c) for c in categories["category"]]
    grey = style.ROOF_COLORS[0]
    solid = {"color": colors}
    hatched = {"color": "white", "line": {"color": colors, "width": 2}, "pattern": {"shape": "/", "fgcolor": colors}}
    figure = go.Figure()
    for label, marker, legend, group in (
            (label_a, solid, {"color": grey}, "A"),
            (label_b, hatched, {"color": "white", "line": {"color": grey, "width": 2},
                                "pattern": {"shape": "/", "fgcolor": grey}}, "B")):
        column = "time_ms_a" if group == "A" else "time_ms_b"
        figure.add_bar(name=label, x=categories["category"], y=categories[column], marker=marker, offsetgroup=group,
                       legendgroup=group, showlegend=False,
                       hovertemplate="%{x}<br>" + label + ": %{y:.2f} ms<extra></extra>")
        figure.add_bar(name=label, x=[None], y=[None], marker=legend, offsetgroup=group, legendgroup=group)
    return layout(figure, "Kernel time by category (A solid, B hatched)", barmode="group", yaxis_title="ms",
                   xaxis={"tickangle": -30})


def share_bars(shares: pd.DataFrame, title: str) -> go.Figure:
    """Stacked bars: % of kernel time per category, one bar per workload."""
    figure = go.Figure()
    for category in shares.columns.drop("workload"):
        figure.add_bar(name=category, x=shares["workload"], y=shares[category],
                       marker_color=style.category_color(category),
                       hovertemplate="%{x}<br>" + category + ": %{y:.1f} %<extra></extra>")
    return layout(figure, title, barmode="stack", yaxis={"title": "% of kernel time", "range": [0, 100]},
                   xaxis={"tickangle": -30})


def stall_bars(stalls: pd.DataFrame, title: str) -> go.Figure:
    """Horizontal stacked bars, one per kernel and phase (longest on top): what its warps do per issue cycle,
    as shares of the warps resident, one segment per stall reason in its colour."""
    labels = stalls["kernel_name"].map(_short) + " (" + stalls["phase"] + ")"
    figure = go.Figure()
    for reason, color in style.STALL_COLORS.items():
        column = f"{reason}_share"
        if column not in stalls or not stalls[column].fillna(0).any():
            continue
        name = reason.replace("_", " ")
        figure.add_bar(name=name, y=labels, x=100 * stalls[column], orientation="h", marker_color=color,
                       hovertemplate="%{y}<br>" + name + ": %{x:.1f} %<extra></extra>")
    return layout(figure, title, barmode="stack", height=160 + 24 * len(stalls),
                   xaxis={"title": "% of warps resident per issue cycle", "range": [0, 100]},
                   yaxis={"autorange": "reversed"})


def bound_bars(bounds: pd.DataFrame, title: str) -> go.Figure:
    """Horizontal grouped bars, one group per kernel and phase (longest on top): its busiest pipe, issue and
    shared-memory % of peak (`analysis.limits.instruction_bounds`); the largest is the kernel's compute bound."""
    labels = bounds["kernel_name"].map(_short) + " (" + bounds["phase"] + ")"
    figure = go.Figure()
    for index, (column, label) in enumerate((("busiest_pipe_pct", "busiest pipe"), ("issue_pct", "issue slots"),
                                             ("shared_pct", "shared memory"))):
        hover = "%{y}<br>" + label + (" (%{customdata})" if column == "busiest_pipe_pct" else "")
        figure.add_bar(name=label, y=labels, x=bounds[column], orientation="h", customdata=bounds["busiest_pipe"],
                       marker_color=style.METRIC_COLORS[index], hovertemplate=hover + ": %{x:.1f} %<extra></extra>")
    return layout(figure, title, barmode="group", height=160 + 36 * len(bounds),
                   xaxis={"title": "% of peak while the SM is active", "range": [0, 100]},
                   yaxis={"autorange": "reversed"})


def scaling_bars(scaling: pd.DataFrame, title: str) -> go.Figure:
    """Horizontal bars: each multi-GPU run's speedup over its single-GPU run with its interval as error bars,
    beside a mark at its GPU count (perfect scaling); runs without a single-GPU run are left out."""
    runs = scaling[(scaling["world_size"] > 1) & scaling["speedup"].notna()].iloc[::-1]
    figure = go.Figure()
    figure.add_bar(name="speedup", y=runs["run"], x=runs["speedup"], orientation="h",
                   marker_color=style.SERIES_COLORS[1],
                   error_x={"type": "data", "symmetric": False, "array": runs["speedup_high"] - runs["speedup"],
                            "arrayminus": runs["speedup"] - runs["speedup_low"], "color": "#333333"},
                   customdata=runs[["efficiency_pct", "efficiency_pct_low", "efficiency_pct_high"]],
                   hovertemplate="%{y}: %{x:.2f}x<br>efficiency %{customdata[0]:.0f} % "
                                 "(%{customdata[1]:.0f}-%{customdata[2]:.0f} %)<extra></extra>")
    figure.add_scatter(name="perfect (GPU count)", y=runs["run"], x=runs["world_size"], mode="markers",
                       marker={"symbol": "line-ns-open", "size": 18, "color": style.SERIES_COLORS[0]},
                       hovertemplate="%{y}: %{x} GPUs<extra></extra>")
    return layout(figure, title, xaxis={"title": "speedup over one GPU (x)", "rangemode": "tozero"},
                   yaxis={"automargin": True}, height=max(260, 160 + 40 * len(runs)))


def communication_bars(parallel: pd.DataFrame, title: str) -> go.Figure:
    """Stacked horizontal bars: per multi-GPU run, the transfer no compute hides and the waiting for the other
    ranks per step (ms)."""
    runs = parallel.iloc[::-1]
    figure = go.Figure()
    for column, name, color in (("exposed_transfer_ms", "exposed transfer", style.SERIES_COLORS[3]),
                                ("wait_ms", "waiting for the other ranks", style.SERIES_COLORS[4])):
        figure.add_bar(name=name, y=runs["run"], x=runs[column], orientation="h", marker_color=color,
                       hovertemplate="%{y}<br>" + name + ": %{x:.1f} ms<extra></extra>")
    return layout(figure, title, barmode="stack", xaxis_title="ms per step", yaxis={"automargin": True},
                   height=max(260, 160 + 40 * len(runs)))
