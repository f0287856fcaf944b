"""Per-launch rules evaluated once per distinct input: a run of a million launches holds a few hundred distinct
kernels, ops and shapes, and a Python call per launch (a category, a GEMM's FLOPs from its shapes) costs seconds
where one per distinct value costs milliseconds."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd


def per_distinct(columns: list[pd.Series], rule: Callable) -> np.ndarray:
    """`rule(*values)` for each launch (the columns' values at it, as they are), evaluated once per distinct
    combination of the values and spread back to every launch in order."""
    codes = pd.DataFrame({i: pd.factorize(column, use_na_sentinel=False)[0] for i, column in enumerate(columns)})
    groups = codes.groupby(list(codes.columns), sort=False).ngroup().to_numpy()  # integers: no strings compared
    _, firsts = np.unique(groups, return_index=True)
    values = [column.iloc[firsts].to_numpy(dtype=object) for column in columns]
    results = np.empty(len(firsts), dtype=object)
    results[:] = [rule(*row) for row in zip(*values, strict=True)]
    return results[groups]
