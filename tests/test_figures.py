"""The charts' labels and axes as issue #55 found them on the bundled pages: each roof labelled where its line shows
(the models page's "DRAM 3.3 TB/s" lay under the y axis' minimum, the main roof unlabelled), no label over a kernel
("vector peak" over the SSM kernels), and log axes ticked in full labels (the history's squashed 2 5 2 5)."""

import math

import pytest

from ssmprof import bundled
from ssmprof.pipeline import reporting
from ssmprof.reports import figures


@pytest.fixture(scope="module")
def charts(bundled_suites) -> dict[str, object]:
    """Every kind of roofline the bundled pages draw: each H100 run's, each suite's SSM kernels by workload, the
    shipped models' (hf:bamba, hf:nemotron-h), and a comparison's two runs on one chart."""
    made, first = {}, next(iter(bundled.GPUS))
    for gpu, (analyzed, overview) in bundled_suites.items():
        made[f"suite-{gpu}"] = figures.roofline_scatter(overview.ssm_roofline, "SSM", color_by="workload")
        if gpu == first:
            made |= {f"run-{run.info.workload.name}": figures.roofline_scatter(run.summary.roofline_points, "run")
                     for run in analyzed if run.summary.roofline_points is not None}
    _, models = reporting.analyze_runs(bundled.shipped_models(first))
    made["models"] = figures.roofline_scatter(models.ssm_roofline, "SSM", color_by="workload")
    pair = [next(p for p in bundled.runs(gpu) if p.name == "mamba2-lm") for gpu in bundled.GPUS]
    a, b = reporting.rooflines(*(reporting.per_gpu(reporting.load_run(path)) for path in pair))
    made["compare-mamba2-lm"] = figures.roofline_overlay({"A: H100": a, "B: H200": b}, "both")
    return made


NAMES = ["suite-h100-sxm", "suite-h200", "models", "compare-mamba2-lm", "run-mamba2-lm", "run-hybrid",
         "run-graph-mamba", "run-transformer"]


def ranges(figure) -> tuple:
    return tuple(figure.layout.xaxis.range), tuple(figure.layout.yaxis.range)


@pytest.mark.parametrize("name", NAMES)
def test_every_roof_is_labelled_inside_the_plot_on_its_line(charts, name):
    """Each label's anchor lies in the plot, a bandwidth's on its slope: the DRAM roof's label is seen."""
    figure = charts[name]
    (x_low, x_high), (y_low, y_high) = ranges(figure)
    labels = {a.text: a for a in figure.layout.annotations}
    assert any("DRAM" in text for text in labels) and any("peak" in text for text in labels), list(labels)
    roofs = [(math.log10(t.y[0]) - math.log10(t.x[0])) for t in figure.data
             if t.mode == "lines" and "DRAM" in t.name and t.y[0] < t.y[-1]]  # a slope: log y - log x
    for text, label in labels.items():
        assert x_low <= label.x <= x_high and y_low <= label.y <= y_high, (text, label.x, label.y)
        if "DRAM" in text:
            assert any(abs(label.y - label.x - offset) < 1e-6 for offset in roofs), text


@pytest.mark.parametrize("name", NAMES)
def test_no_roof_label_lies_over_a_kernel(charts, name):
    """No marker within a label's box (as `figures._place` sizes it; tests/test_report.py measures the drawn
    pages in Chromium too)."""
    figure = charts[name]
    points = [(math.log10(x), math.log10(y)) for t in figure.data if "markers" in (t.mode or "")
              for x, y in zip(t.x, t.y, strict=True) if x and y]
    covered = []
    for label in figure.layout.annotations:
        x0, x1, y0, y1 = figures._box((label.x, label.y, label.xanchor, label.yanchor), label.text, ranges(figure))
        covered += [label.text for x, y in points if x0 < x < x1 and y0 < y < y1]
    assert covered == []


def test_a_shipped_model_gets_a_marker_of_its_own(charts):
    """The models page: hf:bamba and hf:nemotron-h in shapes no registry workload wears (mamba2-lm's circle and
    hybrid's diamond before)."""
    shapes = {t.name: t.marker.symbol for t in charts["models"].data if t.name and t.name.startswith("hf:")}
    suite = {t.marker.symbol for t in charts["suite-h100-sxm"].data if t.mode == "markers" and t.name != ""}
    assert len(shapes) == 2 and len(set(shapes.values())) == 2 and not set(shapes.values()) & suite, shapes


@pytest.mark.parametrize(("low", "high", "ticks"), [
    (0.14, 20.0, ["0.1", "0.3", "1", "3", "10", "30"]),  # a history's kernel time per category (ms)
    (95.0, 2200.0, ["30", "100", "300", "1k", "3k"]),  # its time per launch (us): plotly drew 2 5 2 5 between
    (110.0, 180.0, ["100", "200"]),  # within a decade: the ticks around it, never none
    (40.0, 80.0, ["20", "50", "100"]),
    (1e-3, 1e9, ["0.001", "1", "1k", "1M", "1G"]),  # many decades: every third
])
def test_log_ticks_are_few_and_in_full(low, high, ticks):
    axis = figures.log_ticks(low, high)
    assert axis["ticktext"] == ticks and len(ticks) <= figures.MOST_LOG_TICKS
    assert axis["range"][0] <= math.log10(low) and axis["range"][1] >= math.log10(high)
