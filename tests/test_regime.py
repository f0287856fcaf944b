"""analysis.summaries.sweep: crossovers and best values, table-driven on small frames (some derived from the bundled
H100 runs), and the per-point frames on real runs."""

import math
from pathlib import Path

import pandas as pd
import pytest

from ssmprof import bundled
from ssmprof.analysis.summaries import sweep
from ssmprof.hardware import run_ceilings
from ssmprof.pipeline.loading import load_run

LENGTHS = [2048, 4096, 8192, 16384]


def curves(a: list[float], b: list[float], lengths=LENGTHS, gpu="H100") -> pd.DataFrame:
    """Step time per token of workloads A and B over sequence length (NaN: a failed point)."""
    rows = [{"workload": name, "gpu": gpu, "seq_len": length, sweep.STEP_METRIC: value}
            for name, values in (("A", a), ("B", b)) for length, value in zip(lengths, values, strict=True)]
    return pd.DataFrame(rows).dropna()


@pytest.mark.parametrize(
    ("scenario", "a", "b", "at", "below", "above", "crossings"),
    [
        ("B overtakes A half way (in log) between 2048 and 4096", [10, 10, 10, 10], [8, 12, 16, 20],
         math.sqrt(2048 * 4096), "B", "A", 1),
        ("A faster throughout: no crossover", [5, 5, 5, 5], [8, 12, 16, 20], math.nan, "A", "A", 0),
        ("equal at a grid point: the crossover is that point", [10, 10, 10, 10], [9, 10, 11, 12], 4096, "B", "A", 1),
        ("a failed point (NaN) is left out: bracketed by its neighbours", [10, 10, 10, 10],
         [9, math.nan, 11, 12], math.sqrt(2048 * 8192), "B", "A", 1),
        ("noise crossing twice: the first crossing, and the count", [10, 10, 10, 10], [9, 11, 9.5, 12],
         math.sqrt(2048 * 4096), "B", "A", 3),
        ("A catches up at the last point only", [12, 11, 10, 9], [8, 8.5, 9, 10], None, "B", "A", 1),
    ],
)
def test_crossover(scenario, a, b, at, below, above, crossings):
    row = sweep.crossover(curves(a, b), "seq_len").iloc[0]
    assert (row["workload_a"], row["workload_b"]) == ("A", "B"), scenario
    if at is None:
        assert 8192 < row["crossover_seq_len"] < 16384, scenario
    elif math.isnan(at):
        assert math.isnan(row["crossover_seq_len"]), scenario
    else:
        assert row["crossover_seq_len"] == pytest.approx(at), scenario
    assert (row["faster_below"], row["faster_above"], row["crossings"]) == (below, above, crossings), scenario


def test_crossover_of_mamba2_and_attention_derived_from_the_bundled_h100_runs():
    """mamba2-lm's and the transformer's step time per token at 4096 (bundled paper runs); the transformer's
    attention time per token grows with L (causal attention is O(L) per token), the rest stays: the curves
    cross where the attention growth eats mamba2-lm's deficit, which the log interpolation finds within 10 %."""
    runs = {w: load_run(bundled.REFERENCE / "h100-sxm" / w) for w in ("mamba2-lm", "transformer")}
    per_token = {w: 1e3 * r.info.harness.step_ms / r.info.harness.items_per_step for w, r in runs.items()}
    kernels = runs["transformer"].kernels
    attention = kernels.loc[kernels["category"] == "attention", "duration_ns"].sum() / 1e3 / 8192
    transformer = [per_token["transformer"] + attention * (length / 4096 - 1) for length in LENGTHS]
    frame = curves([per_token["mamba2-lm"]] * 4, transformer)
    row = sweep.crossover(frame, "seq_len").iloc[0]
    exact = 4096 * (1 + (per_token["mamba2-lm"] - per_token["transformer"]) / attention)
    assert 4096 < row["crossover_seq_len"] < 8192 and row["crossover_seq_len"] == pytest.approx(exact, rel=0.1)
    assert (row["faster_below"], row["faster_above"]) == ("B", "A")  # the transformer first, then mamba2-lm


def test_crossover_per_gpu():
    frame = pd.concat([curves([10] * 4, [8, 12, 16, 20], gpu="H100"), curves([10] * 4, [6, 8, 12, 16], gpu="H200")])
    table = sweep.crossover(frame, "seq_len")
    assert table["gpu"].tolist() == ["H100", "H200"]
    assert table["crossover_seq_len"].tolist() == pytest.approx([math.sqrt(2048 * 4096), math.sqrt(4096 * 8192)])


