"""One run, one roofline: the bundled H100 mamba2-lm run gets the same roofline in every view that shows it, whatever
runs are reported beside it, and launches faster than a calibrated ceiling are reported as calibration defects
(never used to raise the roof), on every bundled run of both GPUs."""

from pathlib import Path

import pandas as pd
import pytest

from ssmprof import bundled
from ssmprof.analysis.limits.limiters import limiters
from ssmprof.analysis.limits.roofline import CALIBRATION_TOLERANCE, l2_peak_bytes_per_s, roofline
from ssmprof.analysis.step.communication import one_rank
from ssmprof.hardware import DEVICE_PROFILE, profile_folders, read_device_profile, run_ceilings
from ssmprof.pipeline import reporting
from ssmprof.pipeline.loading import load_run
from ssmprof.reports.render import TABLE_TITLES, render_markdown
from ssmprof.schema import CHECKED_STATUSES

RUN = bundled.REFERENCE / "h100-sxm" / "mamba2-lm"
ON_H200 = bundled.REFERENCE / "h200" / "mamba2-lm"
PER_KERNEL = ["launch_idx", "kernel_name", "phase", "pct_of_roof", "roof_limiter", "verdict"]


def tables_of(analyzed, paths, path) -> dict[str, pd.DataFrame]:
    """The tables of the run at `path` among the runs analyzed from `paths` (in their order)."""
    return analyzed[paths.index(path)].summary.frames()


def report_alone():
    return reporting.analyze_runs([RUN])[0][0].summary.frames()


def report_with_others():
    """Beside an H200 run and other H100 runs whose GEMMs and copies are the fastest launches of the suite."""
    paths = [bundled.REFERENCE / "h100-sxm" / w for w in ("transformer", "hybrid")] + [ON_H200, RUN]
    return tables_of(reporting.analyze_runs(paths)[0], paths, RUN)


def report_with_its_profile_given():
    return reporting.analyze_runs([RUN], read_device_profile(bundled.device_profile("h100-sxm")))[0][0].summary.frames()


def test_the_run_has_one_roofline_in_every_view(bundled_suites):
    """Per kernel (% of roof, lowest roof, verdict) and per category (% of roof, headroom): the same numbers in the
    report of the run alone, with other runs, with its own profile given, on the suite page (its section, the
    overview's SSM rows and SSM roofline), and in `compare` against the H200 run."""
    alone = report_alone()
    expected = alone["roofline"][PER_KERNEL].reset_index(drop=True)
    analyzed, overview = bundled_suites["h100-sxm"]
    views = {"with other runs": report_with_others(), "its profile given": report_with_its_profile_given(),
             "suite page": tables_of(analyzed, bundled.runs("h100-sxm"), RUN)}
    for view, tables in views.items():
        pd.testing.assert_frame_equal(tables["roofline"][PER_KERNEL].reset_index(drop=True), expected, obj=view)
        for key in ("roofline_summary", "headroom_by_category", "headroom"):
            pd.testing.assert_frame_equal(tables[key], alone[key], obj=f"{view}: {key}")
    a, b = (reporting.per_gpu(load_run(path)) for path in (RUN, ON_H200))
    compared = reporting.rooflines(a, b)[0]  # compare draws the points per launch configuration, on the same roofs
    own = alone["roofline"]
    assert set(compared["ceiling_source"]) == set(own["ceiling_source"])
    assert set(compared["peak_flop_per_s"]) == set(own.loc[own["verdict"] != "no counters", "peak_flop_per_s"])
    # each point is its launches' time-weighted % of roof, so it lies within theirs
    launches = own[own["flops"] > 0].groupby(["kernel_name", "phase"])["pct_of_roof"].agg(["min", "max"])
    for row in compared.itertuples():
        low, high = launches.loc[(row.kernel_name, row.phase)]
        assert low - 1e-6 <= row.pct_of_roof <= high + 1e-6, row
    ssm = alone["roofline_summary"].set_index("category").loc["SSM scan", "pct_of_roof"]
    assert overview.ssm_kernels.set_index("workload").loc["mamba2-lm", "pct_of_roof"] == pytest.approx(ssm)
    suite_roof = overview.ssm_roofline.query("workload == 'mamba2-lm'")  # points per launch configuration
    for row in suite_roof.itertuples():
        low, high = launches.loc[(row.kernel_name, row.phase)]
        assert low - 1e-6 <= row.pct_of_roof <= high + 1e-6, row
    beside, given = (f"measured by ssmprof calibrate, {where}" for where in ("device profile beside the run",
                                                                             "given with --device-profile"))
    sources = {view: set(tables["roofline"]["ceiling_source"]) for view, tables in views.items()}
    assert sources == {"with other runs": {beside}, "its profile given": {given}, "suite page": {beside}}
    assert set(alone["roofline"]["ceiling_source"]) == set(compared["ceiling_source"]) == {beside}


