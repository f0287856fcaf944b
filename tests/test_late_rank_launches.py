"""The late rank's launch gaps read launch by launch against the other ranks' (`analysis.step.ranks.launch_gaps`,
`late_gap_groups`, issue #56 item 3), on the real multi-GPU runs: every rank's n-th compute launch is the same kernel,
the straggler's gaps are the ones its host left, and where 80 % of its excess falls is named by phase, layer and
kernel. The numbers below were measured on these runs (the H100 TP=4 runs as bundled before the re-record of
2026-11-27, kept in tests/data/tp4-h100-bundled-2026-11-26); the cuda-graphs run's profiled iteration is eager (the
graph is only timed, `profiler.harness`), so its gaps do not vanish: its late rank 0 is late the same way."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from ssmprof.analysis.findings.parallel import parallel_findings
from ssmprof.analysis.step.ranks import (
    gap_excess_noise_ms,
    late_gap_groups,
    late_rank,
    late_rank_gap_groups,
    late_ranks,
    launch_gaps,
    rank_launch_gaps,
)
from ssmprof.pipeline.loading import load_run

DATA = Path(__file__).parent / "data"
BUNDLED_BEFORE = DATA / "tp4-h100-bundled-2026-11-26"  # the H100 TP=4 runs bundled before the re-record of 2026-11-27
STRAGGLER = DATA / "tp4-h100-mamba2-lm-paper-straggler"
PLANTED = DATA / "tp4-h100-planted-straggler" / "planted-rank1-5ms"
UNPLANTED = BUNDLED_BEFORE / "mamba2-lm-tp4"  # the same host's run before the delay was planted

# run, late rank, positions aligned, excess ms, its noise ms (None: one on-time rank), the phases of the 80 % groups
RUNS = [
    (STRAGGLER, 1, 1001, 147.8, 8.6, {"backward", "forward"}),
    (PLANTED, 1, 1001, 167.0, 0.2, {"forward", "backward"}),
    (UNPLANTED, 1, 1001, 96.7, 0.2, {"backward"}),
    (BUNDLED_BEFORE / "mamba2-lm-tp4-cuda-graphs", 0, 1001, 75.4, 0.2, {"backward"}),
    (BUNDLED_BEFORE / "hybrid-tp4", 3, 598, 23.1, 12.4, {"backward"}),
    (DATA / "host-time-h100" / "tp2-mamba2-lm-paper", 0, 1019, 17.7, None, {"backward"}),
]


def _kernels(path: Path) -> pd.DataFrame:
    return load_run(path).kernels


@pytest.mark.parametrize(("path", "late", "positions", "excess_ms", "noise_ms", "phases"), RUNS,
                         ids=[str(r[0].relative_to(r[0].parents[1])) for r in RUNS])
def test_the_late_ranks_excess_and_where_80_percent_of_it_falls(path, late, positions, excess_ms, noise_ms, phases):
    """Every rank launches the same kernel at every aligned position; the late rank's excess idle stands above its
    noise, and the fewest phases making 80 % of it never name the optimizer."""
    kernels = _kernels(path)
    assert int(late_rank(kernels, load_run(path).info)["late_rank"].iloc[0]) == late
    gaps = launch_gaps(kernels, late)
    assert len(gaps) == positions and gaps["names_agree"].all()
    assert gaps["excess_ns"].sum() / 1e6 == pytest.approx(excess_ms, abs=0.1)
    noise = gap_excess_noise_ms(kernels, late)
    assert noise != noise if noise_ms is None else noise == pytest.approx(noise_ms, abs=0.1)
    groups = late_gap_groups(gaps)
    assert set(groups.loc[groups["by"] == "phase", "group"]) == phases
    for _, part in groups.groupby("by"):  # the fewest groups: the last reaches 80 %, the one before does not
        assert part["covered_pct"].iloc[-1] >= 80 and (len(part) == 1 or part["covered_pct"].iloc[-2] < 80)


@pytest.mark.parametrize(("phase", "late_us", "others_low_us", "others_high_us"),
                         [("forward", 218.0, 1.5, 2.2), ("backward", 113.5, 1.3, 1.6), ("optimizer", 1.8, 1.7, 2.2)])
def test_the_stragglers_median_gap_per_phase(phase, late_us, others_low_us, others_high_us):
    """Rank 1's compute kernels start a median 218 us after the one before in forward and 113.5 us in backward, but
    1.8 us in the optimizer (no host work between its launches there); ranks 0, 2 and 3 keep 1.3-2.2 us."""
    gaps = rank_launch_gaps(_kernels(STRAGGLER))
    medians = gaps[gaps["phase"] == phase].groupby("rank")["gap_ns"].median() / 1e3
    assert medians[1] == pytest.approx(late_us, abs=0.1)
    assert medians.drop(index=1).between(others_low_us, others_high_us).all()


def test_the_stragglers_ssd_chain_runs_back_to_back_in_layer_0_only():
    """In layer 0's forward rank 1's SSD chain (its Triton kernels) runs back to back; from layer 1 on each starts
    180 us or more after the one before."""
    gaps = rank_launch_gaps(_kernels(STRAGGLER))
    chain = gaps[(gaps["rank"] == 1) & (gaps["phase"] == "forward")
                 & gaps["kernel_name"].str.match(r"_(chunk|bmm|state)")]
    assert chain.loc[chain["layer"] == 0, "gap_ns"].max() < 3e3
    assert chain.loc[chain["layer"] >= 1, "gap_ns"].min() > 175e3


def test_the_planted_delay_lands_in_forward():
    """Rank 1's host slept 5 ms before each of the 14 layers' forward: its excess grows by the 70 ms planted (70.4 ms),
    in forward (76.9 ms more there, 6.6 ms less in backward), most before the first compute kernel after each layer's
    all-gather."""
    excess = {}
    for path in (PLANTED, UNPLANTED):
        gaps = launch_gaps(_kernels(path), 1)
        excess[path] = gaps.groupby("phase")["excess_ns"].sum() / 1e6
    grown = excess[PLANTED] - excess[UNPLANTED]
    assert grown.sum() == pytest.approx(70, abs=1) and grown["forward"] >= 70
    groups = late_gap_groups(launch_gaps(_kernels(PLANTED), 1))
    assert groups.loc[groups["by"] == "kernel", "group"].iloc[0] == "vectorized_elementwise_kernel"


def test_no_excess_beyond_noise_where_no_rank_is_late():
    """mamba1-lm tp4 as bundled before 2026-11-27, whose latest rank costs no more than its noise: that rank's gaps
    match the others' (0.2 ms of excess within 0.2 ms of noise), and the words say so. (The run bundled since is not
    such a run: its late rank 0 idles 0.2 ms longer than the others', above its 0.03 ms of noise.)"""
    kernels = _kernels(BUNDLED_BEFORE / "mamba1-lm-tp4")
    row = late_rank(kernels, load_run(BUNDLED_BEFORE / "mamba1-lm-tp4").info).iloc[0]
    assert row["late_rank"] == 2 and row["gap_excess_ms"] <= row["gap_excess_noise_ms"] + 0.01
    assert row["gap_excess_where"].startswith("its GPU idles between launches as long as the others'")


def test_the_parallel_finding_names_where_the_excess_falls():
    """The late-rank finding of a page of the straggler says how far its gaps exceed the others' and where 80 % of
    that falls; the page's table holds the groups."""
    run = load_run(STRAGGLER)
    late = late_ranks({"straggler": late_rank(run.kernels, run.info)})
    finding = parallel_findings(pd.DataFrame({"world_size": [4], "speedup": [float("nan")], "run": ["straggler"]}),
                                pd.DataFrame({"run": ["straggler"], "exposed_transfer_ms": [1.0], "wait_ms": [2.0],
                                              "as_predicted": [True], "busbw_gb_per_s_min": [200.0],
                                              "busbw_gb_per_s_max": [260.0]}), late)
    text = finding.loc[finding["kind"] == "late rank", "finding"].iloc[0]
    assert ("launch by launch, its GPU idles 147.8 ms longer than the others' between launches (noise 8.6 ms), at "
            "least 80 % of it in backward (97.6 ms) and forward (50.2 ms)") in text
    table = late_rank_gap_groups({"straggler": run.kernels}, late)
    assert set(table["run"]) == {"straggler"} and set(table["by"]) == {"phase", "layer", "kernel"}
