"""The visual language's fixed facts: a workload's look is the same on every page, whichever runs a page holds."""

import pytest

from ssmprof.reports import style
from ssmprof.workloads.registry import WORKLOADS


def test_workload_order_is_the_registrys():
    """style may not import the registry (reports/ sits below workloads/ in the layers): the two lists agree."""
    assert tuple(WORKLOADS) == style.WORKLOAD_ORDER
    assert len(style.SERIES_COLORS) >= len(WORKLOADS) and len(style.WORKLOAD_SYMBOLS) >= len(WORKLOADS)


def test_a_workload_keeps_its_look_whatever_else_a_page_holds():
    h100 = style.series_indices(["hybrid", "mamba2-lm", "graph-mamba"])
    h200 = style.series_indices(["mamba2-lm", "gdn-lm", "mamba2-lm tp2x dp1", "_chunk_scan_fwd_kernel"])
    assert h100["mamba2-lm"] == h200["mamba2-lm"] == h200["mamba2-lm tp2x dp1"] == 0
    assert h200["_chunk_scan_fwd_kernel"] not in (0, style.WORKLOAD_ORDER.index("gdn-lm"))  # a free place
    kernels = style.series_indices(["a", "b", "c"])
    assert sorted(kernels.values()) == [0, 1, 2]  # series of no workload: in order of appearance


@pytest.mark.parametrize(("column", "value", "shown"), [
    ("ceiling_gb_s", 3275.44, "3,275.4 GB/s"),  # was "3,275.4 s": a rate read as seconds
    ("dram_gb_s", 3350.0, "3,350.0 GB/s"),
    ("busbw_gb_per_s_max", 380.21, "380.2 GB/s"),  # was "380": no unit
    ("dram_bytes_per_s", 3.2e12, "3.2 TB/s"),  # was "3.2 TB": an amount
    ("inst_per_s", 1.0e12, "1.0 Tinst/s"),  # was "1,000,000,000,000"
    ("launches_per_s", 2000.0, "2,000.0 launches/s"),
    ("profile_wall_s", 33.2, "33.2 s"),  # seconds stay seconds
    ("flop_per_s", 3.0e14, "300.0 TFLOP/s"),
    ("dram_bytes", 1.0e9, "1.0 GB"),
])
def test_a_rate_carries_its_unit(column, value, shown):
    assert style.cell(column, value) == shown
