"""The report's tables as CSV files, byte for byte what `DataFrame.to_csv(path, index=False)` writes, at Arrow's speed.

pandas formats each float with numpy's shortest round-trip repr and hands every row to Python's csv writer: about
a microsecond a cell, most of a minute for the per-launch tables of a million-launch run (`analysis.summaries.run`'s
roofline and tensor/vector classes). Here a column is formatted at once. Floats: Arrow's cast gives the same
shortest digits in its own notation, which agrees with repr for 1e-4 <= |x| < 1e10 and |x| >= 1e16 and is
rewritten in Arrow elsewhere (an integral value's ".0", fixed notation from 1e10 to 1e16, two exponent digits
under 1e-6), but from 1e-6 to 1e-4, where numpy's repr is taken, each distinct value once. Integers: Arrow's
cast. Booleans: True/False. Text, and every other value of a string or boolean extension column: Python's csv
writer itself, once per distinct value (its quoting). Missing values: empty. The rows are joined in Arrow, ROWS
at a time. A table with a column of another type (dates, mixed objects), a single column or none is left to
pandas.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

ROWS = 100_000  # rows formatted at a time: the text of a slice, not of the table, is held at once
LINE = "\n"  # pandas' line terminator on every platform since 2.0 (`to_csv(lineterminator=None)` means "\n")


def write_table(table: pd.DataFrame, path: Path) -> None:
    """`table.to_csv(path, index=False)`, written column by column where every column's type allows."""
    formats = _formats(table)
    if formats is None:
        table.to_csv(path, index=False)
        return
    with open(path, "wb") as file:
        file.write(_csv_line(list(table.columns)).encode())
        for start in range(0, len(table), ROWS):
            cells = [form(table.iloc[start:start + ROWS, i]) for i, form in enumerate(formats)]
            cells[-1] = pc.binary_join_element_wise(cells[-1], pa.scalar(LINE), "")  # the line's end
            lines = pc.binary_join_element_wise(*cells, ",")
            offsets, data = lines.buffers()[1], lines.buffers()[2]
            first, last = np.frombuffer(offsets, dtype=np.int32)[[lines.offset, lines.offset + len(lines)]]
            file.write(memoryview(data)[first:last])


def _formats(table: pd.DataFrame) -> list | None:
    """Per column the function that writes its cells (an Arrow string array of a slice), or None where pandas
    must write the table."""
    if len(table.columns) < 2 or isinstance(table.columns, pd.MultiIndex):
        return None  # one column: the csv writer quotes an empty row; none: pandas' own header
    formats = []
    for _, column in table.items():
        dtype = column.dtype
        if dtype == np.float64:
            formats.append(_floats)
        elif dtype.kind in "iu" and isinstance(dtype, np.dtype):
            formats.append(_integers)
        elif dtype == np.bool_:
            formats.append(_booleans)
        elif _by_value_type(column):
            formats.append(_by_value)
        else:
            return None
    return formats


def _by_value_type(column: pd.Series) -> bool:
    """Text or boolean extension columns, and object columns of text: what the csv writer formats itself."""
    if isinstance(column.dtype, pd.StringDtype):
        return True
    if isinstance(column.dtype, pd.ArrowDtype):
        return pa.types.is_string(column.dtype.pyarrow_dtype) or pa.types.is_large_string(
            column.dtype.pyarrow_dtype) or pa.types.is_boolean(column.dtype.pyarrow_dtype)
    return column.dtype == object and pd.api.types.infer_dtype(column, skipna=True) in ("string", "empty")


def _floats(column: pd.Series) -> pa.Array:
    """numpy's repr of each value (empty where missing), from Arrow's cast and the rewrites of NOTATION."""
    values = column.to_numpy()
    text = pc.cast(pa.array(values), pa.string())
    size = np.abs(values)
    with np.errstate(invalid="ignore"):
        ranges = {_dot_zero: ((size == 0) | ((size >= 1e-4) & (size < 1e10))) & (values == np.floor(values)),
                  _to_fixed: (size >= 1e10) & (size < 1e16), _two_digit_exponent: (size > 0) & (size < 1e-6),
                  _numpy_repr: (size >= 1e-6) & (size < 1e-4), _missing: np.isnan(values)}
    for rewrite, chosen in ranges.items():
        if chosen.any():
            mask = pa.array(chosen)
            text = pc.replace_with_mask(text, mask, rewrite(text.filter(mask), values[chosen]))
    return text


def _dot_zero(text: pa.Array, values: np.ndarray) -> pa.Array:
    """An integral value in fixed notation: repr ends it in ".0", Arrow does not."""
    return pc.binary_join_element_wise(text, pa.scalar(".0"), "")


def _to_fixed(text: pa.Array, values: np.ndarray) -> pa.Array:
    """1e10 <= |x| < 1e16: Arrow writes "d.ddde+XX", repr the same digits in fixed notation, at least one after the
    point."""
    parts = pc.extract_regex(text, r"^(?P<sign>-?)(?P<lead>\d)\.?(?P<rest>\d*)e\+(?P<exponent>\d+)$")
    exponents = pc.cast(parts.field("exponent"), pa.int64()).to_numpy()
    for exponent in np.unique(exponents):
        chosen = pa.array(exponents == exponent)
        sign, lead, rest = (parts.field(name).filter(chosen) for name in ("sign", "lead", "rest"))
        whole = pc.binary_join_element_wise(lead, pc.utf8_slice_codeunits(rest, 0, int(exponent)), "")
        whole = pc.binary_join_element_wise(sign, pc.utf8_rpad(whole, int(exponent) + 1, "0"), "")
        fraction = pc.utf8_slice_codeunits(rest, int(exponent))
        fraction = pc.if_else(pc.equal(fraction, ""), pa.scalar("0"), fraction)
        text = pc.replace_with_mask(text, chosen, pc.binary_join_element_wise(whole, fraction, "."))
    return text


def _two_digit_exponent(text: pa.Array, values: np.ndarray) -> pa.Array:
    """|x| < 1e-6: both in exponent form, repr's exponent with at least two digits ("e-07", Arrow "e-7")."""
    return pc.replace_substring_regex(text, r"e-(\d)$", r"e-0\1")


def _numpy_repr(text: pa.Array, values: np.ndarray) -> pa.Array:
    """1e-6 <= |x| < 1e-4, fixed in Arrow and an exponent in repr: numpy's own, each distinct value once."""
    distinct, each = np.unique(values, return_inverse=True)
    return pa.array(distinct.astype(str)[each])


def _missing(text: pa.Array, values: np.ndarray) -> pa.Array:
    return pa.array([""] * len(values), pa.string())


def _integers(column: pd.Series) -> pa.Array:
    return pc.cast(pa.array(column.to_numpy()), pa.string())


def _booleans(column: pd.Series) -> pa.Array:
    return pc.if_else(pa.array(column.to_numpy()), pa.scalar("True"), pa.scalar("False"))


def _by_value(column: pd.Series) -> pa.Array:
    codes, distinct = pd.factorize(column, use_na_sentinel=True)
    cells = pa.array([_csv_line([value, ""])[:-len("," + LINE)] for value in distinct] + [""], pa.string())
    return cells.take(pa.array(np.where(codes < 0, len(distinct), codes)))


def _csv_line(values: list) -> str:
    """A row as Python's csv writer writes it for pandas (minimal quoting, "\\n" ends it)."""
    text = io.StringIO()
    csv.writer(text, lineterminator=LINE, quoting=csv.QUOTE_MINIMAL).writerow(values)
    return text.getvalue()
