"""The step across ranks (`analysis.step.ranks`): transfer and waiting, busy per rank, the late rank and its cost,
scaling against the single-GPU twin; on the TP=4 H100 run whose rank 1 was late
(tests/data/tp4-h100-mamba2-lm-paper-straggler, its twin tests/data/tp1-h100-mamba2-lm-paper), the bundled TP=2
H200 runs, and ten TP=4 runs on three other H100 hosts (tests/data/tp4-h100-late-rank-hosts)."""

from pathlib import Path

import pandas as pd
import pytest

from ssmprof import bundled
from ssmprof.analysis.launches.categories import WAITING
from ssmprof.analysis.step.communication import one_rank, scaling
from ssmprof.analysis.step.ranks import collective_split, late_rank, rank_busy, scaling_efficiency
from ssmprof.pipeline import reporting
from ssmprof.pipeline.loading import load_run

DATA = Path(__file__).parent / "data"
TP4, TP1 = DATA / "tp4-h100-mamba2-lm-paper-straggler", DATA / "tp1-h100-mamba2-lm-paper"


@pytest.fixture(scope="module")
def tp4():
    return load_run(TP4)


@pytest.fixture(scope="module")
def h200():
    return {path.name: load_run(path) for path in bundled.parallel_runs("h200")}


def test_rank_0s_collectives_split_into_transfer_and_waiting(tp4):
    """171.5 ms of NCCL kernel time on rank 0: 17.0 ms moved data (each collective's shortest kernel over the
    ranks), 154.5 ms waited for rank 1."""
    transfer, waiting = collective_split(tp4.kernels, 0)
    assert (round(transfer + waiting, 1), round(transfer, 1), round(waiting, 1)) == (171.5, 17.0, 154.5)
    categories = one_rank(tp4.kernels, tp4.info).groupby("category")["duration_ns"].sum() / 1e6
    assert (round(categories["communication"], 1), round(categories[WAITING], 1)) == (17.0, 154.5)


@pytest.mark.parametrize(("rank", "busy_ms", "gap_median_us", "wait_ms"), [
    (0, 75.7, 1.5, 154.5), (1, 75.9, 120.3, 6.8), (2, 75.8, 1.6, 144.7), (3, 76.1, 1.4, 154.8)])
def test_busy_per_rank_excludes_waiting_and_stays_under_the_iteration(tp4, rank, busy_ms, gap_median_us, wait_ms):
    row = rank_busy(tp4.kernels).set_index("rank").loc[rank]
    assert (round(row["busy_ms"], 1), round(row["gap_median_us"], 1), round(row["wait_ms"], 1)) == \
           (busy_ms, gap_median_us, wait_ms)
    assert row["busy_pct"] <= 100


def test_the_late_rank_is_rank_1_and_the_hosts_pace_the_step(tp4):
    """Rank 1 arrived last; its GPU ran dry between its launches, and the step (137.2 ms, at least 135.0 ms in its
    95 % interval) outlasts its 77.0 ms of compute and transfer by 58.0 ms: the hosts pace the step. The cause says
    what kernels.parquet cannot tell (one slow host, or every host about as slow), and the remedy is the command."""
    row = late_rank(tp4.kernels, tp4.info).iloc[0]
    assert (row["late_rank"], row["arrived_last"], row["collectives"]) == (1, 69, 72)
    assert (round(row["cost_ms"], 1), round(row["cost_noise_ms"], 1), round(row["iteration_ms"], 1)) == \
           (143.1, 4.3, 234.5)
    assert (round(row["gpu_work_ms"], 1), round(row["step_over_gpu_ms"], 1), row["hosts_pace"]) == (77.0, 58.0, True)
    assert row["cause"].startswith("its GPU ran dry waiting for its host's launches (median gap between its kernels "
                                   "120.3 us against 1.5 us")
    assert "the hosts pace the step, not its GPU" in row["cause"]
    assert "cannot tell one slow host from hosts that each need about the step" in row["cause"]
    assert "clocks not measured during the steps" in row["cause"]
    assert "`ssmprof run mamba2-lm --preset paper --tp 4 --cuda-graphs`" in row["remedy"]
    assert "a larger --batch-size" in row["remedy"]


