"""Findings in words, provenance, honest comparisons, one colour per category, the Perfetto trace, and the
run-level category rule: on the bundled runs (real) and on small frames built to provoke each case."""

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from known_work import analyzed, kernels, typed_run_info, unpadded
from typer.testing import CliRunner

from ssmprof import bundled, schema
from ssmprof.analysis.change.compare import COUNT_DIFFERS, ONLY_A, ONLY_B, SAME, compare_launches
from ssmprof.analysis.launches.categories import with_categories
from ssmprof.pipeline import reporting
from ssmprof.pipeline.loading import load_run
from ssmprof.reports import figures, style
from ssmprof.reports.trace import trace_events

runner = CliRunner()
H100 = {path.name: path for path in bundled.runs("h100-sxm")}
H200 = {path.name: path for path in bundled.runs("h200")}


@pytest.fixture(scope="module")
def suite(bundled_suites):
    """The bundled H100 suite, analyzed: (analyzed runs, overview)."""
    return bundled_suites["h100-sxm"]


@pytest.mark.parametrize(
    ("workload", "kind", "pattern"),
    [
        ("mamba2-lm", "where the time goes", r"GEMM 51 %, SSM scan 19 %"),
        ("mamba2-lm", "SSM kernels", r"SSM kernels take 19 % of kernel time .* memory-bound"),
        ("mamba2-lm", "host", r"^GPU-bound: kernels keep the GPU busy 98 % of the 218.5 ms step"),
        ("mamba2-lm", "counters", r"\(lent 83\.1 %, measured 16\.2 %; .*\) and passed the self-checks; .*\. GEMM "
                                  r"tensor work measured 1.005-1.014x 2MNK and 1.002-1.007x what whole tiles issue "
                                  r"\(forward and backward\)\.$"),
        ("graph-mamba", "counters", r"GEMM tensor work measured 1.346-1.350x 2MNK and 1.001-1.005x what whole tiles "
                                    r"issue \(forward and backward\): up to 26 % of it is tile padding of skinny "
                                    r"shapes\.$"),
        ("mamba2-lm", "headroom", r"most of it in SSM scan"),
        ("mamba-vision", "counters", r"the checks removed the counters of 3 launches .*Kernel "
                                     r"\[aten::convolution_backward\] \(backward, duration\)"),
        ("transformer", "counters", r"removed the counters of 2 launches \(0.4 % .*aten::fill_.* \(backward, "
                                    r"hit rate\)"),
        ("hybrid", "counters", r"removed the counters of 19 launches \(0.3 % .*vectorized_elementwise_kernel .*"
                               r"\(backward, hit rate\)"),
        ("mamba2-lm", "top kernels", r"nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NTT \(backward, GEMM, 15 % over 28"),
        ("transformer", "SSM kernels", r"^No SSM kernels in this run\.$"),
        ("graph-mamba", "host", r"^Host-bound: the GPU runs kernels 19 % of the 77.1 ms step"),
    ],
)
def test_findings_of_the_bundled_runs(suite, workload, kind, pattern):
    analyzed_runs, _ = suite
    summary = next(run.summary for run in analyzed_runs if run.info.workload.name == workload)
    found = summary.findings.set_index("kind")
    # a kind may hold several findings (graph-mamba's host: its busy share, then where the step synchronizes)
    assert any(re.search(pattern, finding) for finding in found.loc[[kind], "finding"]), found.loc[[kind], "finding"]
    assert set(found["anchor"]) <= set(summary.frames())  # every finding points at a table of the report


def test_every_titled_table_names_a_section_of_the_summary():
    """The report's table titles and hidden columns are keyed by section name (they are what a page iterates): a
    misspelt one would silently drop its table."""
    from dataclasses import fields

    from ssmprof.analysis.common.sections import Summary
    from ssmprof.reports.render import HIDDEN, TABLE_TITLES

    sections = {section.name for section in fields(Summary)}
    assert set(TABLE_TITLES) <= sections and set(HIDDEN) <= sections


