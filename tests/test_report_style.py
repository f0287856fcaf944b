"""The visual language's fixed facts: a workload's look is the same on every page, whichever runs a page holds."""

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
