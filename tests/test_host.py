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
