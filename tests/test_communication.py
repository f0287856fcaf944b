"""Communication analyses on real two-rank runs: the committed `tests/data/tp2-cpu-gloo-<workload>-<sp|no-sp>`
runs, each recorded on the CPU over gloo with
`ssmprof profile WORKLOAD --preset tiny --tp 2 --device cpu --counters none --steps 2 [--no-sequence-parallel]`
(tiny presets: batch 2 x 64 tokens, d_model 64, fp32)."""

from pathlib import Path

import pandas as pd
import pytest

from ssmprof import bundled
from ssmprof.analysis.step.communication import (
    bus_bandwidth,
    collective_counts,
    collectives,
    exposed_communication,
    parallel_overview,
    predicted_counts,
    project_communication,
    projection_check,
    rank_imbalance,
    scaling,
    with_transfer_times,
)
from ssmprof.hardware import LINKS, link_for, links_frame
from ssmprof.pipeline import reporting
from ssmprof.pipeline.loading import load_run
from ssmprof.profiler.timeline import collective_of, collective_size

DATA = Path(__file__).parent / "data"
RUNS = sorted(DATA.glob("tp2-cpu-gloo-*"))
ACTIVATION_BYTES = 2 * 64 * 64 * 4  # batch x seq_len x d_model x fp32: what every layer collective carries


@pytest.fixture(scope="module")
def runs():
    return {path.name.removeprefix("tp2-cpu-gloo-"): load_run(path) for path in RUNS}


def test_fixtures_are_the_five_scenarios():
    assert [p.name for p in RUNS] == [f"tp2-cpu-gloo-{s}" for s in ("hybrid-sp", "mamba1-lm-no-sp", "mamba1-lm-sp",
                                                                   "mamba2-lm-no-sp", "mamba2-lm-sp")]


def test_merged_run_holds_both_ranks(runs):
    for name, run in runs.items():
        kernels, parallel = run.kernels, run.info.parallel
        assert sorted(kernels["rank"].unique()) == [0, 1], name
        assert (kernels.groupby("rank")["launch_idx"].nunique() == kernels.groupby("rank").size()).all()
        assert (parallel.world_size, parallel.tp, parallel.dp) == (2, 2, 1)
        assert parallel.sequence_parallel == (not name.endswith("no-sp"))
        losses = {r["final_loss"] for r in parallel.ranks}
        assert len(losses) == 1, name  # every rank reports the global loss
        assert (kernels.loc[kernels["collective"] != "", "category"] == "communication").all()


def test_every_layer_makes_the_predicted_collectives(runs):
    for name, run in runs.items():
        counts = collective_counts(run.kernels, run.info.parallel.sequence_parallel)
        assert counts["matches"].all(), (name, counts)
        assert set(counts["layer_kind"]) == set(run.kernels.loc[run.kernels["layer"] >= 0, "layer_kind"])


def test_mamba2_all_reduces_half_as_often_as_mamba1(runs):
    """The claim, measured: without sequence parallelism, all-reduces per layer, forward and backward."""
    per_layer = {}
    for name in ("mamba2-lm-no-sp", "mamba1-lm-no-sp"):
        counts = collective_counts(runs[name].kernels, False).set_index(["phase", "collective"])
        per_layer[name] = counts.loc[[("forward", "all_reduce"), ("backward", "all_reduce")], "measured_max"].tolist()
    assert per_layer == {"mamba2-lm-no-sp": [1, 1], "mamba1-lm-no-sp": [2, 2]}


@pytest.mark.parametrize(("kind", "sequence_parallel", "expected"), [
    ("mamba2", False, {"forward": {"all_reduce": 1}, "backward": {"all_reduce": 1}}),
    ("mamba2", True, {"forward": {"all_gather": 1, "reduce_scatter": 1},
                      "backward": {"all_gather": 2, "reduce_scatter": 1}}),
    ("mamba1", False, {"forward": {"all_reduce": 2}, "backward": {"all_reduce": 2}}),
    ("mamba1", True, {"forward": {"all_gather": 1, "all_reduce": 1, "reduce_scatter": 1},
                      "backward": {"all_gather": 2, "all_reduce": 1, "reduce_scatter": 1}}),
])
def test_predicted_counts_are_the_measured_h200_probe(kind, sequence_parallel, expected):
    """Mamba-2 rows: what the issue's probe measured on 2 H200s with mamba-ssm's Mamba2 TP module."""
    assert predicted_counts(kind, sequence_parallel) == expected


