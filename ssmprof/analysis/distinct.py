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
    keys = pd.DataFrame({i: column.to_numpy(dtype=object) for i, column in enumerate(columns)})
    groups = keys.groupby(list(keys.columns), sort=False, dropna=False).ngroup().to_numpy()
    firsts = keys.drop_duplicates()
    results = np.empty(len(firsts), dtype=object)
    results[:] = [rule(*row) for row in firsts.itertuples(index=False)]
    return results[groups]