@pytest.mark.parametrize(("run", "paced", "over_ms"), [
    ("h100-sxm/mamba2-lm-tp4", True, 59.3), ("h100-sxm/mamba2-lm-tp4-cuda-graphs", True, 26.7),
    ("h100-sxm/hybrid-tp4", False, -0.5), ("h100-sxm/mamba1-lm-tp4", False, 0.8), ("h200/mamba2-lm-tp2", False, -1.8),
    ("h200/mamba2-lm-tp2-no-sp", False, 3.5), ("h200/mamba1-lm-tp2", False, -0.1),
    ("h200/mamba1-lm-tp2-no-sp", False, 0.6), ("h200/hybrid-tp2", False, -1.9),
    ("planted", True, 141.1), ("cpu/tp2-cpu-gloo-mamba2-lm-sp", False, 52.8),
    ("cpu/tp2-cpu-gloo-hybrid-sp", False, 125.9),
])
def test_the_hosts_pace_the_step_only_where_the_step_outlasts_the_gpu_work(run, paced, over_ms):
    """The rule (`ranks.hosts_pace`) on the bundled multi-GPU runs and the fixtures: the H100 TP=4 mamba2-lm steps
    outlast the last rank's GPU work by 24-62 % of the step, every other bundled run's step is its GPU work to within
    3 %, and gloo ranks on the CPU, whose ops run on the host itself, are never said to be paced by it."""
    gpu, _, name = run.partition("/")
    path = (PLANTED if run == "planted" else DATA / name if gpu == "cpu"
            else bundled.REFERENCE / gpu / bundled.PARALLEL / name)
    loaded = load_run(path)
    row = late_rank(loaded.kernels, loaded.info).iloc[0]
    assert (bool(row["hosts_pace"]), round(row["step_over_gpu_ms"], 1)) == (paced, over_ms)
    assert bool(row["remedy"]) is paced


def test_every_tp4_run_on_the_h100_hosts_is_paced_by_its_hosts():
    """The ten runs of tests/data/tp4-h100-late-rank-hosts: whichever rank is late, the step outlasts its GPU work
    by more than a quarter, beyond noise; the hosts pace every one."""
    rows = [_late_rank_of(run.name) for run in LATE_RANK_HOSTS.iterdir() if run.is_dir()]
    assert len(rows) == 10 and all(row["hosts_pace"] for row in rows)
    assert min(row["step_over_gpu_ms"] / row["step_ms"] for row in rows) > 0.25


def test_scaling_against_the_single_gpu_twin_has_an_interval(tp4):
    row = scaling_efficiency(tp4.info, load_run(TP1).info).iloc[0]
    assert (round(row["speedup"], 2), round(row["speedup_low"], 2), round(row["speedup_high"], 2)) == \
           (1.55, 1.36, 1.63)
    assert (round(row["efficiency_pct"]), round(row["efficiency_pct_low"]), round(row["efficiency_pct_high"])) == \
           (39, 34, 41)


def test_the_tp4_report_names_rank_1_and_calls_nothing_gpu_bound():
    text = reporting.report([TP4, TP1], "md")
    assert "Rank 1 launches last: it arrived last at 69 of 72 collectives" in text
    assert "the hosts pace the step, not its GPU" in text and "Remedy: capture the step as one CUDA graph" in text
    assert "it costs the profiled iteration 143.1 ms (61 % of its 234.5 ms; noise 4.3 ms)" in text
    assert "rank 0's collectives took 171.5 ms of the profiled iteration: 17.0 ms transfer, 154.5 ms waiting" in text
    assert "4 GPUs run the step 1.55x as fast as one (1.36-1.63x" in text
    assert "waits for rank 1" in text
    alone = reporting.report([TP4], "md")  # the twin alone is GPU-bound, rightly
    assert "GPU-bound:" not in alone and "| GPU-bound" not in alone  # neither a finding nor a verdict
    assert "166 %" not in alone and "busy all" not in alone


