"""The toolkit on real GPU data: runs recorded on our H100/H200 (tests/data, and the bundled reference runs)."""

import lzma
import shutil
from pathlib import Path

import pytest
from known_work import RECORDED_COUNTER_COLUMNS
from typer.testing import CliRunner

from ssmprof import bundled, schema
from ssmprof.analysis.launches.frame import analysis_frame
from ssmprof.analysis.limits.tensor_vector import class_summary, classify
from ssmprof.analysis.summaries import suite
from ssmprof.analysis.trust.calibration import evaluate
from ssmprof.cli import app
from ssmprof.hardware import model_ceilings
from ssmprof.pipeline.loading import load_run
from ssmprof.profiler import calibrate

DATA = Path(__file__).parent / "data"
runner = CliRunner()


def test_profiled_mamba2_small_iteration_is_complete():
    """`ssmprof profile mamba2-lm --preset small` on the H100 (sampled counters)."""
    run = schema.read_run(DATA / "mamba2-lm-small-h100")
    kernels = analysis_frame(run.kernels)
    assert len(kernels) == run.info.coverage.launches == 310
    assert run.info.coverage.phase_time_fraction == 1.0  # every launch in forward/backward/optimizer
    assert run.info.coverage.counter_time_fraction == 1.0
    assert run.info.collectors.counters.profiled_not_on_timeline == []
    backward = set(kernels.loc[kernels["phase"] == "backward", "kernel_name"])
    assert {"_chunk_scan_bwd_dstates_kernel", "_chunk_scan_bwd_dc_kernel", "_chunk_scan_bwd_ddAcs_stable_kernel",
            "_chunk_scan_chunk_state_bwd_dx_kernel", "_chunk_state_bwd_db_kernel",
            "_state_passing_bwd_kernel", "_bmm_chunk_bwd_kernel"} <= backward
    shares = kernels.groupby("category")["duration_ns"].sum() / kernels["duration_ns"].sum()
    assert shares.get("other", 0.0) < 0.05
    classes = class_summary(classify(kernels)).set_index(["phase", "class"])["time_share"]
    # the SSD chain mixes tensor and vector work, forward and backward
    assert classes[("forward", "Tensor+Vector")] > 0.5 and classes[("backward", "Tensor+Vector")] > 0.5


def test_calibration_report_extracts_and_passes(tmp_path):
    """The five known-work kernels of `ssmprof calibrate` on the H100 (2026-11-24), read back through ncu_report: all
    five checks pass, the L1 read kernel's L1 bytes exactly what it reads and stores (before its loop's loads were
    16-byte vector loads in the GPU host's Triton 3.6, they came out 3.94x: scalar loads with a 16-byte stride between
    lanes touch four times the bytes they use)."""
    from ssmprof.profiler.ncu_extract import read_report

    report = tmp_path / "calibrate.ncu-rep"
    with lzma.open(DATA / "calibrate-h100" / "calibrate.ncu-rep.xz") as packed, open(report, "wb") as out:
        shutil.copyfileobj(packed, out)
    frame = read_report(report, columns=RECORDED_COUNTER_COLUMNS)
    assert len(frame) == 5 and set(frame["phase"]) == {"forward"}
    checks = evaluate(frame, calibrate.KNOWN_WORK).set_index("check")
    assert checks["passed"].tolist() == [True] * 5, checks
    # every block read and the sums stored, once each
    block_bytes = 4 * calibrate.L1_BLOCK * calibrate.L1_CHECK_PROGRAMS
    assert checks.loc["L1 bytes (L1 read kernel)", "measured"] == block_bytes * (calibrate.L1_CHECK_ITERS + 1)
    l2_blocks = 4 * calibrate.L1_BLOCK * calibrate.L2_CHECK_PROGRAMS
    assert checks.loc["L1 bytes (L2 read kernel)", "measured"] == l2_blocks * (calibrate.L2_CHECK_ITERS + 1)
    # the L2 slices count fewer: Hopper's request coalescer merges requests of several SMs for one sector
    l2_read = frame.set_index("kernel_name").loc["l2_read"]
    assert round(100 * l2_read["l2_bytes"] / l2_read["l1_bytes"], 1) == 94.8
    assert checks.loc["tensor FLOPs (bf16 GEMM)", "error_pct"] == pytest.approx(0.0, abs=1e-9)


def regress_run(name: str) -> str:
    return str(DATA / "regress-reruns-h200" / name)


def test_regress_on_real_reruns(tmp_path):
    """mamba2-lm small on the H200, timeline only: a baseline of 4 runs, 5 other reruns, a worse chunk size."""
    baseline = tmp_path / "baseline.json"
    result = runner.invoke(app, ["baseline", *(regress_run(f"baseline-{i}") for i in range(1, 5)), "-o", str(baseline)])
    assert result.exit_code == 0, result.output
    for i in range(1, 6):
        result = runner.invoke(app, ["regress", regress_run(f"rerun-{i}"), "--baseline", str(baseline)])
        assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["regress", regress_run("planted-chunk64"), "--baseline", str(baseline),
                                 "--allow-different-config"])
    assert result.exit_code == 1
    assert "_state_passing_fwd_kernel [forward" in result.output and "_state_passing_bwd_kernel" in result.output


