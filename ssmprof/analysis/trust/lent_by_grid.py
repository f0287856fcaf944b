"""How far the counter plan can be trusted, as tables: the held-out check of the counters lent by grid, and the
plan's cost predicted before its passes ran beside what they took.

A family is the launch configurations of one kernel instantiation and tile (block, shared memory) that differ only
in grid. A family of many grids is profiled at a few grid bins and lends to its other launches, its work counters
scaled by grid (kernels.parquet `counter_scale`). Its held-out check (run.json `collectors.counters.families`) lends
to the measured launches strictly inside its measured grids as if they were not measured: how far a lent launch's
DRAM bytes, L2 bytes and instructions can be off. The plan was chosen on its predicted cost (within `--budget`,
where given); its measured wall time says how far that prediction, and so the budget, can be trusted.

Both come from run.json alone; a run recorded before families or predictions has neither table (None).
"""

from __future__ import annotations

from itertools import zip_longest

import pandas as pd

from ssmprof.schema import CountersCollector

# The held-out error columns, by the counters they compare (`profiler.counters.HELD_OUT_COLUMNS`).
HELD_OUT_ERRORS = ("dram_error_pct", "l2_error_pct", "inst_error_pct")
LENT_FAMILY_COLUMNS = ["kernel_name", "family", "configurations", "launches", "time_share", "measured_launches",
                       "lent_launches", "held_out_launches", *HELD_OUT_ERRORS]
ALL_PASSES = "all"  # the `counter_pass` of the row that sums the passes
# A family whose held-out launch had its lent DRAM bytes off by more than this (|lent / measured - 1|: under half
# or over 1.5x the measured bytes) is one a reader should not lean on: the same error in arithmetic intensity can
# move a kernel across a roof's ridge. Seen on an H100 (tests/data/counter-cost-moe-h100/qwen3-next-small): a
# 1,024-block fill stayed in L2 under Nsight Compute (0 DRAM bytes written) and lent those 0 bytes to fills of
# 8,192-16,384 blocks; its family's held-out error was 100,903 %.
LENT_DRAM_ERROR_WARN_PCT = 50.0


def lent_families(counters: CountersCollector) -> pd.DataFrame | None:
    """One row per family profiled at grid bins, the largest share of kernel time first: where a lent counter
    weighs most on the page's numbers. Each row: its kernel, the family in words less that kernel's name (its
    instantiation and tile: the kernel name alone does not tell a kernel's families apart), its launch
    configurations and launches, their share of kernel time, how many were measured, lent and held out, and the
    held-out error of the lent DRAM bytes, L2 bytes and warp instructions (median |lent / measured - 1|, %; empty
    where none was held out). None for a run without families."""
    if not counters.families:
        return None
    rows = [{"kernel_name": family.kernel_name,
             "family": family.family.removeprefix(family.kernel_name).strip(),
             "configurations": family.configurations, "launches": family.launches,
             "time_share": family.time_fraction, "measured_launches": family.measured,
             "lent_launches": family.lent, "held_out_launches": family.held_out,
             **{column: getattr(family, column) for column in HELD_OUT_ERRORS}}
            for family in counters.families]
    table = pd.DataFrame(rows, columns=LENT_FAMILY_COLUMNS).astype({column: "float64" for column in HELD_OUT_ERRORS})
    return table.sort_values("time_share", ascending=False, kind="stable").reset_index(drop=True)


def counter_pass_costs(counters: CountersCollector) -> pd.DataFrame | None:
    """The counter plan's cost per pass and in all: the seconds predicted before the passes ran, the wall time
    they took, and the prediction's error (predicted / measured - 1, %: negative where the passes took longer than
    predicted, the side a budget overruns on), with the launches each pass profiled where recorded (in the `all`
    row only where every pass recorded them: a partial sum would read as the whole). A pass one list lacks keeps
    its row with that cell empty, so that no pass that ran is hidden. None for a run recorded before the
    predictions."""
    if not counters.pass_predicted_s:
        return None
    passes = list(zip_longest(counters.pass_predicted_s, counters.pass_wall_s, counters.pass_replay))
    profiled = [replay.launches if replay else None for _, _, replay in passes]
    table = pd.DataFrame({
        "counter_pass": [str(number) for number in range(1, len(passes) + 1)] + [ALL_PASSES],
        "launches_profiled": profiled + [None if None in profiled else sum(n for n in profiled if n is not None)],
        "predicted_s": [predicted for predicted, _, _ in passes] + [counters.predicted_s],
        "measured_s": [measured for _, measured, _ in passes] + [counters.wall_s or None],
    }).astype({"launches_profiled": "float64", "predicted_s": "float64", "measured_s": "float64"})
    table["prediction_error_pct"] = 100 * (table["predicted_s"] / table["measured_s"] - 1)
    return table