@pytest.mark.parametrize(("run", "late", "cost_ms", "noise_ms", "busy_pct_max"), [
    ("mamba2-lm-tp2", 0, 7.1, 5.1, 95.7),
    ("mamba2-lm-tp2-no-sp", 0, 61.3, 16.9, 59.5),
    ("mamba1-lm-tp2", 0, 19.2, 1.4, 88.1),
    ("mamba1-lm-tp2-no-sp", 0, 3.9, 0.5, 97.8),
    ("hybrid-tp2", 0, 11.5, 2.1, 94.6),
])
def test_the_bundled_tp2_h200_runs_rejudged(h200, run, late, cost_ms, noise_ms, busy_pct_max):
    """On 2 H200s rank 0 (the rank of the run's kernel tables) arrives last at most collectives; its cost stands
    above the noise in every run, largest in mamba2-lm without sequence parallelism (an iteration 59 % slower than
    its steps, whose rank 0 left 67 ms of launch gaps)."""
    loaded = h200[run]
    row = late_rank(loaded.kernels, loaded.info).iloc[0]
    assert (row["late_rank"], round(row["cost_ms"], 1), round(row["cost_noise_ms"], 1)) == (late, cost_ms, noise_ms)
    assert round(rank_busy(loaded.kernels)["busy_pct"].max(), 1) == busy_pct_max


@pytest.mark.parametrize(("run", "speedup", "low", "high"), [
    ("mamba2-lm-tp2", 1.736, 1.696, 1.821), ("mamba2-lm-tp2-no-sp", 1.637, 1.580, 1.740),
    ("mamba1-lm-tp2", 1.449, 1.427, 1.489), ("hybrid-tp2", 1.751, 1.706, 1.873)])
def test_the_bundled_tp2_speedups_carry_intervals(h200, run, speedup, low, high):
    table = scaling({name: loaded.info for name, loaded in h200.items()}).set_index("run")
    assert tuple(round(table.loc[run, column], 3) for column in ("speedup", "speedup_low", "speedup_high")) == \
           (speedup, low, high)


PLANTED_MS = 150  # per layer, on rank 1: 2 layers of the tiny preset, 300 ms an iteration


@pytest.mark.alone  # a busy CPU beside its two ranks delays them by more than the tolerance
def test_a_planted_straggler_is_found_with_its_rank_and_size(tmp_path, monkeypatch):
    """Two gloo ranks on the CPU, rank 1 sleeping PLANTED_MS on its host before each layer's forward
    (`workloads.parallel.PLANT_DELAY_ENV`): the diagnosis names rank 1 and a cost within its noise (plus a tenth,
    for what the host adds around the sleep) of the planted total."""
    from ssmprof.pipeline import measure
    from ssmprof.schema import read_run
    from ssmprof.workloads.parallel import PLANT_DELAY_ENV

    monkeypatch.setenv(PLANT_DELAY_ENV, f"1:{PLANTED_MS}")
    settings = measure.ProfileSettings(tmp_path, steps=1, counters="none")
    path = measure.profile(measure.ProfileRequest(measure.WorkloadOptions("mamba2-lm", "tiny", tp=2), settings,
                                                  device="cpu"))
    run = read_run(path)
    planted = PLANTED_MS * run.info.workload.config["layers"]
    row = late_rank(run.kernels, run.info).iloc[0]
    assert row["late_rank"] == 1
    assert abs(row["cost_ms"] - planted) <= row["cost_noise_ms"] + 0.1 * planted, row.to_dict()
    assert row["cause"].startswith("its host"), row["cause"]


