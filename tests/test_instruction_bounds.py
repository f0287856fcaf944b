"""Instruction-level bounds: the tightest of pipes, issue slots and shared memory, on known rows and bundled runs."""

import math
from pathlib import Path

import pandas as pd
import pytest
from known_work import analyzed, kernels

import ssmprof
from ssmprof.analysis.limits.instruction_bounds import (
    bound_sentence,
    instruction_bounds,
    issue_peak_per_s,
    launch_bounds,
)
from ssmprof.pipeline.loading import load_run

H100 = {"sm_count": 132, "clocks": {"sm_mhz": 1980}}
REFERENCE = Path(ssmprof.__file__).parent / "reference" / "h100-sxm"
NAN = math.nan


def with_units(pipes: dict, issue: float, shared: float, issue_active: float = NAN) -> pd.DataFrame:
    """One measured SSD launch with the given unit percentages (the known-work frame's second row)."""
    frame = kernels().iloc[[1]].reset_index(drop=True)
    for column in ("tensor_pipe_pct", "fma_pipe_pct", "alu_pipe_pct", "xu_pipe_pct", "lsu_pipe_pct"):
        frame[column] = pipes.get(column, 0.0)
    frame["inst_issue_pct"], frame["shared_pipe_pct"], frame["issue_active_pct"] = issue, shared, issue_active
    frame["warp_inst_executed"], frame["shared_wavefronts"], frame["l2_bytes"] = 8e8, 2e8, 32 * 4e7
    return analyzed(frame)


@pytest.mark.parametrize(("pipes", "issue", "shared", "bound", "pct", "missing"), [
    ({"xu_pipe_pct": 71.0, "fma_pipe_pct": 30.0}, 40.0, 10.0, "XU pipe (special functions)", 71.0, ""),  # exponentials
    ({"tensor_pipe_pct": 20.0}, 35.0, 82.0, "shared memory", 82.0, ""),  # shared memory binds
    ({"alu_pipe_pct": 30.0, "lsu_pipe_pct": 28.0}, 64.0, 12.0, "issue slots", 64.0, ""),  # a spread mix: issue
    ({"fma_pipe_pct": 50.0}, NAN, NAN, "FMA pipe", 50.0, "shared memory, instructions executed"),  # an older run
])
def test_the_tightest_unit_binds(pipes, issue, shared, bound, pct, missing):
    row = launch_bounds(with_units(pipes, issue, shared)).iloc[0]
    assert (row["bound"], row["bound_pct"], row["missing"]) == (bound, pct, missing)


def test_an_older_run_binds_on_the_issue_active_share_and_says_what_it_lacks():
    row = launch_bounds(with_units({"alu_pipe_pct": 30.0}, NAN, NAN, issue_active=55.0)).iloc[0]
    assert (row["bound"], row["bound_pct"], row["issue_source"]) == ("issue slots", 55.0, "issue-active cycles")
    assert bound_sentence(pd.Series({**row, "missing": row["missing"]})) == \
        "issue slots 55 % (shared memory, instructions executed not collected)"


def test_launches_without_counters_have_no_bound():
    bounds = launch_bounds(analyzed())
    assert list(bounds["bound"]).count("no counters") == 5  # the known-work rows carry no pipe counters
    assert bounds["bound_pct"].isna().all()


def test_instruction_roofline_coordinates():
    assert issue_peak_per_s(H100) == 4 * 132 * 1980e6
    assert math.isnan(issue_peak_per_s({"name": "a GPU without clocks"}))
    table = instruction_bounds(with_units({"xu_pipe_pct": 71.0}, 40.0, 10.0), H100, category=None)
    row = table.iloc[0]
    assert row["inst_per_shared_wavefront"] == 4.0 and row["inst_per_l2_sector"] == 20.0
    assert row["inst_rate_pct_of_issue_peak"] == pytest.approx(100 * 8e8 / 100e-6 / (4 * 132 * 1980e6))


# The H100 paper suite bundled until 2026-11-27, recorded before the issue and shared-memory counters
BEFORE_COUNTERS = Path(__file__).parent / "data" / "h100-suite-before-timing-pass"


# recorded before the issue and shared-memory counters: bound by the issue-active share and the pipes
BEFORE = [
    ("mamba1-lm", "selective_scan_fwd_kernel", "forward", "issue slots", 59.6, "ALU pipe"),
    ("mamba1-lm", "selective_scan_bwd_kernel", "backward", "issue slots", 42.6, "load/store pipe"),
    ("mamba-vision", "selective_scan_fwd_kernel", "forward", "issue slots", 67.5, "load/store pipe"),
    ("mamba2-lm", "_chunk_scan_fwd_kernel", "forward", "issue slots", 48.8, "ALU pipe"),
]
# recorded with them (2026-11-27): the issue slots by the instructions executed, shared memory among the units
BUNDLED = [
    ("mamba1-lm", "selective_scan_fwd_kernel", "forward", "issue slots", 59.8, "ALU pipe"),
    ("mamba1-lm", "selective_scan_bwd_kernel", "backward", "issue slots", 42.8, "load/store pipe"),
    ("mamba-vision", "selective_scan_fwd_kernel", "forward", "issue slots", 67.6, "load/store pipe"),
    ("mamba2-lm", "_chunk_scan_fwd_kernel", "forward", "shared memory", 64.4, "ALU pipe"),
]


@pytest.mark.parametrize(("folder", "missing", "workload", "kernel", "phase", "bound", "pct", "pipe"), [
    *[(BEFORE_COUNTERS, "shared memory, instructions executed", *row) for row in BEFORE],
    *[(REFERENCE, "", *row) for row in BUNDLED],
])
def test_h100_selective_scan_and_ssd_bounds(folder, missing, workload, kernel, phase, bound, pct, pipe):
    run = load_run(folder / workload)
    table = instruction_bounds(run.kernels, run.info.gpu.model_dump())
    row = table[(table["kernel_name"] == kernel) & (table["phase"] == phase)].iloc[0]
    assert (row["bound"], round(row["bound_pct"], 1), row["busiest_pipe"]) == (bound, pct, pipe)
    assert row["missing"] == missing
