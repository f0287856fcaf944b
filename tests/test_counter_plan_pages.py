"""The counter plan of families at grid bins on the run page, on a real run: hf:granite-4.0-hybrid small measured on
an H100 with that plan (tests/data/counter-plan-h100/granite-small, its README says how). Its counters finding says
what the lending by grid covers, its held-out error and what the passes cost against their prediction; its page
shows the held-out check per family and the cost per pass, in human headers with units. A bundled run recorded
before the plan keeps its counters finding word for word as its reviewed snapshot has it."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from ssmprof import load
from ssmprof.analysis.findings.run import findings
from ssmprof.analysis.trust.lent_by_grid import ALL_PASSES, counter_pass_costs, lent_families
from ssmprof.pipeline import reporting
from ssmprof.reports import render

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_page_text import NAN, read, unit_faults  # noqa: E402 -- the page rules, read as test_page_text reads them

DATA = Path(__file__).resolve().parent / "data"
GRANITE = DATA / "counter-plan-h100" / "granite-small"
BEFORE_PLAN = DATA / "h100-suite-before-timing-pass"  # the H100 paper suite bundled 2026-11-24 to 2026-11-27


@pytest.fixture(scope="module")
def granite():
    return load(GRANITE)


def counters_text(summary, info) -> str:
    """The counters finding's sentence of `summary` (findings computed again from `info`)."""
    table = findings(summary, info)
    return table.loc[table["kind"] == "counters", "finding"].iloc[0]


@pytest.mark.parametrize("clause", [
    "50 families (56.8 % of kernel time) profiled at grid bins lend to 3,774 launches, their work counters scaled by "
    "grid",
    "held-out error of lent DRAM bytes: median 0.8 % over 19 families (worst family 210 %, "
    "vectorized_elementwise_kernel, 5.3 % of kernel time); families of 5.3 % of kernel time lent DRAM bytes off by "
    "more than 50 % on their held-out launch",
    "counters took 3 min 38 s, predicted 2 min 31 s (-31 %)",
])
def test_the_counters_finding_says_the_plan(granite, clause):
    assert clause in counters_text(granite.summary, granite.info)


@pytest.mark.parametrize(("run", "warned"), [
    # a 1,024-block fill held in L2 under ncu lent 0 DRAM bytes to fills of 8-16k blocks (100,903 %)
    ("tests/data/counter-cost-moe-h100/qwen3-next-small", "families of 14.0 % of kernel time"),
    ("tests/data/counter-cost-moe-h100/granite-small", "families of 12.3 % of kernel time"),
    ("ssmprof/reference/h100-sxm/graph-mamba", "families of 2.1 % of kernel time"),
    ("ssmprof/reference/h100-sxm/parallel/mamba1-lm-tp4", None),  # its one family off by 41 %
])
def test_the_finding_names_the_time_whose_lent_dram_bytes_the_held_out_check_doubts(run, warned):
    run = load(Path(__file__).parents[1] / run)
    text = counters_text(run.summary, run.info)
    clause = "lent DRAM bytes off by more than 50 % on their held-out launch"
    assert (f"{warned} {clause}" in text) if warned else (clause not in text)


@pytest.mark.parametrize("absent", ["found their timeline launch", "budget", "left out", "found no timeline launch"])
def test_the_finding_says_nothing_the_run_did_not_meet(granite, absent):
    """Every report row found its launch (grid_match_pct 100) and no --budget was given: no clause for either."""
    assert absent not in counters_text(granite.summary, granite.info)


@pytest.mark.parametrize(("changes", "clause"), [
    ({"grid_match_pct": 97.25}, "; 97.2 % of the counter passes' report rows found their timeline launch"),
    ({"budget_s": 180.0, "left_out": "the warp-stall pass"}, "; within the 180 s budget it left out the warp-stall "
                                                             "pass."),
    ({"left_out": "the warp-stall pass"}, "; it left out the warp-stall pass."),
    ({"predicted_s": 30.0, "wall_s": 25.0}, "counters took 25 s, predicted 30 s (+20 %)"),
])
def test_a_clause_where_its_data_says_so(granite, changes, clause):
    """The clauses the measured run has no data for, on its run.json with that data planted."""
    counters = granite.info.collectors.counters.model_copy(update=changes)
    info = granite.info.model_copy(update={"collectors": granite.info.collectors.model_copy(
        update={"counters": counters})})
    assert clause in counters_text(granite.summary, info)


