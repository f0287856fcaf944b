"""Timeline collector: kernel names, phase attribution by time, and the run directory it feeds."""

from pathlib import Path

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from ssmprof.cli import app
from ssmprof.kernels import plan_kernels
from ssmprof.profiler.harness import run_training
from ssmprof.profiler.markers import NvtxMarker
from ssmprof.profiler.profile_run import coverage
from ssmprof.profiler.timeline import (
    TimelineCapture,
    kernel_table,
    phase_at,
    phase_ranges,
    short_kernel_name,
    timed_table,
)
from ssmprof.schema import KERNEL_COLUMNS, conform_kernels, read_frame
from ssmprof.workloads.registry import get_workload


@pytest.mark.parametrize(
    ("full", "short"),
    [
        ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"
         "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)", "vectorized_elementwise_kernel"),
        ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
         "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4>>(...)",
         "multi_tensor_apply_kernel"),
        ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::"
         "BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > >(at::"
         "TensorIteratorBase&, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::"
         "MulFunctor<float> > const&)::{lambda(int)#1}>(int, {lambda(int)#1})", "elementwise_kernel"),
        ("void causal_conv1d_fwd_kernel<Causal_conv1d_fwd_kernel_traits<128, 4, true, c10::BFloat16, "
         "c10::BFloat16> >(ConvParamsBase)", "causal_conv1d_fwd_kernel"),
        ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
         "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, "
         "false, false, false, true, false, false>(pytorch_flash::Flash_fwd_params)", "flash_fwd_kernel"),
        ("_chunk_scan_fwd_kernel", "_chunk_scan_fwd_kernel"),  # Triton kernels keep their Python name
        ("nvjet_hsh_128x256_64x4_1x2_h_bz_coopA_NNT", "nvjet_hsh_128x256_64x4_1x2_h_bz_coopA_NNT"),
    ],
)
def test_short_kernel_names(full, short):
    assert short_kernel_name(full) == short


@pytest.fixture(scope="module")
def cpu_trace():
    """A real torch.profiler trace of one tiny training iteration with the harness's phase labels."""
    workload = get_workload("mamba2-lm")
    capture = TimelineCapture(cuda=False)
    run_training(workload, "tiny", workload.config("tiny"), plan_kernels(workload.ops, "cpu"), steps=1, warmup=0,
                 marker=NvtxMarker(), capture=capture)
    return capture.trace


def test_phase_ranges_follow_the_iteration(cpu_trace):
    events = [e for e in cpu_trace["traceEvents"] if e.get("ph") == "X"]
    ranges = phase_ranges(events)
    assert [phase for _, _, phase in ranges] == ["forward", "backward", "optimizer"]
    assert all(end <= next_start for (_, end, _), (next_start, _, _) in zip(ranges, ranges[1:], strict=False))
    ops = {e["name"]: e["ts"] for e in events if e.get("cat") == "cpu_op"}
    assert phase_at(ranges, ops["aten::embedding"]) == "forward"
    adam_updates = [e["ts"] for e in events if e.get("cat") == "cpu_op" and "addcdiv" in e["name"]]
    assert adam_updates and {phase_at(ranges, ts) for ts in adam_updates} == {"optimizer"}
    backward_ops = [e["ts"] for e in events if e.get("cat") == "cpu_op" and "Backward" in e["name"]]
    assert backward_ops and {phase_at(ranges, ts) for ts in backward_ops} == {"backward"}
    assert phase_at(ranges, ranges[0][0] - 1) == "other"


def test_cpu_trace_has_no_kernels_and_still_fits_the_contract(cpu_trace):
    table = conform_kernels(kernel_table(cpu_trace))
    assert table.empty and list(table.columns)[: len(KERNEL_COLUMNS)] == list(KERNEL_COLUMNS)
    assert coverage(table) == {"launches": 0, "kernel_time_ns": 0, "phase_time_fraction": 0.0,
                               "counter_time_fraction": 0.0}


def test_a_parallel_runs_counter_share_leaves_its_collectives_out():
    """The TP=4 straggler's rank 0 (Nsight Compute on it, NCCL kernels never replayed): 74 % of its kernel time is
    collectives waiting for rank 1; its compute kernels are 98 % checked, and that is the share coverage states."""
    kernels = read_frame(Path(__file__).parent / "data" / "tp4-h100-mamba2-lm-paper-straggler" / "kernels.parquet")
    rank0 = conform_kernels(kernels[kernels["rank"] == 0])
    assert coverage(rank0)["counter_time_fraction"] == pytest.approx(0.983, abs=0.001)
    assert coverage(rank0)["kernel_time_ns"] == rank0["duration_ns"].sum()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_profile_without_gpu_is_one_line(tmp_path):
    result = CliRunner().invoke(app, ["profile", "mamba2-lm", "--preset", "tiny", "--out", str(tmp_path)])
    assert result.exit_code == 1 and "needs a CUDA GPU" in result.output and "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []


