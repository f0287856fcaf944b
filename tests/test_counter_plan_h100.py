"""The counter plan measured on H100s (tests/data/counter-plan-h100, its README says how): what each profile's
counters cost against the cost predicted before they started, what they checked, that every profiled row found its
launch or is named with its cause, and, on the CPU, the plan's own rules: the targeted passes split where one
--kernel-id would profile far more launches than its bins need, a budget that no plan meets refused in one line,
and a counter pass that runs the traced iteration's weights."""

from __future__ import annotations

import json
import weakref
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from ssmprof import load
from ssmprof.analysis.trust.counter_checks import DURATION_FLOOR_NS, DURATION_RATIO
from ssmprof.cli import app
from ssmprof.errors import InvalidConfig
from ssmprof.profiler.counters import SHORT_LENDER_NS, SamplingPlan, lent_ncu_duration
from ssmprof.profiler.profile_run import ProfileSettings, choose_plan

DATA = Path(__file__).resolve().parent / "data" / "counter-plan-h100"
H100_BYTES = 85_520_809_984  # the H100 SXM's memory as CUDA reports it


def counters_of(workload: str) -> dict:
    return json.loads((DATA / "suite" / f"{workload}.json").read_text())["collectors"]["counters"]


@pytest.mark.parametrize(("workload", "measured_s", "predicted_s", "checked"), [
    ("mamba2-lm-paper", 85.8, 75.5, 0.993),
    ("hybrid-paper", 102.9, 91.7, 0.993),
    ("transformer-paper", 65.3, 61.2, 0.995),
    ("mamba1-lm-paper", 63.2, 61.4, 0.995),
    ("graph-mamba-paper", 145.4, 125.5, 0.959),
    ("mamba-vision-paper", 112.5, 119.8, 0.985),
])
def test_the_paper_suite_counters_cost_what_was_predicted_within_25_percent(workload, measured_s, predicted_s,
                                                                           checked):
    counters = counters_of(workload)
    run = json.loads((DATA / "suite" / f"{workload}.json").read_text())
    assert (counters["wall_s"], counters["predicted_s"]) == pytest.approx((measured_s, predicted_s), abs=0.05)
    assert abs(counters["predicted_s"] / counters["wall_s"] - 1) < 0.25
    assert run["coverage"]["counter_time_fraction"] == pytest.approx(checked, abs=5e-4)
    assert counters["replay_mode"] == "kernel"


def test_the_suite_counters_take_longer_than_five_minutes_on_one_h100():
    """The issue's goal of the whole paper suite in 5 min on one H100: its counter passes alone took 575 s."""
    total = sum(counters_of(path.stem)["wall_s"] for path in (DATA / "suite").glob("*.json"))
    assert total == pytest.approx(575.0, abs=0.5)


def test_the_sampler_keeps_no_activation_alive_so_the_peak_and_the_replay_are_as_before():
    """mamba2-lm paper peaked at 42.4 GiB while the host sampler's last stacks outlived each reading (application
    replay chosen, its passes 366 s); 35.9 GiB as bundled before the sampler, kernel replay."""
    run = json.loads((DATA / "suite" / "mamba2-lm-paper.json").read_text())
    assert run["harness"]["peak_memory_bytes"] / 2**30 == pytest.approx(35.90, abs=0.01)


def test_a_profiled_row_placed_nowhere_is_named_with_its_cause():
    """cuDNN chose other convolution kernels in mamba-vision's pass than in its traced iteration."""
    counters = counters_of("mamba-vision-paper")
    assert counters["grid_match_pct"] == pytest.approx(98.97, abs=0.01)
    assert counters["profiled_not_placed"] == [
        "Kernel grid 1x1x127 block 128x1x1 smem 73728: its kernel is not in the traced iteration",
        "Kernel grid 4x1x56 block 128x1x1 smem 65536: its kernel is not in the traced iteration"]
    assert all(counters_of(name)["profiled_not_placed"] == [] for name in ("mamba2-lm-paper", "graph-mamba-paper"))


MOE = DATA.parent / "counter-cost-moe-h100"