@pytest.mark.parametrize(
    ("scenario", "times", "best", "runner_up", "slower_pct"),
    [
        ("a clear best", {64: 12.0, 128: 10.0, 256: 11.0}, 128, 256, 10.0),
        ("a tie goes to the smaller chunk", {64: 10.0, 128: 10.0, 256: 11.0}, 64, 128, 0.0),
        ("a failed point is not a candidate", {64: math.nan, 128: 10.0, 256: 11.0}, 128, 256, 10.0),
        ("one point: no runner-up", {256: 11.0}, 256, None, math.nan),
    ],
)
def test_best_chunk_size(scenario, times, best, runner_up, slower_pct):
    frame = pd.DataFrame([{"workload": "mamba2-lm", "gpu": "H100", "chunk_size": c, sweep.STEP_METRIC: t}
                          for c, t in times.items()])
    row = sweep.best_value(frame, "chunk_size").iloc[0]
    assert row["best_chunk_size"] == best and row["points"] == sum(not math.isnan(t) for t in times.values())
    assert (row["runner_up_chunk_size"] == runner_up) if runner_up else pd.isna(row["runner_up_chunk_size"])
    assert row["runner_up_slower_pct"] == pytest.approx(slower_pct, nan_ok=True), scenario


def test_best_value_per_other_setting():
    frame = pd.DataFrame([{"workload": "mamba2-lm", "gpu": "H100", "d_state": n, "chunk_size": c,
                           sweep.STEP_METRIC: t} for n, c, t in
                          [(64, 128, 9.0), (64, 256, 10.0), (256, 128, 14.0), (256, 256, 12.0)]])
    table = sweep.best_value(frame, "chunk_size", by=["workload", "gpu", "d_state"])
    assert table[["d_state", "best_chunk_size"]].values.tolist() == [[64, 128], [256, 256]]


SEQ_SWEEP_H200 = [bundled.REFERENCE / "h200" / "sweeps" / "seq_len"]


@pytest.fixture(scope="module")
def reference_points():
    """The bundled H100 paper runs of mamba2-lm, hybrid and transformer as points of a sweep over workloads."""
    loaded = {w: load_run(bundled.REFERENCE / "h100-sxm" / w) for w in ("mamba2-lm", "hybrid", "transformer")}
    return [sweep.SweepRun({"seq_len": 4096}, run.info, run.kernels,
                            run_ceilings(run.info.gpu.name, run.path)[0]) for run in loaded.values()]


def test_per_point_frames_on_real_runs(reference_points):
    per_item = sweep.per_item(reference_points)
    mamba = per_item.set_index("workload").loc["mamba2-lm"]
    assert mamba[sweep.STEP_METRIC] == pytest.approx(1e3 * 218.5219 / 8192, rel=1e-4)
    assert mamba[sweep.KERNEL_METRIC] < mamba[sweep.STEP_METRIC]  # kernels never outlast the step
    assert per_item.set_index("workload").loc["transformer", sweep.SSM_METRIC] == 0
    categories = sweep.category_time(reference_points)
    total = categories.groupby("workload")["us_per_item"].sum()
    assert total.to_dict() == pytest.approx(per_item.set_index("workload")[sweep.KERNEL_METRIC].to_dict())
    assert categories.groupby("workload")["share"].sum().tolist() == pytest.approx([1, 1, 1])


def test_ssm_kernels_limiters_and_model_on_real_runs(reference_points):
    ssm = sweep.ssm_kernels(reference_points)
    assert set(ssm["workload"]) == {"mamba2-lm", "hybrid"}  # the transformer has no SSM kernels
    checked = ssm[ssm["workload"] == "mamba2-lm"]  # schema 2: checked counters
    assert set(checked["regime"]) <= {sweep.BANDWIDTH, sweep.COMPUTE, sweep.LATENCY, sweep.NO_COUNTERS}
    assert checked["regime"].eq(checked["limiter"].map(sweep.regime_of)).all()
    # `_chunk_cumsum_*` were measured without counters (profiled since: the SSM kernels are always sampled)
    counted = checked[~checked["kernel_name"].str.startswith("_chunk_cumsum")]
    assert counted["dram_throughput_pct"].between(0, 100).all() and checked["verdict"].notna().all()
    model = sweep.ssd_model_check(reference_points)
    assert set(model["workload"]) <= {"mamba2-lm", "hybrid"} and "flops_ratio" in model
    heavy = sweep.regime_map(ssm, ["seq_len"])
    assert heavy.groupby("workload").size().max() <= 4 and list(heavy.columns[:3]) == ["workload", "gpu", "seq_len"]