def test_message_sizes_are_whole_activations(runs):
    layer = runs["mamba2-lm-sp"].kernels.query("layer >= 0 and collective != ''")
    assert set(layer["message_bytes"]) == {ACTIVATION_BYTES}
    assert set(layer["group_size"]) == {2}
    mamba1 = runs["mamba1-lm-no-sp"].kernels.query("layer >= 0 and collective != ''")
    x_dbl = 2 * 64 * (4 + 2 * 16) * 4  # tokens x (dt_rank + 2 d_state) x fp32: Mamba-1's x_proj all-reduce
    assert set(mamba1["message_bytes"]) == {ACTIVATION_BYTES, x_dbl}


def test_bus_bandwidth_follows_nccl_tests(runs):
    table = bus_bandwidth(runs["mamba1-lm-sp"].kernels, tp=2, link_gb_s=450.0)
    ratio = (table["busbw_gb_per_s"] / table["algbw_gb_per_s"]).round(6)
    expected = table["collective"].map({"all_reduce": 1.0, "all_gather": 0.5, "reduce_scatter": 0.5})
    assert (ratio == expected).all()
    assert (table["pct_of_link"] == 100 * table["busbw_gb_per_s"] / 450.0).all()


def test_exposed_communication_on_known_intervals():
    frame = pd.DataFrame({"rank": 0, "phase": "forward", "launch_idx": range(4),
                          "start_ns": [0, 5, 30, 40], "duration_ns": [10, 15, 10, 5],
                          "collective": ["all_reduce", "", "all_gather", ""], "message_bytes": 64, "group_size": 1})
    row = exposed_communication(frame).iloc[0]
    assert (row["comm_us"], row["exposed_us"]) == (20 / 1e3, 15 / 1e3)
    assert row["overlap_pct"] == 25.0
    assert (row["wait_us"], row["transfer_us"], row["exposed_transfer_us"]) == (0, 20 / 1e3, 15 / 1e3)


def test_a_collective_waits_for_the_last_rank_to_arrive():
    """Rank 1 reaches the all-reduce 6 ns after rank 0: rank 0's kernel is 6 ns of waiting, then the 4 ns both
    spend moving data (rank 1's whole kernel); rank 0's compute [5, 20) hides that transfer."""
    frame = pd.DataFrame({"rank": [0, 0, 1], "phase": "forward", "launch_idx": [0, 1, 0],
                          "start_ns": [0, 5, 6], "duration_ns": [10, 15, 4],
                          "collective": ["all_reduce", "", "all_reduce"], "message_bytes": 64, "group_size": 2})
    comm = with_transfer_times(frame).set_index("rank")
    assert comm["transfer_ns"].tolist() == [4, 4] and comm["wait_ns"].tolist() == [6, 0] and comm["paired"].all()
    table = exposed_communication(frame).set_index("rank")
    assert table.loc[0, ["comm_us", "exposed_us", "wait_us", "transfer_us", "exposed_transfer_us"]].tolist() == \
        [10 / 1e3, 5 / 1e3, 6 / 1e3, 4 / 1e3, 0.0]
    assert table.loc[1, ["wait_us", "exposed_transfer_us"]].tolist() == [0.0, 4 / 1e3]


def test_ranks_whose_collectives_disagree_are_not_paired():
    frame = pd.DataFrame({"rank": [0, 1], "phase": "forward", "launch_idx": [0, 0], "start_ns": [0, 6],
                          "duration_ns": [10, 4], "collective": ["all_reduce", "all_gather"], "message_bytes": 64,
                          "group_size": 2})
    comm = with_transfer_times(frame)
    assert not comm["paired"].any() and comm["transfer_ns"].tolist() == [10, 4] and (comm["wait_ns"] == 0).all()


