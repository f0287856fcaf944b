"""Change points on planted histories built from real reruns: the 8 held-back mamba2-lm small reruns of one
H100 (tests/data/regress-reruns-h100) in order, cycled, with a change planted from a known run on (durations or
step times scaled), and the issue's history: the 8 reruns, then the three planted-regression runs recorded on that
host. Every change point must be at the run where its change starts, none elsewhere, and "what moved" must
agree in sign and size with the change of the total kernel time it explains."""

import re
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ssmprof.analysis.change.history import change_points, moved, moved_sites, run_rows
from ssmprof.pipeline.loading import load_run

H100 = Path(__file__).parent / "data" / "regress-reruns-h100"
RERUNS = [f"rerun-{i}" for i in range(1, 9)]
FWD = "_chunk_scan_fwd_kernel"
RUNS = 12


def scaled_kernel(factor):
    def plant(kernels):
        out = kernels.copy()
        hit = out["kernel_name"] == FWD
        out.loc[hit, "duration_ns"] = (out.loc[hit, "duration_ns"] * factor).round().astype("int64")
        return out
    return plant


def slower_steps(info):
    steps = [1.8 * t for t in info.harness.step_times_ms]
    return info.model_copy(update={"harness": info.harness.model_copy(
        update={"step_times_ms": steps, "step_ms": float(np.median(steps))})})


# scenario -> (run names in order, kernel plant and info plant per position, expected change run, series there)
SCENARIOS = {
    "lasting 20 % SSD kernel slowdown": (lambda p: (scaled_kernel(1.2) if p >= 6 else None, None), {6},
                                         ("kernel", FWD, "time_per_launch_ns")),
    "one-run spike (SSD kernel 1.5x)": (lambda p: (scaled_kernel(1.5) if p == 6 else None, None), set(), None),
    "step 1.8x longer, same kernels": (lambda p: (None, slower_steps if p >= 6 else None), {6},
                                       ("step", "", "step_ms")),
    "SSD kernel 20 % faster": (lambda p: (scaled_kernel(0.8) if p >= 6 else None, None), {6},
                               ("kernel", FWD, "time_per_launch_ns")),
    "SSD kernel 20 % slower in the last 2 runs": (lambda p: (scaled_kernel(1.2) if p >= RUNS - 2 else None, None),
                                                  {RUNS - 2}, ("kernel", FWD, "time_per_launch_ns")),
}
PLANTED_RUNS = ["planted-autotune", "planted-unfused-conv", "planted-cublas-no-workspace"]


@cache
def rows_of(name, kernel_plant=None, info_plant=None):
    run = load_run(H100 / name)
    kernels = kernel_plant(run.kernels) if kernel_plant else run.kernels
    info = info_plant(run.info) if info_plant else run.info
    return run_rows(kernels, info)


def history_of(parts):
    """(rows, runs) of a history whose runs are `parts` (rows of one run each), in order."""
    runs = pd.DataFrame({"run_id": [f"run-{i:02d}" for i in range(len(parts))],
                         "commit": [f"{i:02d}" + "ef" * 19 for i in range(len(parts))]})
    rows = pd.concat([part.assign(run_id=run_id) for part, run_id in zip(parts, runs["run_id"], strict=True)],
                     ignore_index=True)
    return rows, runs


def planted(plants):
    return history_of([rows_of(RERUNS[p % len(RERUNS)], *plants(p)) for p in range(RUNS)])


def found_series(changes):
    out = {}
    for row in changes.to_dict("records"):
        out.setdefault(row["position"], set()).add((row["scope"], row["kernel_name"] or row["category"], row["metric"]))
    return out


def total_agrees(lines, rows, runs, since, position):
    """The closing line of what moved: the total's change and the named sites' sum agree in sign and size."""
    total = rows[rows["scope"] == "total"].set_index("run_id")["value"]
    was = total.reindex(runs["run_id"].iloc[since:position]).median()
    change = total[runs["run_id"].iloc[position]] - was
    named = float(re.search(r"the sites above: ([-+][\d.]+) us", lines[-1]).group(1)) * 1e3
    return np.sign(named) == np.sign(change) and 0.5 <= named / change <= 1.5


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_change_point_at_the_planted_run_and_nowhere_else(scenario):
    plants, expected, series = SCENARIOS[scenario]
    rows, runs = planted(plants)
    changes = change_points(rows, runs)
    found = found_series(changes)
    assert set(found) == expected, (scenario, found)
    for position in expected:
        assert series in found[position], found[position]
        at = changes[changes["position"] == position].iloc[0]
        lines = moved_sites(rows, runs["run_id"].iloc[at["since"]:position].tolist(), runs["run_id"].iloc[position])
        if series[0] == "step":  # the host slowed down: no kernel moved
            assert lines == []
            continue
        sign = "-" if "faster" in scenario else "+"
        assert lines[0].startswith(f"{FWD} [forward]") and f"({sign}20 %)" in lines[0], lines
        assert total_agrees(lines, rows, runs, at["since"], position), lines


def test_three_different_regressions_after_the_reruns_change_at_the_first():
    """rerun-1..8, then planted-autotune (+1.9 % kernel time: the chunk scan's new tile), planted-unfused-conv and
    planted-cublas-no-workspace: the change is at the first planted run, not at rerun-8, and what moved names the
    chunk scan's configuration change with the total's +1.9 %."""
    rows, runs = history_of([rows_of(name) for name in RERUNS + PLANTED_RUNS])
    changes = change_points(rows, runs)
    assert set(changes["position"]) == {8}, changes[["position", "scope", "category", "kernel_name", "metric"]]
    total = changes[changes["scope"] == "total"].iloc[0]
    assert 0.015 < total["shift"] / total["before"] < 0.025
    lines = moved_sites(rows, runs["run_id"].iloc[total["since"]:8].tolist(), runs["run_id"].iloc[8])
    assert lines[0].startswith("_chunk_scan_fwd_kernel [forward] config changed:") and "(+88 %)" in lines[0]
    assert "(+1.9 %)" in lines[-1] and total_agrees(lines, rows, runs, total["since"], 8)
    sites = moved(rows, runs["run_id"].iloc[total["since"]:8].tolist(), runs["run_id"].iloc[8])
    assert sites.index[0][:2] == (FWD, "forward") and len(sites) == len(lines) - 1  # what the page plots
