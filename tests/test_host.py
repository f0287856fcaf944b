"""GPU busy time and host-boundness: table-driven on constructed timelines, then on the bundled runs."""

import pandas as pd
import pytest

from ssmprof import bundled, schema
from ssmprof.analysis.host import busy_ns, host_summary


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
        row = host_summary(run.kernels, run.info["harness"]["step_ms"]).iloc[0]
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
    from ssmprof.analysis.host import slow_iteration

    excess = slow_iteration(busy_ms, step_ms)
    assert (excess == pytest.approx(slow)) if slow else excess is None, scenario


def test_only_the_h200_mamba1_lm_run_has_a_slow_profiled_iteration():
    """Of the twelve bundled paper-suite runs (where SLOW_ITERATION was chosen), the H200 mamba1-lm's profiled
    iteration was 4.6 % busier than its median step, and comparing it says so; the runs bundled after the choice
    (H200 mamba3-lm and gdn-lm) read 0.99, steady."""
    from ssmprof.analysis.host import slow_iteration
    from ssmprof.pipeline import reporting

    shares = {(gpu, run.name): busy_ns(r.kernels) / 1e6 / r.info["harness"]["step_ms"] for gpu in bundled.GPUS
              for run in bundled.runs(gpu) for r in [schema.read_run(run)]}
    paper = [share for (gpu, name), share in shares.items()
             if name in bundled.paper_suite() and (gpu, name) != ("h200", "mamba1-lm")]
    assert len(paper) == 11 and f"{min(paper):.2f}-{max(paper):.2f}" == "0.29-0.99"  # SLOW_ITERATION's comment
    later = [share for (gpu, name), share in shares.items() if name not in bundled.paper_suite()]
    assert f"{min(later):.2f}-{max(later):.2f}" == "0.99-0.99"
    slow = {key: round(100 * excess, 1) for key, share in shares.items()
            if (excess := slow_iteration(100 * share, 100)) is not None}
    assert slow == {("h200", "mamba1-lm"): 4.6}
    text = reporting.compare(bundled.REFERENCE / "h100-sxm" / "mamba1-lm", bundled.REFERENCE / "h200" / "mamba1-lm")
    assert "the profiled iteration of B kept the GPU busy 245.3 ms, 4.6 % past its median step (234.6 ms)" in text


def test_the_slow_run_s_own_report_warns_and_a_steady_one_does_not():
    from ssmprof.analysis.summary import warnings_for
    from ssmprof.pipeline.loading import load_run

    slow = warnings_for(load_run(bundled.REFERENCE / "h200" / "mamba1-lm"))
    steady = warnings_for(load_run(bundled.REFERENCE / "h100-sxm" / "mamba1-lm"))
    assert "the profiled iteration kept the GPU busy 245.3 ms, 4.6 % past its median step (234.6 ms): its kernel " \
           "times describe a slower step than the timed ones" in slow
    assert not any("slower step" in note for note in steady)