def test_exposed_communication_on_real_runs(runs):
    for run in runs.values():
        table = exposed_communication(run.kernels)
        assert (table["exposed_us"] <= table["comm_us"] + 1e-9).all()
        layers = table[table["phase"].isin(["forward", "backward"])]
        assert (layers["collectives"] > 0).all() and layers["overlap_pct"].between(0, 100).all()


def test_rank_imbalance_names_slowest_and_fastest(runs):
    table = rank_imbalance(runs["hybrid-sp"].kernels)
    assert set(table["phase"]) == {"forward", "backward", "optimizer"}
    assert (table["compute_max_us"] >= table["compute_min_us"]).all() and (table["ranks"] == 2).all()


def test_projection_is_the_ring_alpha_beta_model():
    frame = pd.DataFrame({"rank": 0, "phase": "forward", "collective": ["all_reduce"], "message_bytes": [10**9],
                          "launch_idx": [0], "duration_ns": [1]})
    links = pd.DataFrame([{"name": "test link", "gb_s": 100.0, "latency_us": 0.0},
                          {"name": "slow start", "gb_s": 100.0, "latency_us": 10.0}])
    table = project_communication(frame, links, [2, 8]).set_index(["link", "world_size"])["projected_us"]
    assert table[("test link", 2)] == pytest.approx(1e4)  # 2(n-1)/n x 1 GB at 100 GB/s
    assert table[("test link", 8)] == pytest.approx(1e4 * 2 * 7 / 8)
    assert table[("slow start", 8)] - table[("test link", 8)] == pytest.approx(2 * 7 * 10)


def test_projection_covers_every_link_and_is_labelled(runs):
    table = project_communication(runs["mamba2-lm-sp"].kernels, links_frame(), [2, 4, 8])
    assert set(table["link"]) == {link.name for link in LINKS.values()}
    assert table["kind"].str.startswith("projection").all()
    by_size = table[table["link"] == LINKS["nvlink4"].name].groupby("world_size")["projected_us"].sum()
    assert by_size.is_monotonic_increasing