def test_every_titled_suite_table_names_a_section_of_the_overview():
    """The suite page's table titles and its open multi-GPU tables are keyed by section name, as a run's are."""
    from dataclasses import fields

    from ssmprof.analysis.summaries.suite import SuiteOverview
    from ssmprof.reports.render import OVERVIEW_TITLES, PARALLEL_KEYS

    sections = {section.name for section in fields(SuiteOverview)}
    assert set(OVERVIEW_TITLES) <= sections and set(PARALLEL_KEYS) <= set(OVERVIEW_TITLES)


def test_findings_name_what_the_self_checks_removed():
    frame = kernels()
    frame["counter_status"] = ["measured", "measured", "rejected: duration", "measured", "unmatched"]
    info = typed_run_info(checks={"rejected": [{"kernel_name": "_chunk_scan_fwd_kernel", "phase": "forward",
                                                "check": "duration", "launches": 1, "time_ns": 10}]})
    from ssmprof.analysis.summaries.run import analyze
    text = analyze(schema.Run(info, analyzed(frame)), None).findings.set_index("kind").loc["counters", "finding"]
    assert "removed the counters of 1 launch (" in text and "_chunk_scan_fwd_kernel (forward, duration)" in text


def test_findings_and_notes_say_why_a_gemm_failed():
    """run.json's rejected rows carry the GEMM check's evidence (measured / 2MNK and the bound); n/a in runs
    written before it."""
    from ssmprof.analysis.summaries.run import analyze, warnings_for
    frame = kernels()
    frame["counter_status"] = ["measured", "measured", "rejected: GEMM FLOPs", "measured", "rejected: GEMM FLOPs"]
    rejected = [{"kernel_name": "Kernel2", "phase": "backward", "check": "GEMM FLOPs", "launches": 1, "time_ns": 20,
                 "gemm_ratio": 13.0, "gemm_ratio_max": 4.2105},
                {"kernel_name": "Kernel2", "phase": "forward", "check": "GEMM FLOPs", "launches": 1, "time_ns": 10}]
    run = schema.Run(typed_run_info(checks={"rejected": rejected}), analyzed(frame))
    summary = analyze(run, None)
    text = summary.findings.set_index("kind").loc["counters", "finding"]
    note = next(n for n in warnings_for(run, summary) if n.startswith("self-checks removed"))
    for words in (text, note):
        assert "Kernel2 (backward, GEMM FLOPs: measured/2MNK 13x, allowed 0.8-4.21x)" in words
        assert "Kernel2 (forward, GEMM FLOPs, measured/2MNK n/a)" in words


def test_suite_opens_with_findings_and_provenance(suite):
    analyzed_runs, overview = suite
    assert list(overview.findings["kind"]) == ["where the time goes", "SSM kernels", "host", "counters"]
    assert overview.findings.iloc[3]["finding"] == "Counters checked in all 7 runs. The self-checks removed " \
        "counters in mamba2-lm, hybrid, mamba-vision, graph-mamba, transformer, mamba1-lm, mamba3-lm (see each run's " \
        "findings)."
    assert "Host-bound: mamba-vision, graph-mamba" in overview.findings.iloc[2]["finding"]
    page = reporting.render_html(analyzed_runs, overview)
    assert page.index('class="findings"') < page.index("Plotly.newPlot(")
    assert "bundled reference run (h100-sxm/mamba2-lm)" in page
    assert "3.807e" not in page and "e+0" not in re.sub(r"<script.*?</script>", "", page, flags=re.S)
    assert "No tensor vs vector chart: no SSM kernels in this run." in page  # the transformer's, not empty


def test_lm_gather_is_memory_and_graph_gathers_stay(suite):
    analyzed_runs, overview = suite
    shares = overview.category_shares.set_index("workload")
    assert (shares.loc[["mamba2-lm", "mamba1-lm", "hybrid", "transformer"], "graph gather/scatter"] == 0).all()
    assert shares.loc["graph-mamba", "graph gather/scatter"] > 0