def exceeding(kernels: pd.DataFrame, path) -> set[tuple[int, str]]:
    """(launch, rate) of every checked launch above a ceiling of the device profile the run at `path` stands on
    (the first of `hardware.profile_folders` that holds one: its own, else the one beside it; a bundled run's never
    its own) by more than the calibration's tolerance for that ceiling, computed here from the raw counters and the
    profile's numbers (L2's peak is the counter's own: no launch is above it)."""
    folder = next(folder for folder in profile_folders(path) if (folder / DEVICE_PROFILE).is_file())
    measured = read_device_profile(folder / DEVICE_PROFILE).measured
    checked = kernels[kernels["counter_status"].isin(CHECKED_STATUSES)]
    seconds = checked["ncu_duration_ns"].fillna(checked["duration_ns"]) / 1e9
    tensor_flops = checked[[f"tensor_ops_{kind}" for kind in ("bf16", "fp16", "tf32", "fp64", "fp8")]].sum(axis=1)
    fp32_flops = checked["inst_fadd"] + checked["inst_fmul"] + 2 * checked["inst_ffma"]
    dram_bytes = checked["dram_read_bytes"] + checked["dram_write_bytes"]
    rates = {"tensor FLOP/s": (tensor_flops / seconds / 1e12, "bf16_tensor_tflops"),
             "fp32 FLOP/s": (fp32_flops / seconds / 1e12, "fp32_tflops"),
             "DRAM bytes/s": (dram_bytes / seconds / 1e9, "dram_gb_s"),
             "L1 bytes/s": ((checked["l1_bytes"] + 128 * checked["shared_wavefronts"].fillna(0)) / seconds / 1e9,
                            "l1_gb_s")}
    return {(int(launch), rate) for rate, (achieved, field) in rates.items() if getattr(measured, field)
            for launch in checked.loc[achieved > getattr(measured, field) * (1 + CALIBRATION_TOLERANCE[field]),
                                      "launch_idx"]}


SAME_HOST = Path(__file__).parent / "data" / "suite-h100-same-host-calibration"


@pytest.mark.parametrize("runs", [bundled.runs("h100-sxm"), sorted(p.parent for p in SAME_HOST.glob("*/run.json"))],
                         ids=["bundled", "same-host"])
def test_no_h100_launch_is_above_the_ceilings_it_stands_on(runs):
    """The bundled H100 suite, and the suite recorded again with each run's own host calibrated
    (tests/data/suite-h100-same-host-calibration: six workloads on one host, mamba1-lm on a second, each with that
    host's profile): no checked launch is above a ceiling beyond its tolerance."""
    assert len(runs) == len(bundled.paper_suite()) + ("mamba3-lm" in {p.name for p in runs})
    for path in runs:
        run = load_run(path)
        assert exceeding(one_rank(run.kernels, run.info), path) == set(), path.name