def test_bundled_suites_overview():
    kernels = {path.name: load_run(path).kernels for path in bundled.runs("h100-sxm")}
    assert list(kernels) == ["mamba2-lm", "hybrid", "mamba-vision", "graph-mamba", "transformer", "mamba1-lm",
                             "mamba3-lm"]
    ceilings = dict.fromkeys(kernels, model_ceilings("h100-sxm"))
    shares = suite.category_shares(kernels).set_index("workload")
    assert shares.sum(axis=1).to_numpy() == pytest.approx(100.0)
    assert (shares["other"] < 5).all()
    ssm = suite.ssm_kernels(kernels, ceilings).set_index("workload")
    assert "transformer" not in ssm.index
    # Mamba-1's selective scan is vector work only; Mamba-2's SSD chunk kernels mostly mix in tensor work
    assert ssm.loc["mamba1-lm", "forward VectorOnly %"] == 100.0
    assert ssm.loc["mamba2-lm", "forward Tensor+Vector %"] > 50
    # mamba3-lm's H100 run (batch 1, counters): its SISO kernels mix tensor and vector work forward
    assert ssm.loc["mamba3-lm", "ssm_time_pct"] > 20 and ssm.loc["mamba3-lm"].notna().all()
    assert ssm.loc["mamba3-lm", "forward Tensor+Vector %"] > 50


def test_readme_results_are_generated_from_the_bundled_runs():
    result = runner.invoke(app, ["results"])
    assert result.exit_code == 0, result.output
    readme = (Path(__file__).parent.parent / "docs" / "results.md").read_text()
    assert result.output in readme, "docs/results.md's Results section is stale: run `make results`"


def test_reference_renders_without_a_gpu(bundled_reference):
    result, out = bundled_reference, bundled_reference.out
    assert result.exit_code == 0, result.output
    assert "BUNDLED measurements" in result.output
    # one page to open first, not a list of every file written (once 18 "written:" lines)
    assert f"Open first: {out / 'suite-h100-sxm.html'}" in result.output and "written:" not in result.output
    assert '<script src="plotly.min.js">' in (out / "suite-h100-sxm.html").read_text()  # beside it: offline
    assert (out / "plotly.min.js").stat().st_size > 1e6
    # the paper suite; mamba3-lm runs at batch 1 on the H100 and 2 on the H200: other work, not compared
    assert len(list(out.glob("compare-*-h100-sxm-vs-h200.html"))) == 6


def test_every_bundled_file_is_package_data():
    """A bundled run the wheel leaves out is missing on an installed ssmprof: every file under ssmprof/reference
    matches a `package-data` pattern, whose `*` (setuptools' glob) stays within one folder."""
    import fnmatch
    import re

    root = Path(bundled.__file__).parent
    table = (root.parent / "pyproject.toml").read_text().split("[tool.setuptools.package-data]", 1)[1]
    patterns = re.findall(r'"([^"]+)"', table.split("]", 1)[0])  # tomllib is Python 3.11+; we support 3.10
    files = [path.relative_to(root).as_posix() for path in bundled.REFERENCE.rglob("*") if path.is_file()]
    assert len(files) > 100 and not [name for name in files if not any(
        fnmatch.fnmatch(name, pattern) and name.count("/") == pattern.count("/") for pattern in patterns)]


def test_ceilings_from_the_calibration_launches_counters(tmp_path):
    """The same recorded launches as ceilings, each rate on its counters over its own counted duration (the units
    and instrument of every run's roofline): the copy moves 3,004 GB/s of DRAM bytes, the L2 read kernel 7,749 GB/s
    of L2 slice bytes, the 4096^3 GEMM 775.7 TFLOP/s."""
    from ssmprof.analysis.trust.calibration import counter_ceilings
    from ssmprof.profiler.ncu_extract import read_report

    report = tmp_path / "calibrate.ncu-rep"
    with lzma.open(DATA / "calibrate-h100" / "calibrate.ncu-rep.xz") as packed, open(report, "wb") as out:
        shutil.copyfileobj(packed, out)
    ceilings = counter_ceilings(read_report(report, columns=RECORDED_COUNTER_COLUMNS))
    rounded = {field: (round(rate, 1), kernel) for field, (rate, kernel) in ceilings.items()}
    assert rounded == {"dram_gb_s": (3004.3, "vectorized_elementwise_kernel"), "l2_gb_s": (7749.5, "l2_read"),
                       "l1_gb_s": (12659.7, "l1_read"),
                       "bf16_tensor_tflops": (775.7, "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"),
                       "fp32_tflops": (60.8, "fma_chain")}
