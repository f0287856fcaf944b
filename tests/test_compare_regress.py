"""compare, baseline and regress on run directories: matching, noise-aware gating, and bad input."""

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from known_work import analyzed, kernels, run_info, typed_run_info
from typer.testing import CliRunner

from ssmprof import schema
from ssmprof.analysis.change.compare import compare_categories, compare_kernels

runner = CliRunner()


def jittered(seed, scale=None):
    """The known-work kernels with +-1 % timing noise; `scale` multiplies chosen kernels' durations."""
    frame = kernels()
    noise = np.random.default_rng(seed).uniform(0.99, 1.01, len(frame))
    frame["duration_ns"] = (frame["duration_ns"] * noise).round().astype("int64")
    frame["ncu_duration_ns"] = frame["ncu_duration_ns"] * noise
    for name, factor in (scale or {}).items():
        hit = frame["kernel_name"] == name
        frame.loc[hit, "duration_ns"] = (frame.loc[hit, "duration_ns"] * factor).round().astype("int64")
        frame.loc[hit, "ncu_duration_ns"] = frame.loc[hit, "ncu_duration_ns"] * factor
    return frame


def test_compare_matches_kernels_and_reports_the_unmatched():
    a = kernels()
    b = kernels().assign(duration_ns=lambda k: k["duration_ns"] // 2)
    b.loc[len(b)] = b.iloc[0].copy()
    b.loc[len(b) - 1, ["kernel_name", "launch_idx"]] = ["new_kernel_only_in_b", 99]
    a, b = analyzed(a), analyzed(b)
    table = compare_kernels(a, b)
    assert table.set_index("kernel_name").loc["_chunk_scan_fwd_kernel", "speedup"] == pytest.approx(2.0)
    assert table.set_index("kernel_name").loc["new_kernel_only_in_b", "match"] == "only_b"
    assert (table["match"] == "both").sum() == 5
    categories = compare_categories(a, b).set_index("category")
    assert categories.loc["SSM scan", "speedup"] == pytest.approx(2.0, rel=1e-3)


def test_compare_cli_and_workload_mismatch(tmp_path, monkeypatch):
    from ssmprof.cli import app

    a = schema.write_run(tmp_path / "a", schema.new_run_info(run_info()), kernels())
    b = schema.write_run(tmp_path / "b", schema.new_run_info(run_info(gpu="NVIDIA H200")), jittered(1))
    result = runner.invoke(app, ["compare", str(a), str(b)])
    assert result.exit_code == 0, result.output
    assert "GPUs: NVIDIA H100 80GB HBM3 vs NVIDIA H200" in result.output and "## By category" in result.output
    monkeypatch.chdir(tmp_path)  # HTML without -o goes to compare.html, not stdout
    html = runner.invoke(app, ["compare", str(a), str(b), "--format", "html"])
    assert html.exit_code == 0 and "written: compare.html" in html.output
    assert "Roofline: both runs, each on its own GPU" in Path("compare.html").read_text()
    other = schema.write_run(tmp_path / "c", schema.new_run_info(run_info(workload="hybrid")), kernels())
    result = runner.invoke(app, ["compare", str(a), str(other)])
    assert result.exit_code == 1 and "different workloads (mamba2-lm vs hybrid)" in result.output
    assert "Traceback" not in result.output


@pytest.fixture
def baseline_file(tmp_path):
    from ssmprof.cli import app

    runs = [schema.write_run(tmp_path / f"base{i}", schema.new_run_info(run_info()), jittered(i)) for i in range(3)]
    path = tmp_path / "baseline.json"
    result = runner.invoke(app, ["baseline", *map(str, runs), "-o", str(path)])
    assert result.exit_code == 0, result.output
    return path


def test_no_false_alarms_on_reruns(tmp_path, baseline_file):
    from ssmprof.cli import app

    for seed in range(10, 15):  # five reruns of the same configuration
        run = schema.write_run(tmp_path / f"rerun{seed}", schema.new_run_info(run_info()), jittered(seed))
        result = runner.invoke(app, ["regress", str(run), "--baseline", str(baseline_file)])
        assert result.exit_code == 0, result.output
        assert "PASS" in result.output


def test_planted_regression_is_caught(tmp_path, baseline_file):
    from ssmprof.cli import app

    slow = jittered(20, {"_chunk_scan_fwd_kernel": 1.3})
    run = schema.write_run(tmp_path / "slow", schema.new_run_info(run_info()), slow)
    junit = tmp_path / "gate.xml"
    result = runner.invoke(app, ["regress", str(run), "--baseline", str(baseline_file), "--junit", str(junit)])
    assert result.exit_code == 1
    assert "FAIL" in result.output and "_chunk_scan_fwd_kernel [forward" in result.output
    suite = ET.parse(junit).getroot().find("testsuite")
    failed = {(case.get("classname").split(" ")[0].rstrip(":"), case.get("name")) for case in suite.iter("testcase")
              if case.find("failure") is not None}
    # slower, so fewer FLOP/s too; and its category (a single kernel) and phase
    assert failed == {("kernel", "time_per_launch_ns"), ("efficiency", "flop_per_s"), ("category", "time_ns"),
                      ("phase", "time_ns")}
    assert int(suite.get("failures")) == 4


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not valid JSON"),
        ('{"version": 2, "rows": [{"kernel_name": "x"}]}',
         "is not a valid baseline: lacks: workload, source, rows.0.scope"),
        ('{"version": 1, "rows": []}', "has version 1, this ssmprof reads 2: rebuild it from its runs with "
                                       "`ssmprof baseline"),
        ("[1, 2]", "is not a JSON object"),
    ],
)
def test_corrupt_baseline_is_one_line(tmp_path, content, message):
    from ssmprof.cli import app

    run = schema.write_run(tmp_path / "run", schema.new_run_info(run_info()), kernels())
    bad = tmp_path / "baseline.json"
    bad.write_text(content)
    result = runner.invoke(app, ["regress", str(run), "--baseline", str(bad)])
    assert result.exit_code == 1 and message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_baseline_needs_repeats(tmp_path):
    from ssmprof.cli import app

    run = schema.write_run(tmp_path / "run", schema.new_run_info(run_info()), kernels())
    result = runner.invoke(app, ["baseline", str(run), "-o", str(tmp_path / "b.json")])
    assert result.exit_code == 1 and "at least 2 runs" in result.output