@pytest.mark.parametrize(
    ("launches", "category"),
    [
        ([("vectorized_gather_kernel", "aten::gather")], "memory"),  # an LM's embedding lookup
        ([("vectorized_gather_kernel", "aten::gather"), ("_scatter_gather_elementwise_kernel", "aten::scatter_add_")],
         "graph gather/scatter"),  # message passing: gathers and aggregates
        ([("vectorized_gather_kernel", "aten::gather"), ("indexFuncLargeIndex", "aten::index_add_")],
         "graph gather/scatter"),
    ],
)
def test_gather_is_graph_only_where_the_run_aggregates(launches, category):
    frame = pd.DataFrame({"kernel_name": [n for n, _ in launches], "launch_op": [o for _, o in launches]})
    assert with_categories(frame)["category"].iloc[0] == category


def two_runs():
    """A: 4 launches of gemm_a; B: 2 of gemm_a (twice as slow each) and 2 of gemm_b (same op and phase), plus a
    kernel with the same launches in both."""
    a = kernels()
    b = kernels()
    gemm = a.iloc[0].copy()
    a = pd.concat([a, pd.DataFrame([gemm] * 3)], ignore_index=True)
    moved = pd.DataFrame([gemm] * 3)
    moved["kernel_name"] = ["gemm_b", "gemm_b", b.iloc[0]["kernel_name"]]
    b = pd.concat([b, moved], ignore_index=True)
    b.loc[b["kernel_name"] == a.iloc[0]["kernel_name"], "duration_ns"] *= 2
    for frame in (a, b):
        frame["launch_idx"] = range(len(frame))
    return analyzed(a), analyzed(b), a.iloc[0]["kernel_name"]


def test_compare_shows_moved_launches_and_no_speedup_across_counts():
    a, b, gemm = two_runs()
    table = compare_launches(a, b).set_index("kernel_name")
    row = table.loc[gemm]
    assert (row["status"], row["launches_a"], row["launches_b"]) == (COUNT_DIFFERS, 4, 2)
    assert pd.isna(row["speedup"]) and row["per_launch_speedup"] == pytest.approx(0.5)
    assert row["moved_to"].startswith("-> gemm_b [grid") and "(+2 launches in B)" in row["moved_to"]
    assert table.loc["gemm_b", "status"] == ONLY_B and table.loc["gemm_b", "moved_to"].startswith(f"<- {gemm}")
    same = table.loc[table["status"] == SAME, "speedup"].tolist()
    assert len(same) == 4 and same == pytest.approx([1.0] * 4)
    assert ONLY_A not in set(table["status"])


def test_bundled_compare_never_divides_totals_across_launch_counts():
    text = unpadded(reporting.compare(H100["mamba2-lm"], H200["mamba2-lm"], "md"))
    gemm = "| nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NTT"
    row = next(line for line in text.splitlines() if line.startswith(gemm))
    cells = [c.strip() for c in row.split("|")]
    assert "launch count differs" in cells and "28" in cells and "14" in cells
    assert "1.41x" not in row and "0.70x" in row  # per launch: the H200 is slower on what is left
    assert "-> nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN" in row
    assert "unchecked" not in text  # both runs' counters passed the self-checks
    assert "## Step time: GPU busy and host wait" in text and "| A | NVIDIA H100 80GB HBM3 | 218.52 ms" in text


@pytest.mark.parametrize(("statuses_a", "statuses_b", "note"), [
    (["unchecked"], ["measured", "lent"], "counters of A are unchecked (a schema-1 run)"),
    (["measured"], ["unchecked", "unchecked"], "counters of B are unchecked (a schema-1 run)"),
    (["unchecked"], ["not collected"], None),  # B has no counters: no rates compare
    (["unchecked"], ["unchecked"], None),
    (["measured"], ["lent", "rejected: duration"], None),
])
def test_a_note_warns_where_only_one_run_has_checked_counters(statuses_a, statuses_b, note):
    from ssmprof.analysis.change.compare import counter_notes

    notes = counter_notes(pd.DataFrame({"counter_status": statuses_a}), pd.DataFrame({"counter_status": statuses_b}))
    assert (notes[0].startswith(note) if note else notes == [])