@pytest.mark.parametrize(("run", "gpus", "measured_s", "predicted_s", "checked"), [
    ("jamba-small", 1, 206.4, 153.4, 0.9806),
    ("jamba-small-2gpu", 2, 181.9, 140.6, 0.9682),
    ("granite-small", 1, 229.0, 224.3, 0.9637),
    ("granite-small-2gpu", 2, 177.0, 179.7, 0.9618),
    ("qwen3-next-small", 1, 385.2, 359.2, 0.9539),
    ("granite-small-2gpu-before-fixes", 2, 180.3, 176.9, 0.8977),
    ("qwen3-next-small-before-fixes", 1, 327.5, 160.9, 0.862),
])
def test_the_mixture_of_experts_hybrids_run_their_passes_as_traced(run, gpus, measured_s, predicted_s, checked):
    """hf:jamba, hf:granite-4.0-hybrid and hf:qwen3-next small on H100s (counter-cost-moe-h100/README.md): every
    pass routed as the traced iteration (grid match 100 %), every profiled row placed, the lent-vs-measured error
    of each family with a held-out launch recorded."""
    recorded = json.loads((MOE / run / "run.json").read_text())
    counters = recorded["collectors"]["counters"]
    assert (counters["pass_gpus"], counters["wall_s"], counters["predicted_s"]) == \
        pytest.approx((gpus, measured_s, predicted_s), abs=0.05)
    assert recorded["coverage"]["counter_time_fraction"] == pytest.approx(checked, abs=5e-4)
    assert counters["traced_weights"] and counters["grid_match_pct"] == 100.0 and counters["profiled_not_placed"] == []
    held_out = [family for family in counters["families"] if family["held_out"]]
    assert held_out and all(family["dram_error_pct"] is not None for family in held_out)


def test_the_mixture_of_experts_hybrids_check_95_percent_of_their_kernel_time():
    """The issue's goal on each MoE hybrid recorded with today's rules, on one H100 and with passes over two."""
    fixed = [run.parent for run in MOE.glob("*/run.json") if not run.parent.name.endswith("before-fixes")]
    assert sorted(run.name for run in fixed) == ["granite-small", "granite-small-2gpu", "jamba-small",
                                                 "jamba-small-2gpu", "qwen3-next-small"]
    assert all(json.loads((run / "run.json").read_text())["coverage"]["counter_time_fraction"] >= 0.95 for run in fixed)


def test_expert_copies_lent_from_a_short_launch_keep_its_overhead_not_its_ratio():
    """granite's expert copies on 2 H100s before b29dbd8, lent by grid from a 3.0 us copy measured 5.2 us under ncu:
    by the lender's ratio (x1.76) every one of the 108 sat 4.8-8 us over its timeline duration and failed the
    duration check; with the lender's excess kept, all are within the check's 4 us floor."""
    kernels = pd.read_parquet(MOE / "granite-small-2gpu-before-fixes" / "kernels.parquet")
    copies = kernels[(kernels["counter_status"] == "rejected: duration") & (kernels["launch_op"] == "aten::copy_")]
    lenders = kernels.set_index("launch_idx").loc[copies["counter_lender"]]
    lender_ncu, lender_ns = lenders["ncu_duration_ns"].to_numpy(), lenders["duration_ns"].to_numpy(dtype=float)
    taker_ns = copies["duration_ns"].to_numpy(dtype=float)
    assert len(copies) == 108 and (lenders["counter_status"] == "measured").all()
    assert (lender_ns < SHORT_LENDER_NS).all()
    by_ratio = lender_ncu * taker_ns / lender_ns
    assert (by_ratio - taker_ns).min() > DURATION_FLOOR_NS and (by_ratio / taker_ns).min() > DURATION_RATIO
    assert (np.abs(lent_ncu_duration(lender_ncu, lender_ns, taker_ns) - taker_ns) <= DURATION_FLOOR_NS).all()


@pytest.mark.parametrize(("lender_ncu", "lender", "taker", "lent"), [
    (5_200.0, 3_000.0, 7_000.0, 9_200.0),  # a short lender: its 2.2 us excess, ncu's overhead
    (60_000.0, 50_000.0, 100_000.0, 120_000.0),  # a long one: its ratio
])
def test_a_lent_ncu_duration_keeps_a_short_lenders_excess_and_a_long_ones_ratio(lender_ncu, lender, taker, lent):
    assert lent_ncu_duration(np.array([lender_ncu]), np.array([lender]), np.array([taker]))[0] == pytest.approx(lent)


@pytest.fixture(scope="module")
def granite():
    return load(DATA / "granite-small")


def test_the_mixture_of_experts_routes_in_its_passes_as_traced(granite):
    """Before the passes ran the traced iteration's weights, 415 profiled configurations of --counters focus found no
    launch; now every report row of the seven passes does."""
    counters = granite.info.collectors.counters
    assert counters.traced_weights and counters.grid_match_pct == 100.0 and counters.profiled_not_placed == []
    assert granite.info.coverage.counter_time_fraction == pytest.approx(0.910, abs=5e-4)
    assert (counters.wall_s, counters.predicted_s) == pytest.approx((218.1, 151.4), abs=0.05)