@pytest.mark.parametrize(("setting", "rank", "delay_s"), [("1:20", 1, 0.02), ("1:20", 0, 0.0), ("", 1, 0.0)])
def test_the_planted_delay_names_one_rank(setting, rank, delay_s):
    from ssmprof.workloads.parallel import planted_delay_s

    assert planted_delay_s(rank, setting) == delay_s


def test_a_malformed_planted_delay_is_refused():
    from ssmprof.errors import InvalidConfig
    from ssmprof.workloads.parallel import planted_delay_s

    with pytest.raises(InvalidConfig, match="RANK:MS"):
        planted_delay_s(1, "one")


PLANTED = DATA / "tp4-h100-planted-straggler" / "planted-rank1-5ms"
H100_PLANTED_MS = 14 * 5.0  # SSMPROF_PLANT_DELAY=1:5 on the paper preset's 14 layers, forward


def test_a_straggler_planted_on_four_h100s_is_found_with_its_size():
    """On a fresh 4 x H100 host rank 1 was late by itself (its host's launch gaps, as on the shared TP=4 run; the
    mamba2-lm TP=4 run bundled until 2026-11-27, kept in tests/data/tp4-h100-bundled-2026-11-26); planting 5 ms
    before each of its 14 layers' forward on the same host adds the planted 70 ms to its cost. The cost of one
    iteration moves with the host between iterations (the unplanted run's steps spread 105-222 ms), so the size is
    checked to within the larger of the two runs' cost noise and 10 % of what was planted."""
    natural_run = load_run(DATA / "tp4-h100-bundled-2026-11-26" / "mamba2-lm-tp4")  # as bundled then
    planted_run = load_run(PLANTED)
    natural = late_rank(natural_run.kernels, natural_run.info).iloc[0]
    planted = late_rank(planted_run.kernels, planted_run.info).iloc[0]
    assert natural["late_rank"] == planted["late_rank"] == 1
    tolerance = max(natural["cost_noise_ms"], planted["cost_noise_ms"], 0.1 * H100_PLANTED_MS)
    assert abs(planted["cost_ms"] - natural["cost_ms"] - H100_PLANTED_MS) <= tolerance
    assert round(planted["cost_ms"] - natural["cost_ms"], 1) == 70.3


LATE_RANK_HOSTS = DATA / "tp4-h100-late-rank-hosts"


def _late_rank_of(run: str) -> pd.Series:
    loaded = load_run(LATE_RANK_HOSTS / run)
    return late_rank(loaded.kernels, loaded.info).iloc[0]


@pytest.mark.parametrize(("run", "late", "cost_ms", "noise_ms"), [
    ("host1-a", 0, 81.4, 0.0), ("host1-b", 0, 39.9, 28.8), ("host2-first", 1, 56.9, 0.0),
    ("host2-a", 0, 104.1, 0.0), ("host2-no-nvml-monitor", 0, 118.7, 0.0), ("host2-b", 2, 40.4, 0.1),
    ("host3-pinned-first", 0, 43.4, 8.0), ("host3-pinned-a", 2, 33.0, 22.8), ("host3-pinned-b", 2, 68.2, 0.0),
    ("host3-pinned-c", 2, 40.2, 0.1)])
def test_every_tp4_run_on_three_h100_hosts_has_a_late_rank(run, late, cost_ms, noise_ms):
    """Ten TP=4 runs on three fresh 4 x H100 leases, as they are, with the NVML sampler off and with every rank
    pinned to cores of its own: each has a late rank whose cost stands above its noise."""
    found = _late_rank_of(run)
    assert (found["late_rank"], round(found["cost_ms"], 1), round(found["cost_noise_ms"], 1)) == (late, cost_ms,
                                                                                                   noise_ms)
    assert found["cost_ms"] > found["cost_noise_ms"]


def test_which_rank_is_late_changes_from_run_to_run():
    """The late rank is not a property of one rank: ranks 0, 1 and 2 were each late in some of the ten runs."""
    late = {run.name: _late_rank_of(run.name)["late_rank"] for run in LATE_RANK_HOSTS.iterdir() if run.is_dir()}
    assert len(late) == 10 and set(late.values()) == {0, 1, 2}


