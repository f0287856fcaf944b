"""The host sampler on an H100 (tests/data/host-time-h100, README there): what `profile` says of where a host-bound
step's host time goes, measured on the GPU host and read back here.

Checked: on host-bound steps (a training script of our own over mamba-ssm's MambaLMHeadModel, graph-mamba paper) the
host finding names the top lines with ms and % and at least 90 % of the host's time is attributed; on a GPU-paced
step (mamba2-lm paper) the sampler's cost is at most 3 % at the top of its interval; a planted collection is found
at its line within 10 % of what the script timed, and the planted busy-wait and sync together at theirs; a TP=2 run
gives each rank's host and placement and the lines of the late rank's excess; host-paced steps extended until
their median is pinned down; hf:granite-4.0-hybrid's synchronizing calls get their cost in ms of the step."""

import json
import statistics
from pathlib import Path

import pytest

import ssmprof
from ssmprof.analysis.trust.noise import steady
from ssmprof.schema import GARBAGE_COLLECTION

DATA = Path(__file__).parent / "data" / "host-time-h100"
SCRIPT = "examples/train_mamba_ssm_lm.py"
WARMUP, TIMED = 3, 10  # the script run's stages before the sampled ones: its sampled steps are every second after


def load(name: str):
    return ssmprof.load(DATA / name)


@pytest.mark.parametrize("name", ["script-host-bound", "graph-mamba-paper"])
def test_a_host_bound_step_is_attributed_by_line(name):
    summary = load(name).summary
    assert summary.host["verdict"].iloc[0] == "host-bound"
    assert summary.host_time["attributed_pct"].iloc[0] >= 90
    finding = summary.findings.set_index("status").loc["host-bound", "finding"]
    top = summary.host_sites.iloc[0]
    assert f"by line: {top['site']} ({top['category']}) {top['ms']:.1f} ms ({top['host_pct']:.0f} %)" in finding
    assert "sampling cost the step" in finding


def test_the_sampler_costs_a_gpu_paced_step_at_most_3_percent():
    row = load("mamba2-lm-paper").summary.host_time.iloc[0]
    assert row["overhead_high_pct"] <= 3.0, row


def _planted():
    """(what the sampler charged each planted line a sampled step, what the script timed there a sampled step)."""
    run = load("script-planted")
    lines = [json.loads(line) for line in (DATA / "script-planted" / "planted.jsonl").read_text().splitlines()]
    sampled = [lines[WARMUP + TIMED + 2 * i + 1] for i in range(len(run.info.harness.host_time.sampled_steps_ms))]
    truth = {key: statistics.mean(step[key] for step in sampled) for key in ("delay_ms", "sync_ms", "gc_ms")}
    sites = run.summary.host_sites
    at = {line: sites.loc[sites["site"] == f"{SCRIPT}:{line} in <module>"] for line in (51, 55, 57, 60)}
    return at, truth


def test_a_planted_collection_is_found_at_its_line():
    at, truth = _planted()
    found = at[60].loc[at[60]["category"] == GARBAGE_COLLECTION, "ms"].sum()
    assert found == pytest.approx(truth["gc_ms"], rel=0.10)


def test_the_planted_busy_wait_and_sync_are_found_at_their_lines_together():
    """Their lines (the busy-wait, the GPU work the sync waits for, the sync) hold the two costs within 10 %; the
    split between them does not (the busy-wait's line -26 %, the sync's +19 %: README)."""
    at, truth = _planted()
    found = sum(at[line]["ms"].sum() for line in (51, 55, 57))
    assert found == pytest.approx(truth["delay_ms"] + truth["sync_ms"], rel=0.10)


def test_each_rank_has_its_host_and_placement_and_the_late_rank_its_excess():
    summary = load("tp2-mamba2-lm-paper").summary
    hosts = summary.rank_hosts
    assert list(hosts["rank"]) == [0, 1]
    assert hosts[["host_ms", "cpus", "torch_threads", "switches_per_step", "migrations_per_step"]].notna().all().all()
    assert summary.late_rank_sites["excess_share"].iloc[-1] >= 0.8
    late = summary.findings.set_index("kind").loc["late rank", "finding"]
    assert "Sampled, the ranks' hosts spend" in late


def test_host_paced_steps_are_timed_until_their_median_is_pinned_down():
    harness = load("graph-mamba-paper").info.harness
    assert len(harness.step_times_ms) == 40 and not harness.steps_capped
    assert steady(harness.step_times_ms)


def test_a_model_that_synchronizes_says_what_its_syncs_cost():
    """hf:granite-4.0-hybrid small: 405 synchronizing calls a step; their cost in ms of the step, beside the other
    host causes."""
    summary = load("granite-small").summary
    syncs = summary.findings.set_index("status").loc["synchronizes", "finding"]
    categories = summary.host_categories.set_index("category")
    cost = categories.loc["synchronizing calls"]
    assert "405 times a step" in syncs
    assert f"waiting in them took {cost['ms']:.1f} ms a step ({cost['ms_low']:.1f}-{cost['ms_high']:.1f}" in syncs
    assert cost["ms_low"] > 0 and cost["host_pct"] > 10  # beside autograd's engine and dispatch, the third cause
