"""`--cuda-graphs`: refused in one line where a step cannot be captured (on the CPU, --tp/--dp gloo runs included;
not on GPUs under --tp/--dp, whose ranks capture their step with its collectives); the ranks' graphed steps merged as
each replay's slowest rank; its gain set beside the host wait, per rank on several ranks."""

from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from typer.testing import CliRunner

import ssmprof
from ssmprof.analysis.step.cuda_graphs import graph_gain
from ssmprof.analysis.step.host import host_summary
from ssmprof.cli import app
from ssmprof.pipeline.loading import load_run
from ssmprof.profiler.harness import capture_refusal
from ssmprof.workloads.registry import get_workload

H100 = Path(ssmprof.__file__).parent / "reference" / "h100-sxm"
GPU, CPU = SimpleNamespace(device="cuda"), SimpleNamespace(device="cpu")


@pytest.mark.parametrize(("workload", "plan", "refusal"), [
    ("mamba2-lm", GPU, None),  # one GPU, or a --tp/--dp rank on one: its collectives are captured with it
    ("mamba-vision", GPU, None),
    ("mamba2-lm", CPU, "--cuda-graphs needs a CUDA GPU"),
    ("graph-mamba", GPU, "graph-mamba cannot be captured as a CUDA graph: every training batch is another set of "
                         "molecular graphs"),
])
def test_what_cannot_be_captured_is_refused_with_its_reason(workload, plan, refusal):
    reason = capture_refusal(get_workload(workload), plan)
    assert reason == refusal if refusal is None else reason.startswith(refusal)


@pytest.mark.parametrize("command", [
    ["run", "mamba2-lm", "--preset", "tiny", "--tp", "2"],
    ["profile", "mamba2-lm", "--preset", "tiny", "--tp", "2", "--counters", "none"],
])
def test_a_parallel_cpu_run_refuses_cuda_graphs_in_one_line_before_its_ranks_start(tmp_path, monkeypatch, command):
    """gloo ranks on the CPU have no CUDA graph to capture: refused once, by the command, before torchrun starts
    (a rank would otherwise fail in each process after building its model)."""
    from ssmprof.profiler import distributed

    monkeypatch.setattr(distributed, "launch", lambda *args, **kwargs: pytest.fail("the ranks were started"))
    out = ["--out", str(tmp_path)] if command[0] == "profile" else ["--json", str(tmp_path / "out.json")]
    result = CliRunner().invoke(app, [*command, "--device", "cpu", "--cuda-graphs", *out])
    assert result.exit_code != 0
    assert result.output.strip().count("\n") == 0, result.output
    assert "--cuda-graphs needs a CUDA GPU" in result.output and "gloo" in result.output
    assert not list(tmp_path.iterdir())


def test_a_parallel_gpu_request_with_cuda_graphs_is_accepted():
    """--tp/--dp with --cuda-graphs builds its request and its rank job: only the device refuses, once known."""
    from ssmprof.pipeline import measure

    options = measure.WorkloadOptions("mamba2-lm", "paper", tp=4)
    request = measure.ProfileRequest(options, measure.ProfileSettings(counters="none", cuda_graphs=True))
    assert request.settings.cuda_graphs
    ready = measure.prepare(measure.WorkloadOptions("mamba2-lm", "tiny", tp=2), "cpu")
    job = measure.rank_job(ready, options, 3, "train", cuda_graphs=True)
    assert job.cuda_graphs and not measure.rank_job(ready, options, 3, "train").cuda_graphs


def test_the_rank_job_carries_cuda_graphs_through_its_file(tmp_path):
    """`RankJob.cuda_graphs` is written and read back with the job (the ranks read it from the file); a job file
    written before the field reads as False."""
    from ssmprof import schema

    fields = dict(workload="mamba2-lm", preset="tiny", overrides={}, warmup=0, steps=1, tp=2, dp=1,
                  sequence_parallel=True, device="cuda", mode="train", scratch=str(tmp_path))
    written = schema.write_document(schema.make_document(schema.RankJob, **fields, cuda_graphs=True),
                                    tmp_path / "train.json")
    assert schema.read_document(schema.RankJob, written).cuda_graphs is True
    older = schema.write_document(schema.make_document(schema.RankJob, **fields), tmp_path / "older.json")
    assert schema.read_document(schema.RankJob, older).cuda_graphs is False