@pytest.mark.parametrize(("name", "expected"), [
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_reduce"),
    ("ncclDevKernel_AllGather_RING_LL", "all_gather"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", "reduce_scatter"),
    ("c10d::_allgather_base_", "all_gather"), ("c10d::_reduce_scatter_base_", "reduce_scatter"),
    ("c10d::allreduce_", "all_reduce"), ("gloo:all_reduce", "all_reduce"), ("aten::mm", ""),
])
def test_collective_names(name, expected):
    assert collective_of(name) == expected


def test_collective_size_from_nccl_kernel_args():
    args = {"In msg nelems": 1024, "Out msg nelems": 2048, "dtype": "BFloat16", "Group size": 2}
    assert collective_size(args, {}) == (4096, 2)


def test_link_for_h200_pair():
    assert link_for("h200", "GPU0\tX \tNV18\n") == LINKS["nvlink4"]
    assert link_for("h200", "GPU0\tX \tSYS\n") == LINKS["pcie5"]
    assert link_for(None, None) is None


def test_report_has_per_rank_and_communication_sections():
    text = reporting.report([DATA / "tp2-cpu-gloo-mamba1-lm-no-sp"], "md")
    for title in ("Per rank", "collectives per layer", "bus bandwidth", "exposed time", "Rank imbalance",
                  "PROJECTION (not measured)"):
        assert title in text


def test_single_gpu_runs_read_as_rank_zero():
    run = load_run(DATA / "mamba2-lm-small-h100")
    assert (run.kernels["rank"] == 0).all() and (run.kernels["layer"] == -1).all()
    assert (run.kernels["collective"] == "").all()


def test_scaling_against_the_single_process_run(runs):
    info = runs["mamba2-lm-sp"].info
    single = info.model_copy(update={"parallel": None, "harness": info.harness.model_copy(update={"step_ms": 300.0})})
    tp2 = info.model_copy(update={"harness": info.harness.model_copy(update={"step_ms": 200.0})})
    table = scaling({"one": single, "two": tp2}).set_index("run")
    assert table.loc["two", "speedup"] == 1.5 and table.loc["two", "efficiency_pct"] == 75.0
    assert table.loc["one", "world_size"] == 1


def test_suite_overview_of_parallel_runs_has_scaling():
    text = reporting.report([DATA / "tp2-cpu-gloo-mamba2-lm-sp", DATA / "tp2-cpu-gloo-mamba1-lm-sp"], "md")
    assert "Scaling: step time from 1 to N GPUs" in text and "mamba2-lm tp2x dp1" in text
    overview = text.split("Communication per multi-GPU run", 1)[1].split("\n## ", 1)[0]
    assert "| 2 all_gather + 1 all_reduce + 1 reduce_scatter |" in overview  # mamba1-lm's backward, per layer


def test_projection_check_against_a_measured_run(runs):
    measured = runs["mamba2-lm-sp"].kernels
    comm = with_transfer_times(measured)  # the projection models moving data: the transfer part
    took = comm.query("rank == 0 and phase == 'forward'")["transfer_ns"].sum() / 1e3
    projection = pd.DataFrame({"link": ["l"], "world_size": [2], "phase": ["forward"], "projected_us": [2 * took]})
    row = projection_check(projection, measured, "l", 2).iloc[0]
    assert row["measured_us"] == pytest.approx(took) and row["error_pct"] == pytest.approx(100.0)


@pytest.fixture(scope="module")
def h200_pair():
    """The bundled TP=2 runs on 2 H200s over NVLink (NV18), NCCL, with the same host's single-GPU runs
    (`bundled.parallel_runs`; how they were measured: tests/data/tp2-h200-nccl/README.md)."""
    return {path.name: load_run(path) for path in bundled.parallel_runs("h200")}


def _per_phase(run, rank: int = 0) -> dict:
    comm = collectives(run.kernels)
    comm = comm[comm["rank"] == rank]
    return comm.groupby(["phase", "collective", "message_bytes"]).size().to_dict()


def test_all_reduces_per_layer_on_two_h200s(h200_pair):
    """The claim, measured without sequence parallelism (14 layers, paper width): Mamba-2 all-reduces once per
    layer forward and once backward (the 64 MiB activation), Mamba-1 twice each way: the activation and x_proj's
    output (dt, B, C: 2 x 4096 tokens x 288 x bf16 = 4.5 MiB); and with sequence parallelism, per layer, what the
    structure predicts on every layer and rank of every run."""
    activation, x_dbl = 2 * 4096 * 4096 * 2, 2 * 4096 * (256 + 2 * 16) * 2
    for rank in (0, 1):
        assert _per_phase(h200_pair["mamba2-lm-tp2-no-sp"], rank) == {
            ("forward", "all_reduce", activation): 14, ("backward", "all_reduce", activation): 14}
        assert _per_phase(h200_pair["mamba1-lm-tp2-no-sp"], rank) == {
            ("forward", "all_reduce", activation): 14, ("forward", "all_reduce", x_dbl): 14,
            ("backward", "all_reduce", activation): 14, ("backward", "all_reduce", x_dbl): 14}
    for name, run in h200_pair.items():
        parallel = run.info.parallel
        if parallel:
            counts = collective_counts(run.kernels, parallel.sequence_parallel)
            assert counts["matches"].all() and counts.groupby("layer_kind")["layers"].first().sum() == 14, name
    overview = parallel_overview(h200_pair).set_index("run")
    assert overview.loc["mamba2-lm-tp2", ["forward_per_layer", "backward_per_layer"]].tolist() == [
        "1 all_gather + 1 reduce_scatter", "2 all_gather + 1 reduce_scatter"]
    assert overview.loc["mamba1-lm-tp2-no-sp", "forward_per_layer"] == "2 all_reduce"


def test_exposed_transfer_and_scaling_on_two_h200s(h200_pair):
    """Per step, the slower rank's collectives' transfer time no compute hides (`exposed_transfer_us`), the wait
    for the other rank apart; the step from 1 to 2 GPUs on one host; the bus bandwidth under the link's."""
    overview = parallel_overview(h200_pair).set_index("run")
    assert overview["exposed_transfer_ms"].round(1).to_dict() == {
        "hybrid-tp2": 12.7, "mamba1-lm-tp2": 13.2, "mamba1-lm-tp2-no-sp": 7.2, "mamba2-lm-tp2": 12.7,
        "mamba2-lm-tp2-no-sp": 7.1}
    assert round(overview.loc["mamba2-lm-tp2-no-sp", "wait_ms"]) == 61  # rank 1 waited in backward
    table = scaling({name: run.info for name, run in h200_pair.items()}).set_index("run")
    assert table["speedup"].round(2).to_dict() == {
        "hybrid-single": 1.0, "hybrid-tp2": 1.75, "mamba1-lm-single": 1.0, "mamba1-lm-tp2": 1.45,
        "mamba1-lm-tp2-no-sp": 1.41, "mamba2-lm-single": 1.0, "mamba2-lm-tp2": 1.74, "mamba2-lm-tp2-no-sp": 1.64}
    busbw = bus_bandwidth(h200_pair["mamba2-lm-tp2-no-sp"].kernels, 2, LINKS["nvlink4"].gb_s)
    layers = busbw[busbw["message_bytes"] == 2 * 4096 * 4096 * 2].set_index("phase")
    assert layers["busbw_gb_per_s"].round().to_dict() == {"backward": 237, "forward": 273}
    assert layers["pct_of_link"].round().to_dict() == {"backward": 53, "forward": 61}
    assert (overview["busbw_gb_per_s_max"] < LINKS["nvlink4"].gb_s).all()  # under the datasheet, every run


def test_counters_under_tensor_parallelism_check_out(h200_pair):
    """Nsight Compute on rank 0 of the TP=2 run (NCCL kernels left out): the GEMMs' measured tensor work against
    2MNK of the sharded shapes, and the share of rank 0's compute kernel time with checked counters."""
    run = h200_pair["mamba2-lm-tp2"]
    gemm = run.info.checks.gemm_flops
    assert (round(gemm["forward"]["ratio"], 3), round(gemm["backward"]["ratio"], 3)) == (1.013, 1.007)
    rank0 = run.kernels[(run.kernels["rank"] == 0) & (run.kernels["collective"] == "")]
    counted = rank0["counter_status"].isin(["measured", "lent"])
    assert round(100 * rank0.loc[counted, "duration_ns"].sum() / rank0["duration_ns"].sum(), 1) == 99.2
    assert (run.kernels.loc[run.kernels["rank"] == 1, "counter_status"] == "not collected").all()


def test_a_tp_report_says_what_its_rank_waited_for(h200_pair):
    """The TP=2 runs: the report describes rank 0 and says how much of its collectives' time was waiting for the
    other rank; in the run without sequence parallelism most of it was."""
    from ssmprof.analysis.summaries.run import analyze, warnings_for

    tp2, no_sp = (h200_pair[name] for name in ("mamba2-lm-tp2", "mamba2-lm-tp2-no-sp"))
    assert "rank 0's collectives took 20.9 ms of the profiled iteration: 15.8 ms transfer, 5.1 ms waiting for the " \
           "other ranks" in warnings_for(tp2, analyze(tp2, None))
    assert "rank 0's collectives took 24.3 ms of the profiled iteration: 7.4 ms transfer, 16.9 ms waiting for the " \
           "other ranks" in warnings_for(no_sp, analyze(no_sp, None))
    provenance = reporting.report([bundled.REFERENCE / "h200" / bundled.PARALLEL / "mamba2-lm-tp2"], "md")
    assert "the kernel tables describe rank 0 (the one with counters)" in provenance
