"""GPU busy time and host-boundness: table-driven on constructed timelines, then on the bundled runs."""

from pathlib import Path

import pandas as pd
import pytest

from ssmprof import bundled, schema
from ssmprof.analysis.step.host import busy_ns, host_summary


@pytest.mark.parametrize(
    ("scenario", "intervals", "busy"),
    [
        ("back to back", [(0, 10), (10, 5)], 15),
        ("a gap counts as idle", [(0, 10), (30, 5)], 15),
        ("overlapping streams count once", [(0, 10), (5, 10), (40, 1)], 16),
        ("one kernel inside another", [(0, 100), (10, 5), (20, 5)], 100),
        ("launch order is not start order", [(30, 5), (0, 10)], 15),
    ],
)
def test_busy_time_is_the_union_of_kernel_intervals(scenario, intervals, busy):
    kernels = pd.DataFrame(intervals, columns=["start_ns", "duration_ns"])
    assert busy_ns(kernels) == busy, scenario


def test_graph_mamba_is_host_bound_and_mamba2_lm_is_not():
    """The bundled H100 paper runs: graph-mamba launches 1,322 mostly tiny kernels per step."""
    verdicts = {}
    for workload in ("graph-mamba", "mamba2-lm"):
        run = schema.read_run(bundled.REFERENCE / "h100-sxm" / workload)
        row = host_summary(run.kernels, run.info.harness.step_ms).iloc[0]
        assert 0 < row["gpu_busy_ms"] <= row["step_ms"] * 1.05, workload
        verdicts[workload] = (row["verdict"], row["gpu_busy_pct"])
    assert verdicts["graph-mamba"][0] == "host-bound" and verdicts["graph-mamba"][1] < 50
    assert verdicts["mamba2-lm"][0] == "GPU-bound" and verdicts["mamba2-lm"][1] > 85


@pytest.mark.parametrize(
    ("scenario", "busy_ms", "step_ms", "slow"),
    [
        ("busy below the step", 95, 100, None),
        ("within noise past the step", 101.5, 100, None),
        ("a slow profiled iteration", 105, 100, 0.05),
    ],
)
def test_a_profiled_iteration_busier_than_its_median_step_is_slow(scenario, busy_ms, step_ms, slow):
    from ssmprof.analysis.step.host import slow_iteration

    excess = slow_iteration(busy_ms, step_ms)
    assert (excess == pytest.approx(slow)) if slow else excess is None, scenario


SLOW_RUN = Path(__file__).parent / "data" / "slow-iteration-h200-mamba1-lm"  # bundled until 2026-11-24


def test_only_the_h200_mamba1_lm_run_of_2026_11_23_has_a_slow_profiled_iteration():
    """SLOW_ITERATION was chosen on the paper-suite runs bundled until 2026-11-23, where the H200 mamba1-lm's
    profiled iteration was 4.6 % busier than its median step (kept as a fixture), and comparing it says so; the
    runs bundled since, none of them slow, read 0.19-1.01 (graph-mamba host-bound at 0.19)."""
    from ssmprof.analysis.step.host import slow_iteration
    from ssmprof.pipeline import reporting

    shares = {(gpu, run.name): busy_ns(r.kernels) / 1e6 / r.info.harness.step_ms for gpu in bundled.GPUS
              for run in bundled.runs(gpu) for r in [schema.read_run(run)]}
    slow_run = schema.read_run(SLOW_RUN)
    shares[("h200", "slow mamba1-lm")] = busy_ns(slow_run.kernels) / 1e6 / slow_run.info.harness.step_ms
    bundled_now = [share for key, share in shares.items() if key[1] != "slow mamba1-lm"]
    assert len(bundled_now) == 16 and f"{min(bundled_now):.2f}-{max(bundled_now):.2f}" == "0.19-1.01"
    slow = {key: round(100 * excess, 1) for key, share in shares.items()
            if (excess := slow_iteration(100 * share, 100)) is not None}
    assert slow == {("h200", "slow mamba1-lm"): 4.6}
    text = reporting.compare(bundled.REFERENCE / "h100-sxm" / "mamba1-lm", SLOW_RUN)
    assert "the profiled iteration of B kept the GPU busy 245.3 ms, 4.6 % past its median step (234.6 ms)" in text


def test_the_slow_run_s_own_report_warns_and_a_steady_one_does_not():
    from ssmprof.analysis.summaries.run import analyze, warnings_for
    from ssmprof.pipeline.loading import load_run

    slow, steady = (warnings_for(run, analyze(run, None))
                    for run in (load_run(SLOW_RUN), load_run(bundled.REFERENCE / "h100-sxm" / "mamba1-lm")))
    assert "the profiled iteration kept the GPU busy 245.3 ms, 4.6 % past its median step (234.6 ms): its kernel " \
           "times describe a slower step than the timed ones" in slow
    assert not any("slower step" in note for note in steady)