def _rank(rank: int, steps: list[float], graphed: list[float] | None):
    """A rank's result as the merge reads it: a full harness result with these eager and graphed steps."""
    from dataclasses import asdict

    from ssmprof import schema
    from ssmprof.profiler.harness import RunResult

    result = RunResult(workload="mamba2-lm", preset="paper", config={}, device="cuda", gpu={"name": "H100"},
                       warmup=3, step_times_ms=steps, items_per_step=8192, unit="tokens", peak_memory_bytes=1,
                       final_loss=1.0, provenance={}, graphed_step_times_ms=graphed)
    return schema.make_document(schema.RankResult, rank=rank, node="n", result=asdict(result))


def test_the_graphed_steps_merge_as_each_replays_slowest_rank():
    """A replay of a --tp step ends on every rank once the last is done (its collectives are inside the graph):
    replay i of the run is the longest replay i of any rank, as the eager steps are; and the per-rank medians are
    kept in run.json `parallel.ranks`."""
    from ssmprof.profiler.distributed import _graphed_ms, harness_of, merged_result

    ranks = [_rank(0, [130.0, 140.0], [76.6, 76.9]), _rank(1, [131.0, 139.0], [76.8, 76.5]),
             _rank(2, [129.0, 141.5], [76.7, 76.7])]
    merged = merged_result(ranks)
    assert merged.step_times_ms == [131.0, 141.5]
    assert merged.graphed_step_times_ms == [76.8, 76.9] and merged.graphed_step_ms == pytest.approx(76.85)
    assert _graphed_ms(harness_of(ranks[1])) == {"graphed_step_ms": pytest.approx(76.65)}
    assert merged_result([_rank(0, [130.0], None), _rank(1, [131.0], None)]).graphed_step_times_ms is None
    assert _graphed_ms(harness_of(_rank(0, [130.0], None))) == {}
    with pytest.raises(ValueError):  # ranks that timed different numbers of replays are no one step
        merged_result([_rank(0, [130.0], [76.0, 76.1]), _rank(1, [131.0], [76.2])])


@pytest.mark.parametrize(("mode", "graphed"), [("train", True), ("timeline", True), ("counters", False)])
def test_a_rank_captures_its_step_only_in_the_modes_that_time_steps(tmp_path, monkeypatch, mode, graphed):
    """`_run_rank` asks the harness for the graphed steps in train and timeline jobs with `cuda_graphs`; a counter
    pass replays one eager step under Nsight Compute and never captures. One gloo rank, the harness stubbed."""
    import socket

    from ssmprof.profiler import distributed, harness, timeline

    asked = {}

    def stub(*args, **kwargs):
        asked.update(kwargs)
        return _rank(0, [1.0], None).result

    class Capture:  # the timeline mode's collector, without torch.profiler
        def __init__(self, cuda):
            self.trace = None

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    for key, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(harness, "run_training", lambda *args, **kwargs: _as_result(stub(*args, **kwargs)))
    monkeypatch.setattr(timeline, "TimelineCapture", Capture)
    monkeypatch.setattr(timeline, "cpu_table", lambda trace: pd.DataFrame({"kernel_name": ["k"]}))
    monkeypatch.setattr(distributed.schema, "write_frame", lambda frame, path: path)
    fields = dict(workload="mamba2-lm", preset="tiny", overrides={}, warmup=0, steps=1, tp=1, dp=1,
                  sequence_parallel=True, device="cpu", mode=mode, scratch=str(tmp_path), cuda_graphs=True)
    from ssmprof import schema

    distributed._run_rank(schema.make_document(schema.RankJob, **fields), mode, 0)
    assert asked["cuda_graphs"] is graphed


def _as_result(run):
    from ssmprof.profiler.harness import RunResult

    return RunResult(**run.model_dump())



