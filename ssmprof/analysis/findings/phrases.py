"""What every page's findings share: the finding as data (`Finding`), the frame they make ranked by impact, and the
phrases their sentences use (durations, ranges).

A finding is data before it is words: its kind, its status (the verdict a page or another analysis reads), its
impact in ms of the step (what is at stake, NaN where it is about no time) and the section that holds its
evidence, beside the sentence and the headline value a reader sees. Pages rank findings by impact; other
analyses read the fields, never the sentence.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import pandas as pd

TOP = 3  # categories, kernels and sites a finding names before "and N more"


@dataclass(frozen=True)
class Finding:
    """One finding: `kind` (what it is about: host, late rank, counters, ...), `status` (its verdict, e.g.
    host-bound, late, checked), `impact_ms` (ms of the step it is about; NaN where none), `value` (the headline
    number as shown), `finding` (the sentence) and `anchor` (the section below that holds its evidence)."""

    kind: str
    status: str
    value: str
    finding: str
    anchor: str
    impact_ms: float = math.nan


COLUMNS = [field.name for field in fields(Finding)]


def ranked(found: list[Finding], headlines: int = 0) -> pd.DataFrame:
    """The findings as a frame (`COLUMNS`), the largest impact first, so that a page's first screen opens with what
    costs the step most; those with no impact keep their order after them. The first `headlines` findings stay
    first as given: the answer to the page's own question (a comparison's step), which the others explain."""
    frame = pd.DataFrame([asdict(finding) for finding in found], columns=COLUMNS)
    frame["impact_ms"] = frame["impact_ms"].astype(float)
    rest = frame.iloc[headlines:].sort_values("impact_ms", ascending=False, kind="stable", na_position="last")
    return pd.concat([frame.iloc[:headlines], rest]).reset_index(drop=True)


def of_kind(findings: pd.DataFrame, kind: str) -> pd.Series | None:
    """The first finding of `kind` in a frame of findings, None where there is none."""
    rows = findings[findings["kind"] == kind]
    return rows.iloc[0] if len(rows) else None


def ms(ns: float) -> str:
    return f"{ns / 1e6:.1f} ms" if ns >= 1e5 else f"{ns / 1e3:.0f} us"


def shown_pct(pct: float) -> float:
    """A share of the kernel time in % (the counters' coverage and its parts) as every page shows it, table, finding
    or run description alike: one decimal, and short of all of the time never 100, so that a run whose counters
    miss 0.47 % of it reads 99.5 % on the suite's table and in its own finding, not 99.5 and 100."""
    shown = round(pct, 1)
    return min(shown, 99.9) if pct < 100 else shown


def pct_text(pct: float) -> str:
    """`shown_pct` as text: `99.5 %`."""
    return f"{shown_pct(pct):.1f} %"


def span(low: float, high: float, unit: str = " %", form: str = "{:.0f}") -> str:
    """A range of rounded values, `54-61 %`, or one number where both ends round alike: `54 %`."""
    low_text, high_text = form.format(low), form.format(high)
    return f"{low_text}{unit}" if low_text == high_text else f"{low_text}-{high_text}{unit}"


def ms_span(values: pd.Series) -> str:
    return span(values.min(), values.max(), " ms")


def graphed_words(row: dict) -> str:
    """`; as one CUDA graph 2.75x (2.70-2.77x)`, where the run timed its step as a CUDA graph."""
    speedup = row.get("graphed_speedup")
    if speedup is None or speedup != speedup:  # absent, or NaN beside a run that has it: no graphed steps
        return ""
    return (f"; as one CUDA graph {row['graphed_speedup']:.2f}x ({row['graphed_speedup_low']:.2f}-"
            f"{row['graphed_speedup_high']:.2f}x)")