def colours_of(figure):
    """category -> marker colours used for it in a figure (by trace name or bar x)."""
    seen = {}
    for trace in figure.data:
        color = trace.marker.color if trace.marker is not None else None
        if trace.type == "bar" and isinstance(color, tuple | list):
            for category, c in zip(trace.x, color, strict=True):
                seen.setdefault(category, set()).add(c)
        else:
            name = (trace.name or "").split(": ")[-1]
            if name in style.CATEGORY_COLORS and color is not None:
                seen.setdefault(name, set()).add(color)
    return seen


def test_one_colour_per_category_on_every_chart(suite):
    analyzed_runs, overview = suite
    a, b = load_run(H100["hybrid"]), load_run(H200["hybrid"])
    rooflines = reporting.rooflines(a, b)
    from ssmprof.analysis.change.compare import compare_categories_launches
    charts = [figures.share_bars(overview.category_shares, ""),
              figures.compare_bars(compare_categories_launches(a.kernels, b.kernels), "A", "B"),
              figures.roofline_overlay({"A": rooflines[0], "B": rooflines[1]}, "")]
    for run in analyzed_runs:
        roofline = run.summary.roofline
        charts += [figures.breakdown_bars(run.summary.breakdown, ""),
                   *([figures.roofline_scatter(roofline, "")] if roofline is not None else [])]
    used = {}
    for chart in charts:
        for category, colours in colours_of(chart).items():
            used.setdefault(category, set()).update(colours)
    assert len(used) >= 8
    assert all(colours == {style.CATEGORY_COLORS[c]} for c, colours in used.items()), used
    assert len(set(style.CATEGORY_COLORS.values())) == len(style.CATEGORY_COLORS)
    assert not set(style.ROOF_COLORS) & set(style.CATEGORY_COLORS.values())
    overlay = charts[2]
    symbols = {t.legendgroup: t.marker.symbol for t in overlay.data if t.mode == "markers"}
    assert symbols["A"] != symbols["B"]


@pytest.mark.parametrize(
    ("value", "column", "text"),
    [(3.219e7, "time_ns", "32.19 ms"), (4210.0, "mean_ns", "4.2 us"), (38070.12, "throughput", "38,070"),
     (0.512, "share", "51.2 %"), (46.8, "dram_throughput_pct", "46.8 %"), (8.1e14, "flop_per_s", "810.0 TFLOP/s"),
     (1.4512, "speedup", "1.45x"), (float("nan"), "speedup", ""), (1051, "launches", "1,051"),
     (215.18, "step_ms", "215.18 ms"), (123456.0, "ncu_duration_ns", "123.5 us"), (1.0012, "flops_ratio", "1.001"),
     (11.53, "busy_past_step_pct", "11.5 %")],
)
def test_cells_are_formatted_with_units(value, column, text):
    assert style.cell(column, value) == text


def test_trace_is_valid_trace_event_json(tmp_path):
    from ssmprof.cli import app

    out = tmp_path / "trace.json"
    result = runner.invoke(app, ["report", str(H100["hybrid"]), "-o", str(tmp_path / "r.html"), "--trace", str(out)])
    assert result.exit_code == 0, result.output
    trace = json.loads(out.read_text())  # strict JSON: no NaN
    events = trace["traceEvents"]
    slices = [e for e in events if e["ph"] == "X" and e.get("cat") != "phase"]
    run = load_run(H100["hybrid"])
    assert len(slices) == len(run.kernels)
    for event in events:
        assert event["ph"] in ("X", "M") and isinstance(event["pid"], int) and isinstance(event["tid"], int)
        if event["ph"] == "X":
            assert event["ts"] >= 0 and event["dur"] >= 0 and isinstance(event["name"], str)
    threads = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert threads == {"phases"} | {f"stream {s}" for s in run.kernels["stream"].unique()}
    assert {e["name"] for e in events if e.get("cat") == "phase"} == set(run.kernels["phase"])
    args = slices[0]["args"]
    assert {"category", "phase", "verdict", "grid", "block", "counters"} <= set(args)


