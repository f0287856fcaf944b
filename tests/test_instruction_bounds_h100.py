"""Instruction-level bounds on H100 runs recorded with the issue, shared-memory and warp-instruction counters
(tests/data/instruction-bounds-h100), and Mamba-3's counters by application replay
(tests/data/mamba3-lm-paper-h100-app-replay): the selective scans sit under every FLOP roof, and what holds them is
named with its number."""

from pathlib import Path

import pytest

from ssmprof.analysis.instruction_bounds import instruction_bounds
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