def test_on_several_ranks_the_host_wait_is_the_step_beyond_the_ranks_gpu_work():
    """The TP=4 H100 run (tests/data/tp4-h100-mamba2-lm-paper-straggler) read per rank, as the report reads it
    (`ranks.rank_host`): rank 0 ran ahead, so its own launch gaps are a few ms and it waited in its collectives; the
    wait a graph can take out is the 137.2 ms step less rank 0's 75.7 ms of GPU work, which the 76.7 ms graphed step
    measured on 4 H100s (tests/data/tp4-h100-late-rank-cause) nearly all removes."""
    from ssmprof.analysis.step.ranks import late_rank, rank_host

    run = load_run(Path(__file__).parent / "data" / "tp4-h100-mamba2-lm-paper-straggler")
    harness = run.info.harness.model_dump()
    rank0 = run.kernels[run.kernels["rank"] == 0]
    host = rank_host(host_summary(rank0, harness["step_ms"]), run.kernels, 0, late_rank(run.kernels, run.info))
    assert round(host["gpu_idle_ms"].iloc[0], 1) == 4.0  # rank 0's own gaps: not what a graph gives back
    row = graph_gain({**harness, "cuda_graphs": {"step_ms": 76.7, "step_times_ms": [76.6, 76.7, 76.8]}},
                     host).iloc[0]
    assert round(row["host_wait_ms"], 1) == round(harness["step_ms"] - 75.7, 1) == 61.5
    assert round(row["gain_share_of_host_wait"], 2) == 0.98 and row["verdict"] == "faster" and row["check"] == "ok"


def test_the_gain_is_set_beside_the_host_wait_with_its_noise():
    """The bundled H100 mamba2-lm run's eager steps (218.5 ms median, 215.7-223.9 ms) and host wait, beside graphed
    steps of a scenario: 10 ms saved, a speedup whose 95 % interval stays above 1 and the rerun floor; 2 ms, under
    the floor; and a graphed step shorter than the GPU's busy time, which fails the check."""
    run = load_run(H100 / "mamba2-lm")
    harness = run.info.harness.model_dump()
    host = host_summary(run.kernels, harness["step_ms"])
    assert graph_gain(harness, host) is None  # recorded without --cuda-graphs
    faster = graph_gain({**harness, "cuda_graphs": {"step_ms": harness["step_ms"] - 10.0,
                                                    "step_times_ms": [208.3, 208.5, 208.8]}}, host).iloc[0]
    assert round(faster["host_wait_ms"], 1) == round(harness["step_ms"] - host["gpu_busy_ms"].iloc[0], 1)
    assert round(faster["gain_ms"], 3) == 10.0 and faster["verdict"] == "faster" and faster["check"] == "ok"
    assert (round(faster["speedup"], 3), round(faster["speedup_low"], 3), round(faster["speedup_high"], 3)) == \
           (1.048, 1.034, 1.074)
    assert faster["gain_share_of_host_wait"] == pytest.approx(10.0 / faster["host_wait_ms"])
    same = graph_gain({**harness, "cuda_graphs": {"step_ms": harness["step_ms"] - 2.0,
                                                  "step_times_ms": [216.5, 216.6]}}, host).iloc[0]
    assert same["verdict"] == "within noise"
    impossible = graph_gain({**harness, "cuda_graphs": {"step_ms": 100.0, "step_times_ms": [100.0]}}, host).iloc[0]
    assert impossible["check"].startswith("graphed step under the GPU's busy time")


@pytest.mark.gpu
@pytest.mark.parametrize("workload", ["mamba2-lm", "mamba-vision"])
def test_a_captured_step_replays_on_the_gpu(tmp_path, workload):
    """On a GPU: the tiny step captures, its replays are timed and no slower than the eager step beyond noise. In
    bf16: the tiny preset's fp32 (a CPU's) has no fused attention, which mamba-vision's step needs."""
    import json

    out = tmp_path / "run.json"
    result = CliRunner().invoke(app, ["run", workload, "--preset", "tiny", "--dtype", "bf16", "--steps", "5",
                                      "--cuda-graphs", "--json", str(out)])
    assert result.exit_code == 0, result.output
    run = json.loads(out.read_text())
    assert len(run["graphed_step_times_ms"]) == 5 and run["graphed_step_ms"] > 0
    spread = max(run["step_times_ms"]) - min(run["step_times_ms"])
    assert run["graphed_step_ms"] <= run["step_ms"] + spread