def test_trace_of_a_run_without_counters_has_no_verdicts():
    frame = analyzed(kernels())
    trace = trace_events([(typed_run_info(), frame)])
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] != "phase"]
    assert len(slices) == len(frame) and all("verdict" not in e["args"] for e in slices)
    assert json.dumps(trace, allow_nan=False)


@pytest.mark.parametrize(
    ("gpu", "workload", "cost"),
    [
        ("h100-sxm", "hybrid", "harness 6 s, Nsight Compute 103 s in 4 passes: 53 s (63 launches x 7 replays, "
                               "33.7 GiB restored per replay); 15 s (15 launches x 7 replays, 29.6 GiB restored "
                               "per replay); 13 s (12 launches x 7 replays, 31.1 GiB restored per replay); 22 s (32 "
                               "launches x 8 replays, 33.9 GiB restored per replay); outside the replayed iterations: "
                               "start-up 7 s, planning 8 s, build and warm-up 22 s, exit 2 s; 3 passes started ahead, "
                               "82 s of start-up, imports and waiting overlapped with the pass before; host 15.0 us "
                               "per tiny launch"),
        ("h200", "hybrid", "harness 13 s, Nsight Compute 82 s in 3 passes: 44 s (71 launches x 7 replays, 33.7 GiB "
                           "restored per replay); 20 s (35 launches x 7 replays, 30.2 GiB restored per replay); 18 s "
                           "(33 launches x 8 replays, 33.7 GiB restored per replay); outside the replayed iterations: "
                           "start-up 4 s, planning 6 s, build and warm-up 16 s, exit 1 s; 2 passes started ahead, 64 s "
                           "of start-up, imports and waiting overlapped with the pass before; host 11.4 us per tiny "
                           "launch"),
    ],
)
def test_provenance_says_what_profiling_cost(gpu, workload, cost):
    from ssmprof import bundled
    from ssmprof.analysis.findings.run import provenance
    from ssmprof.pipeline.loading import load_run

    info = load_run(bundled.REFERENCE / gpu / workload).info
    assert provenance(info, "bundled").set_index("item").loc["profiling cost", "value"] == cost
    info.collectors.harness.host_launch_us = 6.14
    assert provenance(info, "bundled").set_index("item").loc["profiling cost", "value"] == \
        cost.split("; host")[0] + "; host 6.1 us per tiny launch"


def test_counters_finding_says_what_the_second_pass_skipped():
    """The H200 runs were profiled with pass 2 skipping further problems under 0.05 % of kernel time each."""
    analyzed_runs, _ = reporting.analyze_runs([H200["graph-mamba"]])
    finding = analyzed_runs[0].summary.findings.set_index("kind").loc["counters", "finding"]
    assert "; 79 launches (0.65 % of kernel time) of problems under 0.05 % of it each were not profiled (the " \
           "second pass skips them). GEMM tensor work" in finding


def test_a_run_without_counters_says_so_and_claims_no_checks():
    """A run profiled with --counters none (tests/data/traced-iteration-h100: the timing pass's measurements)."""
    analyzed_runs, _ = reporting.analyze_runs([Path(__file__).parent / "data" / "traced-iteration-h100" / "mamba2-lm"])
    findings = analyzed_runs[0].summary.findings.set_index("kind")
    assert findings.loc["counters", "finding"] == "No counters in this run (timeline only): no rates, roofline, " \
        "limiters or tensor/vector classes."
    assert analyzed_runs[0].summary.roofline is None
    from ssmprof.analysis.findings.run import provenance

    info = analyzed_runs[0].info
    assert provenance(info, "bundled").set_index("item").loc["counters", "value"] == \
        "none (timeline only: --counters none)"