def test_the_late_ranks_threads_did_not_wait_for_a_cpu():
    """Host 2's four runs, every rank's launching thread and its autograd thread read from schedstat while they ran:
    the late rank's threads waited for a CPU 0.020 s at most, no thread more than 0.070 s: no contention for cores."""
    readings = pd.read_csv(LATE_RANK_HOSTS / "scheduler-host2.csv")
    late = {run: _late_rank_of(run)["late_rank"] for run in readings["run"].unique()}
    of_late = readings[readings["rank"] == readings["run"].map(late)]
    assert of_late["run_queue_wait_s"].max() == 0.020
    assert readings["run_queue_wait_s"].max() == 0.070


def test_the_late_rank_is_slow_before_every_kind_of_launch():
    """host2-a's late rank 0: its median gap before the Mamba-2 backward's kernels, `aten::fill_`, `aten::mm` and
    the collectives is 20 times the other ranks' or more: a slow launching thread, not one slow op."""
    kernels = load_run(LATE_RANK_HOSTS / "host2-a").kernels.sort_values(["rank", "start_ns"])
    ends = (kernels["start_ns"] + kernels["duration_ns"]).groupby(kernels["rank"]).shift()
    gaps = kernels.assign(gap_us=(kernels["start_ns"] - ends).clip(lower=0) / 1e3)
    medians = gaps.groupby([gaps["rank"] == 0, "launch_op"])["gap_us"].median()
    expected = {"MambaSplitConv1dScanCombinedFnBackward": 168, "aten::fill_": 113, "aten::mm": 101,
                "record_param_comms": 258}
    for op, late_us in expected.items():
        assert round(medians[True, op]) == late_us
        assert medians[True, op] >= 20 * max(medians[False, op], 1.0)


def test_every_bundled_run_scales_against_its_own_twin_or_none():
    """All bundled runs in one set (every suite, parallel, models and sweep point run, as `ssmprof report` over all
    of them would take them): each multi-GPU run's speedup is the one its parallel page gives (the reviewed
    snapshot), each single-GPU run 1x against itself; before, a run was set against the fastest single-GPU run of
    its workload and preset (hybrid tp2x dp1 0.58x against a seq_len-2048 sweep point; single runs 0.08x)."""
    import csv

    from ssmprof import bundled
    from ssmprof.analysis.step.communication import scaling
    from ssmprof.schema import read_run_info

    paths = sorted(path.parent for path in bundled.REFERENCE.rglob("run.json"))
    table = scaling({str(path): read_run_info(path) for path in paths}).set_index("run")
    assert len(table) == len(paths) > 60
    single = table[table["world_size"] == 1]
    assert (single["speedup"] == 1.0).all() and (single["single_gpu_run"] == single.index).all()
    golden = Path(__file__).parent / "data" / "golden-bundled-runs"
    for gpu in bundled.GPUS:
        with open(golden / f"{gpu}-parallel" / "suite-scaling.csv") as file:
            page = {row["run"]: row for row in csv.DictReader(file) if row["world_size"] != "1"}
        runs = [path for path in bundled.parallel_runs(gpu) if read_run_info(path).parallel]
        assert len(runs) == len(page) > 0
        for path in runs:
            mine = table.loc[str(path)]
            label = next(label for label, row in page.items() if float(row["step_ms"]) == mine["step_ms"])
            if page[label]["speedup"]:  # the page's own twin is among all runs: the same one is taken
                assert mine["speedup"] == pytest.approx(float(page[label]["speedup"])), label
            elif mine["single_gpu_run"]:  # none on its page; another folder may hold one of its configuration
                twin = read_run_info(Path(mine["single_gpu_run"]))
                info = read_run_info(path)
                assert (twin.workload.name, twin.workload.preset, twin.workload.config, twin.gpu.name) == \
                    (info.workload.name, info.workload.preset, info.workload.config, info.gpu.name)