def test_per_kernel_rates_are_time_weighted_over_launches_with_counters():
    from ssmprof.analysis.change.compare import per_kernel

    frame = analyzed()
    table = per_kernel(frame).set_index("kernel_name")
    # the launch without counters has no rates (not 0 %), and is not averaged into anything
    assert np.isnan(table.loc["_chunk_state_fwd_kernel", "dram_throughput_pct"])
    assert np.isnan(table.loc["_chunk_state_fwd_kernel", "flop_per_s"])
    assert table.loc["_chunk_scan_fwd_kernel", "l2_hit_rate_pct"] == 80.0


@pytest.mark.parametrize(
    ("launch_us", "noted"),
    [((6.0, 6.3), False), ((6.0, 7.2), True), ((None, 7.2), False)],  # within 10 %; 20 % apart; not recorded
)
def test_compare_says_when_the_hosts_launch_at_different_rates(launch_us, noted):
    """Two hosts of one CPU description gave graph-mamba's host-bound step 66.4 and 50.5 ms: the CPU name
    cannot tell them apart, the measured launch cost can."""
    from ssmprof.analysis.change.compare import check_comparable

    infos = [typed_run_info(collectors={"harness": {"host_launch_us": us}}) for us in launch_us]
    notes = check_comparable(*infos)
    assert any(note.startswith("the hosts launch kernels at different rates") for note in notes) == noted