def test_a_kernel_takes_the_layer_of_its_launch_not_of_a_later_gpu_annotation():
    """GPU traces hold each layer range twice: on the host (`user_annotation`, where the launch happens) and as
    `gpu_user_annotation` at the time its kernels ran, behind the host. Layer 1's launch falls inside layer 0's
    GPU copy; it belongs to layer 1 (recorded on 2 H200s: per-layer collective counts 0-4 for a true 1)."""
    def span(cat, name, ts, dur):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}

    def launch(correlation, ts):
        return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts, "dur": 2,
                "args": {"correlation": correlation}}

    def kernel(correlation, ts):
        return {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "ts": ts, "dur": 50,
                "args": {"correlation": correlation, "In msg nelems": 8, "dtype": "BFloat16", "Group size": 2}}

    events = [span("user_annotation", "ssmprof/forward", 0, 1000),
              span("user_annotation", "ssmprof/layer/0/mamba2", 10, 90), launch(1, 50),
              span("user_annotation", "ssmprof/layer/1/mamba2", 110, 90), launch(2, 150),
              span("gpu_user_annotation", "ssmprof/layer/0/mamba2", 120, 200), kernel(1, 300),
              span("gpu_user_annotation", "ssmprof/layer/1/mamba2", 330, 200), kernel(2, 500)]
    table = kernel_table({"traceEvents": events})
    assert table["layer"].tolist() == [0, 1]
    assert table["phase"].tolist() == ["forward", "forward"] and table["collective"].tolist() == ["all_reduce"] * 2


def _timing_trace(names: list[str], durations_us: list[list[float]], gap_us: float = 1.0) -> dict:
    """A CUDA-only trace of len(durations_us) pipelined steps launching `names` in order, each kernel `gap_us` after
    the one before (correlation ids in launch order, as CUPTI gives them)."""
    events, ts, correlation = [], 0.0, 0
    for step in durations_us:
        for name, dur in zip(names, step, strict=True):
            correlation += 1
            events.append({"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur,
                           "args": {"correlation": correlation}})
            ts += dur + gap_us
    return {"traceEvents": events[::-1]}  # export order is not launch order


def _detail(names: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"kernel_name_full": names, "start_ns": [0, 50_000, 90_000],
                         "duration_ns": [40_000, 30_000, 60_000], "phase": ["forward", "backward", "optimizer"]})


NAMES = ["gemm", "scan", "adam"]


@pytest.mark.parametrize("steps_us, kept, span_ms", [
    # first step absorbs the profiler's start; of the three kept, the median span is taken
    ([[90, 90, 90], [10, 10, 10], [20, 20, 20], [30, 30, 30]], 1, 0.062),
    ([[5, 5, 5], [30, 30, 30], [10, 10, 10], [20, 20, 20]], 2, 0.062),
])
def test_the_timing_pass_gives_the_detail_rows_the_median_steps_times(steps_us, kept, span_ms):
    table, summary = timed_table(_detail(NAMES), _timing_trace(NAMES, steps_us), iterations=3)
    assert summary["joined"] == "joined" and summary["kept"] == kept
    assert summary["detail_span_ms"] == pytest.approx(0.15)
    assert summary["spans_ms"][kept] == pytest.approx(span_ms)
    assert table["start_ns"].tolist() == [0, 21_000, 42_000] and table["duration_ns"].tolist() == [20_000] * 3
    assert table["phase"].tolist() == ["forward", "backward", "optimizer"]  # named by the detail pass


@pytest.mark.parametrize("names, steps, refusal", [
    (NAMES[:2], 4, "the timing pass ran 8 kernels in 4 steps, the detail pass 3 in one"),
    (["gemm", "autotune", "adam"], 4, "timing step 1 launched autotune as launch 1, the detail pass scan"),
    (NAMES, 3, "the timing pass ran 9 kernels in 4 steps"),
])
def test_a_timing_pass_of_other_launches_keeps_the_detail_times_and_says_why(names, steps, refusal):
    chosen = []
    detail = _detail(NAMES)
    trace = _timing_trace(names, [[10.0] * len(names)] * steps)
    table, summary = timed_table(detail, trace, iterations=3, choose=lambda spans: chosen.append(spans) or 0)
    assert refusal in summary["joined"] and summary["joined"].startswith("not joined")
    assert table is detail and chosen == [[]]  # every rank still takes part in choosing the iteration


def test_a_cpu_capture_prints_nothing_among_the_progress_lines():
    """`ssmprof profile` on the CPU printed kineto's "USDT: ... profiler_start/profiler_stop" lines (C++ stderr) and
    torch.profiler's "Profiler clears events at the end of each cycle" warning among its progress lines. Run in a
    fresh process (kineto reads its log level once); torch's warning is raised as torch raises it on a restart."""
    import subprocess
    import sys

    code = """
import os, warnings
os.environ.pop("KINETO_LOG_LEVEL", None)
warnings.simplefilter("always")
import torch
from torch.profiler import profiler
from ssmprof.profiler.timeline import TimelineCapture
prepare = profiler.profile.prepare_trace
def prepare_again(self):
    profiler._warn_once("Warning: Profiler clears events at the end of each cycle. Only events from the current "
                        "cycle will be reported. To keep events across cycles, set acc_events=True.")
    return prepare(self)
profiler.profile.prepare_trace = prepare_again
x = torch.randn(64, 64)
for _ in range(2):
    with TimelineCapture(cuda=False) as capture:
        x @ x
print("events", len(capture.trace["traceEvents"]) > 0)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "events True"
    assert "USDT" not in done.stderr and "clears events" not in done.stderr, done.stderr