def test_a_sweep_has_crossover_over_several_workloads_and_best_over_chunk_size():
    """The H200 sweeps' tables in the order of their CSV files: the sweep over sequence length (three workloads)
    has a crossover and no best value, the one over d_state x chunk_size (mamba2-lm alone) a best value and no
    crossover."""
    from ssmprof.pipeline import regimes

    every = ["points", "per_item", "category_time", "ssm_kernels", "regime_map", "model", "steps"]
    for folder, own in (("seq_len", "crossover"), ("d_state-chunk_size", "best")):
        tables = regimes.analyze([bundled.REFERENCE / "h200" / "sweeps" / folder]).tables
        assert list(tables.frames()) == [*every, own, "findings"]


def test_the_bundled_sweep_s_model_finding_lists_each_kernel_s_ratio():
    """On the H200 sweep over sequence length, each SSD forward kernel keeps its measured/analytic FLOP ratio at
    every point: the finding names each one instead of one range over all of them."""
    from ssmprof.pipeline import regimes

    findings = regimes.analyze(SEQ_SWEEP_H200, bundled.device_profile("h200")).tables.findings
    model = findings.loc[findings["kind"] == "model", "finding"].item()
    assert model.endswith("_chunk_cumsum_fwd 10.46, _bmm_chunk_fwd 1.00, _chunk_state_fwd 1.01, "
                          "_state_passing_fwd 1.04-1.05, _chunk_scan_fwd 0.72")


def test_a_sweep_point_whose_profiled_iteration_was_slow_is_named():
    """On the H200 sweep, the hybrid at 4,096 tokens kept the GPU busy 11.5 % past its median step (its kernel time
    per token, 29.3 us, exceeds its step time per token, 26.3 us); the other fourteen points are steady."""
    from ssmprof.pipeline import regimes

    tables = regimes.analyze(SEQ_SWEEP_H200, bundled.device_profile("h200")).tables
    slow = tables.per_item.dropna(subset=["busy_past_step_pct"])
    assert [(r.workload, r.seq_len, round(r.busy_past_step_pct, 1)) for r in slow.itertuples()] == [
        ("hybrid", 4096, 11.5)]
    findings = tables.findings
    assert findings.loc[findings["kind"] == "slow", "finding"].tolist() == [
        "hybrid seq_len=4096: the profiled iteration kept the GPU busy 119.9 ms, 11.5 % past its median step "
        "(107.5 ms): its kernel times describe a slower step than the timed ones"]


def test_the_tie_spread_is_how_much_one_configuration_varied_between_bundled_runs():
    """mamba2-lm at the paper shape was measured three times per GPU (the suite run and a point of each sweep), on
    each GPU a fourth time (the suite run the bundled one replaced: tests/data/h200-mamba2-lm-superseded,
    tests/data/h100-suite-before-timing-pass): RERUN_SPREAD_PCT is the larger GPU's spread, and every verdict
    (`noise.speedup_verdict`) calls closer gaps within noise."""
    from ssmprof import bundled
    from ssmprof.analysis.trust.noise import RERUN_SPREAD_PCT
    from ssmprof.schema import read_run

    spreads = {}
    for gpu in bundled.GPUS:
        sweeps = bundled.REFERENCE / gpu / "sweeps"
        paths = [bundled.REFERENCE / gpu / "mamba2-lm",
                 sweeps / "d_state-chunk_size" / "mamba2-lm_d_state-128_chunk_size-256",
                 sweeps / "seq_len" / "mamba2-lm_seq_len-8192"]
        paths.append(Path(__file__).parent / "data" / ("h200-mamba2-lm-superseded" if gpu == "h200" else
                                                       "h100-suite-before-timing-pass/mamba2-lm"))
        steps = [read_run(path).info.harness.step_ms for path in paths]
        spreads[gpu] = round(100 * (max(steps) / min(steps) - 1), 1)
    assert spreads == {"h100-sxm": 2.1, "h200": 2.8} and max(spreads.values()) == RERUN_SPREAD_PCT


@pytest.mark.parametrize(("limiter", "expected"), [
    ("DRAM bandwidth", sweep.BANDWIDTH), ("shared memory", sweep.BANDWIDTH), ("tensor pipe", sweep.COMPUTE),
    ("issue slots", sweep.LATENCY), ("occupancy (registers, shared memory)", sweep.LATENCY),
])
def test_each_limiter_has_the_regime_its_bound_is(limiter, expected):
    assert sweep.regime_of(limiter) == expected
