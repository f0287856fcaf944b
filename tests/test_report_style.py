"""The visual language's fixed facts: a workload's look is the same on every page, whichever runs a page holds;
a table's header is a human one and its cells carry their column's unit (issue #55)."""

import sys
from pathlib import Path

import pytest

from ssmprof.reports import style
from ssmprof.reports.render import HIDDEN, OVERVIEW_TITLES, TABLE_TITLES
from ssmprof.reports.sweep import TITLES as SWEEP_TITLES
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


@pytest.mark.parametrize(("column", "value", "unit", "shown"), [
    ("inst_per_shared_wavefront", 3.443, "", "3.44"),  # was "344.3 %": "shared" read as a share
    ("GEMM", 28.5, "", "28.5 %"),  # a suite's column per category: % of kernel time, was "28.5"
    ("layer_message_mib", 64, "", "64.0 MiB"),  # was "64"
    ("sm_clock_mhz", 1965.0, "", "1,965 MHz"),  # was "1,965"
    ("ms_high", 1.5, "", "1.50 ms"),  # the host's time by line: was "1.5"
    ("achieved", 4354.3, "GB/s", "4,354 GB/s"),  # in its row's unit, was "4,354" beside a unit column
    ("ceiling", 765.6, "TFLOP/s", "765.6 TFLOP/s"),
    ("throughput", 114550.2, "tokens/s", "114,550 tokens/s"),
    ("shared_pct", 63.4, "", "63.4 %"),
    ("time_share", 0.25, "", "25.0 %"),  # a share of 1 as %
    ("margin", 0.875, "", "0.875"),  # a score 0-1: its header says so
])
def test_a_number_carries_its_columns_unit(column, value, unit, shown):
    assert style.cell(column, value, unit) == shown


@pytest.mark.parametrize(("reading", "shown"), [
    ({"shared": False, "samples": 12, "note": None, "sm_clock_mhz": {"median": 1935.0}},
     "no (12 samples, SM clock 1,935 MHz)"),  # was the dict's repr, 'note': None and all
    ({"shared": True, "samples": 20, "shared_sample_fraction": 0.25, "max_other_processes": 2},
     "yes: up to 2 other processes in 25 % of 20 samples"),
    ({"shared": None}, "not sampled"),
])
def test_a_ranks_gpu_sharing_reads_as_words(reading, shown):
    assert style.cell("gpu_sharing", reading) == shown


def shown_columns() -> dict[str, list[str]]:
    """Section -> the columns its table shows on a page, from the reviewed snapshots' CSV headers (every column the
    code writes for the bundled runs and the host-time fixture), less the sections no page shows as a table (a
    chart draws them, or only the CSV holds them) and the columns a page leaves out."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from column_reference import read_headers

    titles = {"suite-": OVERVIEW_TITLES, "sweep-": SWEEP_TITLES}
    shown = {}
    for section, names in read_headers().items():
        prefix = next((p for p in titles if section.startswith(p)), "")
        key = section.removeprefix(prefix)
        if key in titles.get(prefix, TABLE_TITLES):
            shown[section] = [c for c in names if c not in HIDDEN.get(key, ())]
    return shown


@pytest.mark.parametrize(("section", "names"), sorted(shown_columns().items()))
def test_every_column_a_page_shows_has_a_human_header(section, names):
    """A column a table shows is named in `style.HEADERS`; without, the page showed its name with spaces for
    underscores (`gpu idle low ms`, `busbw gb per s max`)."""
    assert [c for c in names if c not in style.HEADERS] == []


def test_a_shipped_model_wears_no_registry_workloads_marker():
    """On the models page hf:bamba wore mamba2-lm's black circle and hf:nemotron-h hybrid's diamond (the first free
    places of the palette): a workload beyond the registry takes a shape of its own, whatever else the chart holds."""
    places = style.series_indices(["hf:bamba", "hf:nemotron-h"], workloads=True)
    symbols = [style.series_symbol(place) for place in places.values()]
    registry = {style.series_symbol(index) for index in range(len(style.WORKLOAD_ORDER))}
    assert len(set(symbols)) == 2 and not set(symbols) & registry, symbols
    mixed = style.series_indices(["mamba2-lm", "hf:bamba"], workloads=True)
    assert mixed["mamba2-lm"] == 0 and style.series_symbol(mixed["hf:bamba"]) not in registry
    assert sorted(style.series_indices(["a", "b"]).values()) == [0, 1]  # kernels of a sweep: the palette in order