TP4_GRAPHS = Path(__file__).parent / "data" / "tp4-h100-cuda-graphs"
TP1 = Path(__file__).parent / "data" / "tp1-h100-mamba2-lm-paper"


def test_ssmprof_run_tp4_cuda_graphs_on_four_h100s():
    """`ssmprof run mamba2-lm --preset paper --tp 4 --steps 30`, then with `--cuda-graphs`, on one 4 x H100 host
    (tests/data/tp4-h100-cuda-graphs): the eager step, paced by the hosts, is 145.9 ms; the step replayed as one
    graph, its collectives inside, 77.2 ms on every rank (30 replays, 77.0-104.6 ms): 2.76x the 212.8 ms single-GPU
    step, where the eager step gives 1.46x; 1.89x the eager step (95 % interval 1.87-2.03x)."""
    import json
    import statistics

    from ssmprof.analysis.trust.noise import ratio_interval

    eager = json.loads((TP4_GRAPHS / "run-eager.json").read_text())
    graphed = json.loads((TP4_GRAPHS / "run-graphs.json").read_text())
    single_ms = load_run(TP1).info.harness.step_ms
    assert eager["graphed_step_times_ms"] is None and len(eager["step_times_ms"]) == 30
    replays = graphed["graphed_step_times_ms"]
    assert len(replays) == 30 and (round(min(replays), 1), round(max(replays), 1)) == (77.0, 104.6)
    assert (round(statistics.median(eager["step_times_ms"]), 1), round(statistics.median(replays), 1)) == (145.9, 77.2)
    assert [round(rank["graphed_step_ms"], 1) for rank in graphed["parallel"]["ranks"]] == [77.2] * 4
    assert (round(single_ms / statistics.median(eager["step_times_ms"]), 2),
            round(single_ms / statistics.median(replays), 2)) == (1.46, 2.76)
    speedup = ratio_interval(eager["step_times_ms"], replays)
    assert (round(speedup.value, 2), round(speedup.low, 2), round(speedup.high, 2)) == (1.89, 1.87, 2.03)


def test_ssmprof_profile_tp4_cuda_graphs_records_and_reads_the_graphed_steps():
    """`ssmprof profile mamba2-lm --preset paper --tp 4 --counters none --cuda-graphs` on the same host: run.json
    keeps the graphed replays beside the eager steps (each replay its slowest rank's, every rank's median in
    `parallel.ranks`); the report sets the 104.6 ms gain beside the 107.5 ms the step spends beyond rank 0's GPU work
    (97 % of it), a 2.35x speedup whose interval (1.83-2.70x) stays above 1; the eager step's late rank is paced by
    the hosts."""
    from ssmprof.analysis.summaries.run import analyze

    run = load_run(TP4_GRAPHS / "profile")
    graphed = run.info.harness.cuda_graphs
    assert graphed is not None and len(graphed.step_times_ms) == len(run.info.harness.step_times_ms) == 10
    assert [round(rank["graphed_step_ms"], 1) for rank in run.info.parallel.ranks] == [77.3] * 4
    summary = analyze(run, None)
    row = summary.cuda_graphs.iloc[0]
    assert (round(row["step_ms"], 1), round(row["graphed_step_ms"], 1), round(row["host_wait_ms"], 1)) == \
           (181.9, 77.3, 107.5)
    assert (round(row["speedup"], 2), round(row["speedup_low"], 2), round(row["speedup_high"], 2)) == (2.35, 1.83, 2.70)
    assert (row["verdict"], row["check"], round(row["gain_share_of_host_wait"], 2)) == ("faster", "ok", 0.97)
    late = summary.late_rank.iloc[0]
    assert (late["late_rank"], bool(late["hosts_pace"])) == (0, True)
