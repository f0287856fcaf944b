"""Instruction-level bounds on H100 runs recorded with the issue, shared-memory and warp-instruction counters
(tests/data/instruction-bounds-h100), and Mamba-3's counters by application replay
(tests/data/mamba3-lm-paper-h100-app-replay): the selective scans sit under every FLOP roof, and what holds them is
named with its number, by the instruction-level bounds and by the limiter verdicts."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ssmprof.analysis.limits.instruction_bounds import instruction_bounds
from ssmprof.analysis.limits.limiters import limiter_summary, limiters
from ssmprof.cli import app
from ssmprof.pipeline.loading import load_run
from ssmprof.schema import CHECKED_STATUSES

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize(("run", "kernel", "bound", "pct", "shared_pct"), [
    ("instruction-bounds-h100/mamba1-lm", "selective_scan_fwd_kernel", "issue slots", 59.5, 53.1),
    ("instruction-bounds-h100/mamba1-lm", "selective_scan_bwd_kernel", "issue slots", 42.8, 29.0),
    ("instruction-bounds-h100/mamba-vision", "selective_scan_fwd_kernel", "issue slots", 67.5, 51.0),
    ("instruction-bounds-h100/mamba-vision", "selective_scan_bwd_kernel", "issue slots", 46.5, 35.8),
    ("mamba3-lm-paper-h100-app-replay", "mamba3_siso_fwd_kernel", "shared memory", 23.9, 23.9),
    ("mamba3-lm-paper-h100-app-replay", "mamba3_siso_bwd_kernel_dqkv", "shared memory", 20.5, 20.5),
])
def test_what_holds_a_kernel_under_every_roof(run, kernel, bound, pct, shared_pct):
    loaded = load_run(DATA / run)
    bounds = instruction_bounds(loaded.kernels, loaded.info.gpu.model_dump()).set_index("kernel_name")
    row = bounds.loc[kernel]
    assert (row["bound"], round(row["bound_pct"], 1), round(row["shared_pct"], 1)) == (bound, pct, shared_pct)
    assert row["missing"] == ""  # every instruction-level counter was collected on the GPU


def test_mamba3_paper_has_checked_counters_on_the_h100_by_application_replay():
    run = load_run(DATA / "mamba3-lm-paper-h100-app-replay")
    assert run.info.collectors.counters.replay_mode == "application"
    ssm = run.kernels[run.kernels["category"] == "SSM scan"]
    checked = ssm.loc[ssm["counter_status"].isin(CHECKED_STATUSES), "duration_ns"].sum()
    assert checked / ssm["duration_ns"].sum() == 1.0
    assert round(run.info.coverage.counter_time_fraction, 2) == 0.58  # focus mode: the SSM kernels and five others


# The selective scans' verdicts: the bound that holds them, with its number, as the limiter where it is busy
# past half its peak, with the second unit busy past half its own as the runner-up (shared memory, the load/store
# pipe), else as the runner-up of the occupancy that explains the rest of the time.
FORWARD, BACKWARD = ("selective_scan_fwd_kernel", "forward"), ("selective_scan_bwd_kernel", "backward")
SELECTIVE_SCAN_VERDICTS = {
    "mamba1-lm": {FORWARD: ("issue slots at 59.5 % of peak", "shared memory at 53.1 % of peak"),
                  BACKWARD: ("occupancy (registers, shared memory)", "issue slots at 42.8 % of peak")},
    "mamba-vision": {FORWARD: ("issue slots at 67.5 % of peak", "load/store pipe at 53.9 % of peak"),
                     BACKWARD: ("occupancy (registers)", "issue slots at 44.0 % of peak")},
}


@pytest.mark.parametrize("workload", list(SELECTIVE_SCAN_VERDICTS))
def test_the_selective_scans_verdicts_name_their_bound_with_its_number(workload):
    loaded = load_run(DATA / "instruction-bounds-h100" / workload)
    verdicts = limiters(loaded.kernels)
    scans = verdicts[verdicts["kernel_name"].str.startswith("selective_scan_")]
    assert (scans["top_unit"] == "issue slots").all()  # by instructions executed, not the issue-active cycles
    assert (scans["limiter_pct"].notna() == (scans["limiter"] == "issue slots")).all()
    summary = limiter_summary(verdicts, category="SSM scan").set_index(["kernel_name", "phase"])
    found = {key: (row["limiter"], row["runner_up"]) for key, row in summary.iterrows()}
    assert found == SELECTIVE_SCAN_VERDICTS[workload]
    assert summary["evidence"].str.contains(r"units by % of peak: issue slots \d+ %, .*shared memory \d+ %").all()


@pytest.mark.parametrize("workload", list(SELECTIVE_SCAN_VERDICTS))
def test_the_report_names_the_selective_scans_bound_with_its_number(workload):
    result = CliRunner().invoke(app, ["report", str(DATA / "instruction-bounds-h100" / workload), "--format", "md"])
    assert result.exit_code == 0, result.output
    for limiter, runner_up in SELECTIVE_SCAN_VERDICTS[workload].values():
        assert f"| {limiter} " in result.output and f"| {runner_up} " in result.output  # the limiter tables
    assert "% issue slots" in result.output  # the SSM finding: its share of the time, then the unit