def test_the_calibration_tolerances_are_the_measured_spreads():
    """From two fresh H100 calibrations' probe launches (tests/data/calibrate-probes-two-h100s): a probe's fastest
    repeat is within 1.5 % of its median, under the general 2 %; the hybrid's 8192x4096x4096 TNT GEMM (host a's
    suite, tests/data/suite-h100-same-host-calibration) under
    Nsight Compute beats the same host's probe of that shape and tile by 6.0 %, the tensor ceiling's tolerance."""
    launches = pd.read_csv(Path(__file__).parent / "data" / "calibrate-probes-two-h100s" / "probe-launches.csv")
    probes = launches[launches["launch"] >= 5].copy()  # the checks' 5 launches first, then 3 rounds of 24 probes
    probes["probe"] = probes.groupby("host").cumcount() % 24
    durations = probes.groupby(["host", "probe"])["duration_ns"]
    fastest_gain = (1 - durations.min() / durations.median()).max()
    assert fastest_gain < CALIBRATION_TOLERANCE["dram_gb_s"] == CALIBRATION_TOLERANCE["fp32_tflops"] == 0.02
    same_tile = probes[(probes["host"] == "a") & (probes["probe"] == 2)]  # 8192x4096x4096, third layout
    assert set(same_tile["kernel_name"]) == {"nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT"}
    kernels = load_run(SAME_HOST / "hybrid").kernels
    twins = kernels[(kernels["kernel_name"] == "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT")
                    & (kernels["tensor_ops_bf16"] == 2 * 8192 * 4096 * 4096)]
    gain = same_tile["duration_ns"].median() / twins["ncu_duration_ns"].min() - 1
    assert gain == pytest.approx(0.060, abs=5e-4)
    assert CALIBRATION_TOLERANCE["bf16_tensor_tflops"] == round(gain, 2) > CALIBRATION_TOLERANCE["dram_gb_s"]


@pytest.mark.parametrize("gpu", list(bundled.GPUS))
def test_every_launch_above_a_calibrated_ceiling_is_reported_as_a_defect(bundled_suites, gpu):
    """Each bundled run's report lists, per kernel and rate, exactly the launches the data puts above its GPU's
    calibrated ceilings (none once the calibration reaches what the kernels do), and says so above its tables."""
    analyzed, overview = bundled_suites[gpu]
    page = render_markdown(analyzed, overview)
    for path, run in zip(bundled.runs(gpu), analyzed, strict=True):
        kernels = one_rank(load_run(path).kernels, run.info)
        expected = exceeding(kernels, path)
        table = run.summary.calibration_defects
        if table is None:
            table = pd.DataFrame(columns=["rate", "kernel_name", "phase", "launches"])
        where = kernels.set_index("launch_idx")[["kernel_name", "phase"]]
        counted = pd.Series([(*where.loc[launch], rate) for launch, rate in expected], dtype=object).value_counts()
        listed = table.set_index(["kernel_name", "phase", "rate"])["launches"]
        assert listed.to_dict() == counted.to_dict(), path.name
        notes = [note for note in run.warnings if note.startswith("calibration defect")]
        assert len(notes) == bool(expected), path.name
        if expected:
            assert notes[0].startswith(f"calibration defect: {len(expected)} checked launches"), path.name
            assert f"### {TABLE_TITLES['calibration_defects']}" in page
            assert all(name in page for name in table["kernel_name"])


@pytest.mark.parametrize("gpu", list(bundled.GPUS))
def test_the_roofline_and_the_limiters_give_one_l2_and_one_dram_number_per_launch(gpu):
    """Every checked launch of every bundled run: its % of the L2 roof (its FLOP/s over its L2 roof) is the
    limiters' "L2 bandwidth" % and Nsight Compute's `lts__t_bytes` % of peak, and its DRAM % is one number in
    both (of the run's DRAM ceiling). Before one peak per unit, the L2 pair differed by 1.65-1.70x."""
    compared = 0
    for path in bundled.runs(gpu):
        run = load_run(path)
        ceilings, _ = run_ceilings(run.info.gpu.name, run.path)
        checked = run.kernels[run.kernels["counter_status"].isin(CHECKED_STATUSES)
                              & (run.kernels["flops"] > 0) & (run.kernels["l2_bytes"] > 0)]
        roof = roofline(checked, ceilings)
        judged = limiters(checked, evidence=False, ceilings=ceilings)
        pct_of_l2_roof = 100 * roof["flop_per_s"] / (roof["ai_l2"] * l2_peak_bytes_per_s(roof))
        pd.testing.assert_series_equal(pct_of_l2_roof, judged["pct_of_l2_peak"], check_names=False, rtol=1e-9)
        pd.testing.assert_series_equal(judged["pct_of_l2_peak"], checked["l2_throughput_pct"], check_names=False)
        pd.testing.assert_series_equal(roof["pct_of_dram_peak"], judged["pct_of_dram_peak"])
        compared += len(checked)
    assert compared > 3_000