def test_counters_finding_names_profiled_launches_that_found_no_timeline_launch():
    """A profiled launch configuration the join could not place is a defect signal: the coverage finding names it,
    and says nothing where every one was placed."""
    from ssmprof.analysis.summaries.run import analyze
    unplaced = ["_chunk_scan_fwd_kernel grid 256x66x1 block 384x1x1 smem 1024"]
    counters = {"mode": "sampled", "tool": "ncu", "profiled_not_placed": unplaced,
                "stalls": {"profiled_not_placed": ["nvjet_hsh_256x128 grid 1x1x1 block 128x1x1 smem 0"]}}
    info = typed_run_info(checks={"rejected": []}, collectors={"counters": counters})
    text = analyze(schema.Run(info, analyzed()), None).findings.set_index("kind").loc["counters", "finding"]
    assert "; 2 profiled launch configurations found no timeline launch to sit on, their counters unused " \
           f"({unplaced[0]}, nvjet_hsh_256x128 grid 1x1x1 block 128x1x1 smem 0)." in text
    placed = typed_run_info(checks={"rejected": []}, collectors={"counters": {"mode": "sampled", "tool": "ncu"}})
    text = analyze(schema.Run(placed, analyzed()), None).findings.set_index("kind").loc["counters", "finding"]
    assert "found no timeline launch" not in text


def test_the_ssm_limiter_headline_adds_up_by_unit_not_by_unit_and_percent():
    """Shared memory at three % of peak is one unit: 50 % of the time, ahead of DRAM's 27 % (it ranked first while
    each % was a bucket of its own)."""
    from ssmprof.analysis.common.sections import Summary
    from ssmprof.analysis.findings.run import _ssm

    limits = pd.DataFrame({"limiter": ["shared memory at 90.1 % of peak", "shared memory at 80.0 % of peak",
                                       "shared memory at 70.0 % of peak", "DRAM bandwidth", "tensor pipe"],
                           "limiter_name": ["shared memory"] * 3 + ["DRAM bandwidth", "tensor pipe"],
                           "time_ms": [20.0, 15.0, 15.0, 27.0, 23.0]})
    unread = pd.DataFrame()
    summary = Summary(breakdown=unread, top_kernels=unread, counter_checks=unread, profiled_iteration=unread,
                      host=unread, by_category=pd.DataFrame({"category": ["SSM scan"], "share": [0.2],
                                                             "time_ms": [100.0]}),
                      caches=pd.DataFrame({"category": ["SSM scan"], "dram_throughput_pct": [float("nan")],
                                           "l2_hit_rate_pct": [60.0]}),
                      limiters_ssm=limits)
    finding = _ssm(summary)[0].finding
    assert "what limits them (share of the time of the 5 largest): 50 % shared memory, 27 % DRAM bandwidth, " \
           "23 % tensor pipe" in finding


GOLDEN = Path(__file__).parent / "data" / "golden-bundled-runs"
WORDS_OF_FINDINGS = sorted([*GOLDEN.glob("*/*findings.csv"), *GOLDEN.glob("*/compare.md")])


@pytest.mark.parametrize("path", WORDS_OF_FINDINGS, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_no_finding_of_a_bundled_page_says_nan(path):
    """Every finding of the reference pages (their reviewed snapshots): no "nan" where a number is missing (the
    parallel page once said "DRAM throughput nan % of peak" and "Counters checked in all 0 runs")."""
    text = path.read_text()
    assert not re.search(r"\bnan\b", text, re.IGNORECASE) and "in all 0 runs" not in text


@pytest.mark.parametrize(("says", "never"), [
    ("on CPU, TP=2 DP=1 (2 processes)", "(2 GPUs)"),  # the title: gloo processes, no GPU among them
    ("- device: CPU (no GPU: PyTorch's CPU ops, one gloo process a rank)", "SMs"),  # no SM count of a CPU
    ("The SSM ops ran as the pure-PyTorch reference on the CPU (ssd: torch-reference", "No SSM kernels in this run"),
    ("Per rank, ops keep the rank's CPU busy", "keep the GPU busy"),
])
def test_a_cpu_run_says_cpu_where_it_is_a_cpu(says, never):
    """A CPU-only user's profile (--device cpu --tp 2, gloo ranks): the page says CPU and processes, not GPUs, SMs
    or missing SSM kernels (the reference ops are PyTorch's, never named as SSM kernels)."""
    text = reporting.report([Path(__file__).parent / "data" / "tp2-cpu-gloo-mamba2-lm-sp"], "md")
    assert says in text and never not in text