def test_the_targeted_passes_split_to_profile_few_launches(granite):
    """One --kernel-id for every targeted function profiled 396 launches on this model; split, 149 reach the same
    problems and grid bins."""
    kernels = granite.kernels.reset_index(drop=True)
    plan = SamplingPlan.of(kernels)
    split = [len(plan.expected(kernels, "sampled", targets)) for targets in plan.target_passes]
    assert split == [47, 14, 20, 30, 38]
    assert len(plan.expected(kernels, "sampled", plan.targets)) > 2 * sum(split)


def test_a_budget_gives_up_the_stalls_the_held_out_grid_then_the_least_time(granite):
    kernels = granite.kernels.reset_index(drop=True)
    held = granite.info.harness.peak_memory_bytes
    whole = choose_plan(kernels, "sampled", held, H100_BYTES)
    # 218.1 s measured; 151 s before the cost of the iteration's 5,414 launches was a term (counter_cost)
    assert whole.left_out == "" and round(whole.cost.total_s) == 226
    within = choose_plan(kernels, "sampled", held, H100_BYTES, budget_s=150)
    assert within.cost.total_s <= 150 and "the warp-stall pass" in within.left_out
    assert all(group == "counters" for group, *_ in within.passes)
    # within 180 s on one H100 a plan gives up functions (4.2 % of the time at 185 s); every function kept costs 196 s
    assert round(choose_plan(kernels, "sampled", held, H100_BYTES, budget_s=200).cost.total_s) == 196
    assert "the functions under" in choose_plan(kernels, "sampled", held, H100_BYTES, budget_s=180).left_out
    with pytest.raises(InvalidConfig, match=r"--budget 20 s is too small for any counter plan of this run: the "
                                            r"smallest costs about"):
        choose_plan(kernels, "sampled", held, H100_BYTES, budget_s=20)


@pytest.mark.parametrize(("settings", "message"), [
    ({"counters": "none", "budget_s": 60}, "--budget bounds the counter passes' time: it needs --counters"),
    ({"budget_s": 5}, "--budget 5 s is too small for any counter plan: the smallest (one pass profiling one launch) "
                      "costs about"),
])
def test_a_budget_no_plan_can_meet_is_refused_before_any_work(settings, message):
    with pytest.raises(InvalidConfig, match=message.replace("(", r"\(").replace(")", r"\)")):
        ProfileSettings(**settings)
    args = ["profile", "mamba2-lm", "--preset", "tiny", "--counters", settings.get("counters", "sampled"),
            "--budget", str(settings["budget_s"])]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1 and message in result.output and "Traceback" not in result.output


def test_a_counter_pass_runs_the_weights_of_the_traced_iteration(tmp_path):
    """The parent writes its weights and random state right before its profiled iteration; a child that took
    fewer steps loads them and its profiled iteration computes the same loss."""
    from ssmprof.kernels import plan_kernels
    from ssmprof.profiler.harness import run_training
    from ssmprof.workloads.registry import get_workload

    workload = get_workload("transformer")
    cfg = workload.config("tiny")
    plan = plan_kernels(workload.kernel_ops(cfg), "cpu", True, cfg.dtype)
    state = tmp_path / "state.pt"
    traced = run_training(workload, "tiny", cfg, plan, steps=3, warmup=2, save_state=state)
    child = run_training(workload, "tiny", cfg, plan, steps=1, warmup=1, load_state=state)
    unloaded = run_training(workload, "tiny", cfg, plan, steps=1, warmup=1)
    assert child.final_loss == pytest.approx(traced.final_loss, rel=1e-6)
    assert unloaded.final_loss != pytest.approx(traced.final_loss, rel=1e-6)


def test_a_reading_keeps_no_frame_and_so_no_tensor_alive():
    """The stacks a reading takes die with it: a step's local freed as its function returns is gone at once, not
    at the sampler's next reading."""
    import time

    from ssmprof.profiler.host_sampler import HostSampler

    class Activation:
        pass

    def layer() -> weakref.ref:
        activation = Activation()
        until = time.perf_counter() + 0.02
        while time.perf_counter() < until:  # long enough for several readings inside this frame
            pass
        return weakref.ref(activation)

    with HostSampler(interval_s=0.001) as sampler, sampler.step(0):
        freed = layer()
        assert freed() is None and sampler.readings > 0