@pytest.mark.parametrize(("position", "expected"), [
    (0, {"kernel_name": "vectorized_elementwise_kernel", "configurations": 5, "launches": 347,
         "time_share": 0.139159, "measured_launches": 3, "lent_launches": 344, "held_out_launches": 1,
         "dram_error_pct": 16.0406, "l2_error_pct": 1.38331, "inst_error_pct": 0.0}),
    (1, {"kernel_name": "unrolled_elementwise_kernel", "configurations": 81, "launches": 292,
         "time_share": 0.0565339, "measured_launches": 6, "lent_launches": 286, "held_out_launches": 4,
         "dram_error_pct": 21.6998, "l2_error_pct": 15.4664, "inst_error_pct": 0.0}),
    (2, {"kernel_name": "vectorized_elementwise_kernel", "configurations": 11, "launches": 369,
         "measured_launches": 3, "lent_launches": 366, "held_out_launches": 1, "dram_error_pct": 210.045}),
    (7, {"kernel_name": "vectorized_elementwise_kernel", "configurations": 1, "launches": 2, "measured_launches": 1,
         "lent_launches": 1, "held_out_launches": 0, "dram_error_pct": math.nan, "l2_error_pct": math.nan,
         "inst_error_pct": math.nan}),
])
def test_the_held_out_table_rows(granite, position, expected):
    row = granite.summary.lent_by_grid.iloc[position]
    for column, value in expected.items():
        if isinstance(value, float):
            assert row[column] == pytest.approx(value, rel=1e-5, nan_ok=True), column
        else:
            assert row[column] == value, column


def test_the_held_out_table_is_every_family_by_time_share(granite):
    table = lent_families(granite.info.collectors.counters)
    assert len(table) == len(granite.info.collectors.counters.families) == 50
    assert table["time_share"].is_monotonic_decreasing
    assert table["lent_launches"].sum() == 3774
    # the family in words less its kernel's name: its instantiation, then its tile
    assert table["family"].iloc[0] == ("[at native vectorized_elementwise_kernel 4 at native CUDAFunctor_add float "
                                       "std array 3] block/smem 128 1 1 0")
    assert table.loc[table["held_out_launches"] == 0, "dram_error_pct"].isna().all()


@pytest.mark.parametrize(("counter_pass", "launches", "predicted_s", "measured_s", "error_pct"), [
    ("1", 76, 47.1346, 57.9324, -18.6387),
    ("2", 47, 23.0661, 35.0195, -34.1335),
    ("7", 37, 19.6412, 31.0655, -36.7749),
    (ALL_PASSES, 262, 151.408, 218.113, -30.5825),
])
def test_the_pass_cost_table_rows(granite, counter_pass, launches, predicted_s, measured_s, error_pct):
    table = granite.summary.counter_pass_costs
    row = table.loc[table["counter_pass"] == counter_pass].iloc[0]
    assert row["launches_profiled"] == launches
    assert (row["predicted_s"], row["measured_s"], row["prediction_error_pct"]) == pytest.approx(
        (predicted_s, measured_s, error_pct), rel=1e-5)


@pytest.mark.parametrize("fmt", ["html", "md"])
def test_the_page_shows_both_tables_in_words_and_units(fmt):
    """Both tables under their titles, every header a human one, every number with its unit, no nan."""
    analyzed, overview = reporting.analyze_runs([GRANITE])
    page = render.render_html(analyzed, overview) if fmt == "html" else render.render_markdown(analyzed, overview)
    text, tables = read(page, fmt)
    assert "Lent by grid: the held-out check" in text
    assert "The counter plan's cost" in text
    heads = {tuple(head): rows for head, rows in tables}
    families = heads[("Kernel", "Family: instantiation and tile", "Launch configurations", "Launches",
                      "Share of time", "Launches measured", "Launches lent", "Launches held out",
                      "Held-out error, DRAM bytes", "Held-out error, L2 bytes", "Held-out error, instructions")]
    assert len(families) == 50
    assert families[2][:3] + families[2][4:9] == ["vectorized_elementwise_kernel", "[at native "
                                                  "vectorized_elementwise_kernel 4 at native FillFunctor float std "
                                                  "array 1] block/smem 128 1 1 0", "11", "5.3 %", "3", "366", "1",
                                                  "210.0 %"]
    passes = heads[("Pass", "Launches profiled", "Wall time predicted", "Wall time measured", "Prediction's error")]
    assert passes[0] == ["1", "76", "47.1 s", "57.9 s", "-18.6 %"] and len(passes) == 8
    assert passes[-1] == ["all", "262", "151.4 s", "218.1 s", "-30.6 %"]
    assert sorted({fault for head, rows in tables for fault in unit_faults(head, rows)}) == []
    assert not NAN.search(text)


@pytest.mark.parametrize("workload", ["mamba2-lm", "graph-mamba"])
def test_a_run_before_the_plan_keeps_its_counters_text(workload):
    """An H100 run of the paper suite bundled until 2026-11-27, before the plan (graph-mamba's names the profiled
    configurations that found no launch), has no families, predictions, grid match or budget: its counters finding
    is its reviewed snapshot's (kept beside it, `counters-finding.txt`), word for word, and it has neither table."""
    folder = BEFORE_PLAN / workload
    run = load(folder)
    assert counters_text(run.summary, run.info) == (folder / "counters-finding.txt").read_text().rstrip("\n")
    assert run.summary.lent_by_grid is None and run.summary.counter_pass_costs is None
    assert counter_pass_costs(run.info.collectors.counters) is None