@pytest.mark.parametrize(
    ("scenario", "step_ms", "launch_us", "verdict", "cost"),
    [
        ("kernels back to back, little wait", 105.0, None, "GPU-bound", "5.0 ms a step (4.8 %) waiting for the host"),
        ("a 12 ms wait on a 112 ms step", 112.0, 5.0, "host-limited",
         "12.0 ms a step (10.7 %) waiting for the host; launching its 100 kernels takes the host 0.5 ms"),
        ("the GPU idles most of the step", 250.0, None, "host-bound", "150.0 ms a step (60.0 %) waiting for the host"),
        ("launching takes the host longer than the GPU's work", 104.0, 1_000.0, "host-bound",
         "4.0 ms a step (3.8 %) waiting for the host; launching its 100 kernels takes the host 100.0 ms"),
    ],
)
def test_the_host_verdict_comes_from_the_wait_and_the_launch_cost(scenario, step_ms, launch_us, verdict, cost):
    kernels = pd.DataFrame({"start_ns": [i * 1_000_000 for i in range(100)], "duration_ns": [1_000_000] * 100})
    row = host_summary(kernels, step_ms, launch_us).iloc[0]
    assert (row["verdict"], row["host_cost"]) == (verdict, cost), scenario


SWEEP_4096 = bundled.REFERENCE / "h100-sxm" / "sweeps" / "seq_len" / "mamba2-lm_seq_len-4096"


def test_a_busy_share_of_88_percent_is_host_limited_by_its_wait():
    """The H100 sweep's mamba2-lm at seq_len 4096: 88 % busy, once called GPU-bound on the busy share alone; the
    paper run of the same configuration waits 4.4 ms a step."""
    run = schema.read_run(SWEEP_4096)
    row = host_summary(run.kernels, run.info.harness.step_ms,
                       run.info.collectors.harness.host_launch_us).iloc[0]
    assert row["verdict"] == "host-limited"
    assert row["host_cost"] == ("15.6 ms a step (11.6 %) waiting for the host; launching its 1,051 kernels takes "
                                "the host 15.1 ms")
    paper = schema.read_run(bundled.REFERENCE / "h100-sxm" / "mamba2-lm")
    steady = host_summary(paper.kernels, paper.info.harness.step_ms,
                          paper.info.collectors.harness.host_launch_us).iloc[0]
    assert steady["verdict"] == "GPU-bound" and steady["host_cost"].startswith("4.4 ms a step (2.0 %)")


BEFORE_TIMING_PASS = Path(__file__).parent / "data" / "h100-suite-before-timing-pass"


def test_the_bundled_gpu_bound_paper_runs_wait_under_the_host_limited_share():
    """HOST_LIMITED_SHARE's reason: every paper run bundled when it was chosen (the H100's suite until 2026-11-27,
    tests/data/h100-suite-before-timing-pass) but graph-mamba waits 1.0-4.3 % of its step. (Of the H100 suite
    bundled since, mamba-vision waits 23.9 ms of a 70.9 ms median step, 34 %: host-bound.)"""
    from ssmprof.analysis.step.host import HOST_LIMITED_SHARE

    chosen_on = {gpu: bundled.runs(gpu) for gpu in bundled.GPUS}
    chosen_on["h100-sxm"] = [BEFORE_TIMING_PASS / name if name in bundled.paper_suite() else path
                             for path in chosen_on["h100-sxm"] for name in [path.name]]
    waits, verdicts = [], {}
    for gpu in bundled.GPUS:
        for path in chosen_on[gpu]:
            run = schema.read_run(path)
            row = host_summary(run.kernels, run.info.harness.step_ms,
                               run.info.collectors.harness.host_launch_us).iloc[0]
            verdicts[(gpu, path.name)] = row["verdict"]
            if path.name != "graph-mamba":
                waits.append(row["gpu_idle_ms"] / row["step_ms"])
    assert f"{100 * min(waits):.1f}-{100 * max(waits):.1f}" == "1.0-4.3" and max(waits) < HOST_LIMITED_SHARE
    assert {key for key, verdict in verdicts.items() if verdict != "GPU-bound"} == {("h100-sxm", "graph-mamba"),
                                                                                  ("h200", "graph-mamba")}


@pytest.mark.parametrize("step_range, verdict", [
    (None, "host-limited"),  # 10 ms of a 100 ms step waiting: past HOST_LIMITED_SHARE
    ((99.0, 101.0), "host-limited"),  # the low end of the wait, 9 ms, still past it
    ((92.0, 110.0), "GPU-bound"),  # the steps' own noise reaches down to 2 ms of wait: no finding
])
def test_the_host_is_blamed_only_outside_the_steps_noise(step_range, verdict):
    kernels = pd.DataFrame({"start_ns": [0, 45_000_000], "duration_ns": [45_000_000, 45_000_000]})
    row = host_summary(kernels, 100.0, None, step_range).iloc[0]
    assert row["gpu_idle_ms"] == pytest.approx(10.0) and row["verdict"] == verdict
    if step_range:
        low, high = step_range
        assert (row["gpu_idle_low_ms"], row["gpu_idle_high_ms"]) == pytest.approx((low - 90, high - 90))
