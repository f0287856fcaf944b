"""One measurement, one answer, whatever the page (issue #55): the bundled pages of one GPU state one tensor peak
(before, the H100's read 830.5 on the suite's chart, 833.5 in six runs' rooflines and 830.2 on the models page: three
hosts' calibrations), and a run's counter coverage reads the same in the suite's table as in its own finding and
description (before, 99.5 % and 100 %: one share, two roundings)."""

import pytest

from ssmprof import bundled
from ssmprof.analysis.findings.phrases import of_kind, pct_text
from ssmprof.hardware import model_ceilings
from ssmprof.pipeline import reporting
from ssmprof.pipeline.loading import load_run
from ssmprof.reports.style import cell
from ssmprof.schema import read_sweep

# the pages `ssmprof reference` writes of a GPU's runs, by the runs each shows
PAGES = {"suite": bundled.runs, "models": bundled.shipped_models, "parallel": bundled.parallel_runs}
CASES = [(gpu, page) for gpu in bundled.GPUS for page, runs in PAGES.items() if len(runs(gpu)) > 1]


@pytest.fixture(scope="module")
def pages(bundled_suites):
    """(analyzed runs, overview) of every page of CASES, by (GPU, page): the suites as the session has them."""
    return {(gpu, page): bundled_suites[gpu] if page == "suite" else reporting.analyze_runs(PAGES[page](gpu))
            for gpu, page in CASES}


def stated_tensor_peaks(analyzed, overview) -> dict[str, set[float]]:
    """The tensor peaks (TFLOP/s) a page states, by where: each run's roofline and the overview's SSM roofline chart;
    a run without counters states none."""
    stated = {}
    for run in analyzed:
        roofline = run.summary.roofline
        if roofline is not None and "path" in roofline:
            stated[run.info.workload.name] = set(roofline.loc[roofline["path"] == "tensor", "peak_flop_per_s"] / 1e12)
    chart = overview.ssm_roofline
    stated["suite chart"] = set(chart.loc[chart["path"] == "tensor", "peak_flop_per_s"] / 1e12) if len(chart) else set()
    return {where: peaks for where, peaks in stated.items() if peaks}


@pytest.mark.parametrize(("gpu", "page"), CASES)
def test_every_page_of_a_gpu_states_its_one_tensor_peak(pages, gpu, page):
    """Every run's roofline and the page's chart on the GPU's bundled profile, the peak `project` and the Results
    set that GPU on, whichever host ran the run (mamba3-lm and the shipped models on the H100 each carry their host's
    calibration)."""
    peak = model_ceilings(gpu).bf16_tensor_tflops
    stated = stated_tensor_peaks(*pages[(gpu, page)])
    # the H200's multi-GPU runs were profiled without counters, save one (the H100's carry them on rank 0)
    assert stated or page == "parallel"
    assert {where: peaks for where, peaks in stated.items() if peaks != {peak}} == {}, peak


@pytest.mark.parametrize("gpu", list(bundled.GPUS))
def test_the_other_views_of_a_gpu_stand_on_the_same_peak(gpu):
    """Each sweep point's ceilings (the regime map's) and the runs' ceilings as `compare` and the Results read them:
    the same peak as the pages."""
    peak = model_ceilings(gpu).bf16_tensor_tflops
    paths = bundled.runs(gpu) + bundled.shipped_models(gpu) + bundled.parallel_runs(gpu)
    paths += [folder / point.run for folder in bundled.sweeps(gpu) for point in read_sweep(folder).points if point.run]
    stated = {path.name: reporting.ceilings_of(load_run(path))[0].bf16_tensor_tflops for path in paths}
    assert {name: value for name, value in stated.items() if value != peak} == {}


def test_compare_draws_each_gpu_on_its_one_peak():
    """`compare` of the H100 run whose folder holds its host's calibration (mamba3-lm) against the H200's: each side's
    roofline on its GPU's one peak."""
    on_h200 = {path.name: path for path in bundled.runs("h200")}
    path = bundled.REFERENCE / "h100-sxm" / "mamba3-lm"
    points = reporting.rooflines(*(reporting.per_gpu(load_run(p)) for p in (path, on_h200[path.name])))
    assert points is not None
    stated = {gpu: set(frame.loc[frame["path"] == "tensor", "peak_flop_per_s"] / 1e12)
              for gpu, frame in zip(bundled.GPUS, points, strict=True)}
    assert stated == {gpu: {model_ceilings(gpu).bf16_tensor_tflops} for gpu in bundled.GPUS}


@pytest.mark.parametrize(("gpu", "page"), CASES)
def test_a_runs_coverage_reads_alike_in_the_suite_table_and_its_finding(pages, gpu, page):
    """The suite table's "Counters cover" cell, the run's counters finding (its value and its sentence) and its
    description (provenance): one number, one rounding. A share short of all of the time never reads 100 %."""
    analyzed, overview = pages[(gpu, page)]
    table = overview.step_times.set_index("workload")["counter_coverage_pct"]
    labels = reporting.run_labels({i: (load_run(p), None, []) for i, p in enumerate(PAGES[page](gpu))})
    for label, run in zip(labels, analyzed, strict=True):
        shown = cell("counter_coverage_pct", table[label])
        finding = of_kind(run.summary.findings, "counters")
        assert finding is not None and finding["value"] == shown, (label, finding, shown)
        if run.info.coverage.counter_time_fraction:
            assert f"Counters cover {shown} of kernel time" in finding["finding"], label
        described = dict(zip(run.summary.provenance["item"], run.summary.provenance["value"], strict=True))
        assert f"covering {shown} of kernel time" in described["counters"] or not table[label], label
        if run.info.coverage.counter_time_fraction < 1:
            assert shown != pct_text(100), label
