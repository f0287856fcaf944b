"""Re-derive a run's counters lent across problems with the work rule of today's `op_work.problem_work`.

Runs profiled between 8f50fac and the broadcast rule (2026-11-27) lent a launch with no measured launch of its own
problem the counters of another problem of its configuration scaled by the elements of the largest input, which
for a broadcasting op (graph-mamba's add of [128, 1] and [128, 223]: x128) or a library kernel whose work its
inputs do not give (cuDNN's layout transforms, CUB's sort) is wrong. Every such launch keeps its lender; its scaled
counters (`counters.SCALED_COLUMNS`) are multiplied by new scale / old scale, and where the new scale is 1 its
Nsight Compute duration is the lender's, as `counters.attach_counters` would have written it. Measured launches,
launches lent within their problem or by grid, statuses and run.json are untouched: the counters that were
measured are the same, only what a launch borrowed is read anew.

    .venv/bin/python scripts/relend.py RUN_DIR...
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from ssmprof import schema
from ssmprof.op_work import problem_work
from ssmprof.profiler.counters import CONFIG_KEY, SCALED_COLUMNS


def relend(kernels: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The kernel table with its launches lent across problems rescaled; how many changed."""
    if "counter_scale" not in kernels:  # profiled before counters were lent across problems
        return kernels, 0
    table = kernels.copy()
    lent = table.index[(table["counter_status"] == "lent") & (table["counter_scale"] != 1)]
    by_launch = table.reset_index().set_index(["rank", "launch_idx"] if "rank" in table else ["launch_idx"])
    changed = 0
    for position in lent:
        row = table.loc[position]
        key = (row["rank"], row["counter_lender"]) if "rank" in table else row["counter_lender"]
        lender = table.loc[int(by_launch.loc[key, "index"])]
        if not all(row[column] == lender[column] for column in CONFIG_KEY):
            continue  # lent by grid within a family: its scale is the grid ratio, not work
        mine, theirs = (problem_work(r["launch_op"] or "", r["launch_shapes"] or "") for r in (row, lender))
        scale = mine / theirs if np.isfinite(mine) and np.isfinite(theirs) and theirs > 0 else 1.0
        if np.isclose(scale, row["counter_scale"]):
            continue
        table.loc[position, SCALED_COLUMNS] = row[SCALED_COLUMNS] * (scale / row["counter_scale"])
        if scale == 1.0:
            table.loc[position, "ncu_duration_ns"] = lender["ncu_duration_ns"]
        table.loc[position, "counter_scale"] = scale
        changed += 1
    return table, changed


def main(paths: list[str]) -> int:
    for path in map(Path, paths):
        frame_path = path / "kernels.parquet"
        kernels = schema.read_frame(frame_path)
        table, changed = relend(kernels)
        if changed:
            schema.write_frame(table, frame_path)
        print(f"{path}: {changed} launches rescaled")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
