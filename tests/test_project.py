"""Projection onto another GPU: the roofline floor follows the target's ceilings, the time above it stays."""

import re
from pathlib import Path

import pytest
from known_work import analyzed, kernels, run_info, unpadded
from typer.testing import CliRunner

from ssmprof import schema
from ssmprof.analysis.change.projection import project_categories, project_kernels, projection_error
from ssmprof.hardware import SPECS, Ceilings

H100, H200, A100 = (Ceilings.from_datasheet(SPECS[k]) for k in ("h100-sxm", "h200", "a100-80gb"))


def test_h100_to_h200_speeds_up_memory_bound_kernels_only():
    projected = project_kernels(analyzed(), H100, H200).set_index("kernel_name")
    copy = projected.loc["vectorized_elementwise_kernel"]  # 2 GiB in 1 ms: 64 % of the H100's 3.35 TB/s
    floor_h100, floor_h200 = 2 * 2**30 / 3.35e12 * 1e9, 2 * 2**30 / 4.8e12 * 1e9
    assert copy["projected_ns"] == pytest.approx(1_000_000 - floor_h100 + floor_h200)
    gemm = projected.loc["nvjet_hsh_256x128"]  # compute-bound; same tensor peak on both
    assert gemm["projected_ns"] == pytest.approx(gemm["duration_ns"])
    scan = projected.loc["_chunk_state_fwd_kernel"]  # no counters
    assert scan["projected_ns"] == scan["duration_ns"] and scan["method"].startswith("no counters")


def test_round_trip_is_identity():
    there = project_kernels(analyzed(), H100, A100)
    back = project_kernels(analyzed().assign(duration_ns=there["projected_ns"].round().astype("int64")), A100, H100)
    assert back["projected_ns"].to_numpy() == pytest.approx(kernels()["duration_ns"].to_numpy(), rel=1e-5)


def test_projection_error_against_a_measured_target():
    table = project_categories(project_kernels(analyzed(), H100, H200))
    measured_on_h200 = project_kernels(analyzed(), H100, H200).assign(duration_ns=lambda k: k["projected_ns"] * 1.1)
    errors = projection_error(table, measured_on_h200).set_index("category")
    assert errors["error_pct"].to_numpy() == pytest.approx(100 * (1 / 1.1 - 1))


def test_project_cli(tmp_path):
    from ssmprof.cli import app

    run = schema.write_run(tmp_path / "run", schema.new_run_info(run_info(counter_fraction=0.9)), kernels())
    result = CliRunner().invoke(app, ["project", str(run), "--to", "h200"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("# PROJECTION (not a measurement)") and "| memory |" in unpadded(result.output)
    bad = CliRunner().invoke(app, ["project", str(run), "--to", "b300"])
    assert bad.exit_code == 1 and "unknown target GPU 'b300'" in bad.output


def test_the_step_is_projected_and_checked_against_a_run_it_never_saw():
    """What a user asks first: the step there. The H100 mamba2-lm run bundled until 2026-11-27
    (tests/data/h100-suite-before-timing-pass) projected onto the H200 lands within 3 % of the bundled H200 run's
    step (211.1 against 207.2 ms; the H100 run bundled since projects to 214.9 ms, +3.8 %); the error table's
    left-out categories are named."""
    from ssmprof import bundled
    from ssmprof.pipeline import reporting

    before = Path(__file__).parent / "data" / "h100-suite-before-timing-pass" / "mamba2-lm"
    text = reporting.project(before, "h200", check=bundled.REFERENCE / "h200" / "mamba2-lm")
    step = re.search(r"about (\d+\.\d) ms projected on the NVIDIA H200.*\n(?:.*\n)*?Step: \1 ms projected, "
                     r"(\d+\.\d) ms measured there \(([+-]\d+\.\d) %\)", text)
    assert step and abs(float(step.group(3))) < 3.0
    assert "**Step: 214.7 ms measured (212.9-225.9, 95 % interval of the timed steps)" in text
    assert "Left out of this table, each under 5 % of the measured target's kernel time: convolution" in text
