"""What limits each kernel, graded, in the order Nsight Compute's guided analysis reasons.

1. The units, ranked by speed of light: DRAM, L2, the pipes (tensor, FMA, ALU, XU special functions,
   load/store) and the warp schedulers' issue slots, each as a % of its peak (the counters in
   `schema.COUNTER_METRICS`; L1/TEX throughput is not collected, the load/store pipe stands for it). DRAM and L2
   are % of the run's ceilings where they are given (`roofline.memory_pct_of_peak`, the same number the roofline
   shows), else of Nsight Compute's peaks. Where a launch has the instruction-level counters
   (`analysis.limits.instruction_bounds`), the issue slots are counted by the instructions executed ("issue slots",
   `inst_issue_pct`, in place of the issue-active cycles of "instruction issue") and shared memory joins the
   units (its wavefronts against the data pipe's peak). A unit
   busy a fraction f of its peak accounts for f of the kernel's time at that peak; what it leaves, 1 - f, is
   time the other explanations must account for. So the busiest unit scores f and the best explanation
   of a low unit scores 1 - f: the verdict is the unit while it is busy at least half the time, with a
   margin that shrinks to 0 at 50 % (no cliff at Nsight Compute's 60 % rule of thumb: 59 % and 63 % of
   DRAM peak are both "DRAM bandwidth", with margins 0.19 and 0.26). A second unit busy at least half the time
   (BUSY) is a candidate too, scoring its f: where two units run near their peaks neither alone limits the
   kernel, and within TIE_MARGIN of each other the confidence is "tie".
2. A low top unit is explained by what keeps warps from issuing, each weighted (0-1) by how strongly its
   counters say so; the best one takes 1 - f, the others their weight's share of it:
   - too few thread blocks: the grid fills under one wave of the SMs (weight 1 - waves);
   - tail effect: the last wave leaves block slots idle (weight: the idle share over the waves);
   - occupancy: the resident warps the launch configuration allows (weight 1 - theoretical occupancy),
     naming EVERY limit that binds, ties included (registers, shared memory, warp slots, block slots);
     only where the grid fills a wave (under one wave the per-SM cap is not reached);
   - achieved under theoretical occupancy (blocks ending unevenly, imbalance; weight 1 - achieved /
     expected, the theoretical occupancy scaled down by the waves where the grid fills under one);
   - latency: the stall reason warps wait on most (the warp-stall pass; `selected` and `not_selected` are
     issuing, not waiting), weighted by its share of the resident warps times the share of cycles the
     schedulers did NOT issue: a stall explains a kernel only when it is large and the kernel is mostly not
     issuing;
   - latency (by elimination): nothing else, a small fixed weight.
3. A kernel's duration alone is never a verdict: a short kernel is judged by its counters like any other, and
   what keeps its rates low is named with its number (too few thread blocks or a tail effect, with the waves).
   Launch latency is not one of the causes: the timeline's duration is the kernel's own GPU time, and the gaps
   between kernels are the host analysis's (`analysis.step.host`).

Every verdict carries its `limiter_score`, the `runner_up` and its score, the `margin` between them and a
word for it (`confidence`), and the `evidence`: the ranked units, waves, occupancy with its limits, and
the top waits. A verdict or runner-up that is an instruction-level bound (a pipe, the issue slots, shared
memory) of a launch with the instruction-level counters carries its % of peak (`limiter_pct`,
`runner_up_pct`), and the per-kernel summary says it with the name ("issue slots at 59.5 % of peak"): no
roof of the report shows how close such a kernel runs to the unit that holds it. Launches recorded before
those counters keep their words.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from ssmprof.analysis.limits.instruction_bounds import PIPES
from ssmprof.analysis.limits.roofline import memory_pct_of_peak
from ssmprof.hardware import Ceilings
from ssmprof.schema import STALL_REASONS

NO_COUNTERS = "no counters"
BY_ELIMINATION = "latency (by elimination)"
ELIMINATION_WEIGHT = 0.05
MAX_WARPS = 64  # resident warps per SM on A100, H100, H200 and B200
# Margin (verdict score - runner-up score) -> the word said for it, first match.
CONFIDENCE = ((0.3, "clear"), (0.1, "likely"), (0.0, "close call"))
# Two busy units closer than this (fraction of peak) are a tie: one unit's % of peak varies by up to 10 points
# (DRAM) and 8 (L2) between launches of one configuration in the bundled H100 mamba2-lm run.
TIE_MARGIN = 0.05
TIE = "tie"
BUSY = 0.5  # a unit busy at least half the time accounts for most of it: a candidate of its own
# DRAM and L2 as % of the run's ceilings (`roofline.memory_pct_of_peak`), else of Nsight Compute's peaks
MEMORY_UNITS = {"DRAM bandwidth": "pct_of_dram_peak", "L2 bandwidth": "pct_of_l2_peak"}
WAVE_EXPLANATIONS = ("too few thread blocks", "tail effect")  # said with the launch's waves (`limiter_summary`)
UNITS = {**MEMORY_UNITS, **PIPES,
         "instruction issue": "issue_active_pct"}
# The instruction-level counters' units (`analysis.limits.instruction_bounds` names them the same), and the units an
# instruction-level bound is one of: the pipes, the issue slots and shared memory.
INSTRUCTION_UNITS = {"issue slots": "inst_issue_pct", "shared memory": "shared_pipe_pct"}
BOUNDS = (*PIPES, *INSTRUCTION_UNITS)
CAPS = {"registers": "occupancy_limit_registers", "shared memory": "occupancy_limit_shared_mem",
        "warp slots": "occupancy_limit_warps", "block slots": "occupancy_limit_blocks"}
# What a waiting warp can wait on: every stall reason but issuing
WAITS = [reason for reason in STALL_REASONS if reason not in ("selected", "not_selected")]
VERDICT_COLUMNS = ["limiter", "limiter_score", "limiter_pct", "runner_up", "runner_up_score", "runner_up_pct",
                   "margin", "confidence", "top_unit", "top_unit_pct", "occupancy_limits", "top_stall", "evidence"]


def theoretical_occupancy(kernels: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """(resident warps / MAX_WARPS, every limit that caps the resident blocks, ties joined by ", ") per launch,
    from the launch attributes."""
    caps = kernels[list(CAPS.values())]
    blocks = caps.min(axis=1)
    warps_per_block = np.ceil(kernels["block_x"] * kernels["block_y"] * kernels["block_z"] / 32)
    occupancy = (blocks * warps_per_block / MAX_WARPS).clip(upper=1)
    binding = caps.eq(blocks, axis=0).to_numpy()
    codes = (binding * (1 << np.arange(len(CAPS)))).sum(axis=1)  # which limits bind, one bit each
    words = {code: ", ".join(name for i, name in enumerate(CAPS) if code >> i & 1) for code in np.unique(codes)}
    names = pd.Series(codes, index=kernels.index).map(words).astype(str)
    return occupancy, names.where(blocks.notna(), "")


def limiters(kernels: pd.DataFrame, evidence: bool = True, ceilings: Ceilings | None = None) -> pd.DataFrame:
    """The analysis frame with `theoretical_occupancy_pct`, DRAM and L2 as % of peak (`MEMORY_UNITS`: of
    `ceilings`, the run's, where given) and the VERDICT_COLUMNS added, per launch (the rule: the module's
    docstring; `verdict_ref` states it for one launch). `kernels`: an analysis frame. `evidence`: whether each
    launch gets its evidence, a string built per launch (seconds at a million launches; the summaries build it for
    the launches they show), else the column is left out."""
    frame = kernels.copy(deep=False)  # copy-on-write: the columns added here stay out of `kernels`
    for column, pct in memory_pct_of_peak(frame, ceilings).items():
        frame[column] = pct
    occupancy, limits = theoretical_occupancy(frame)
    frame["theoretical_occupancy_pct"] = 100 * occupancy
    frame["occupancy_limits"] = limits
    frame["top_stall"] = top_stalls(frame).fillna("")
    verdicts = _verdicts(frame)
    for column in VERDICT_COLUMNS:
        if column in verdicts:
            frame[column] = verdicts[column]
    if evidence:
        frame["evidence"] = [_evidence(row) for row in frame.itertuples()]
    return frame


def _column(frame: pd.DataFrame, column: str) -> np.ndarray:
    """A float column as an array, NaN where the frame has no such column (runs recorded before it)."""
    return frame[column].to_numpy(dtype=float) if column in frame else np.full(len(frame), np.nan)


def _verdicts(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """`verdict_ref` of every launch at once, all but the evidence: the candidates in the order `verdict_ref` lists
    them (top unit, second unit where busy, the explanations in their dictionary's order, latency by elimination)
    and the best two by score, ties to the units in their order, else to the larger weight, else to the one
    listed first. Names are codes into one list of words until the end."""
    words = [NO_COUNTERS, "", BY_ELIMINATION, *FIXED_EXPLANATIONS, *UNITS, *INSTRUCTION_UNITS]
    (top, second_unit), (top_pct, second_pct), bound_pcts = _top_units(frame, words)
    busy, second_busy = np.minimum(top_pct / 100, 1.0), np.minimum(second_pct / 100, 1.0)
    names, weights = _explanation_weights(frame, words)
    valid = ~np.isnan(weights) & (weights > 0)
    eliminated = ~valid.any(axis=1)
    weights = np.column_stack([np.where(valid, weights, -np.inf), np.where(eliminated, ELIMINATION_WEIGHT, -np.inf)])
    best = weights.max(axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        scores = np.column_stack([busy, np.where(second_busy >= BUSY, second_busy, -np.inf),
                                  np.where(weights > -np.inf, (1 - busy)[:, None] * weights / best, -np.inf)])
    listed = np.broadcast_to(np.arange(scores.shape[1]), scores.shape)
    ties = np.column_stack([np.full((len(frame), 2), -np.inf), -weights])  # the units, then the weight
    order = np.lexsort((listed, ties, -scores), axis=1)[:, :2]
    first, second = (np.choose(order[:, i], [top, second_unit, *names, words.index(BY_ELIMINATION)]) for i in (0, 1))
    score, second_score = (np.take_along_axis(scores, order[:, [i]], axis=1)[:, 0] for i in (0, 1))
    pct_of = {i: np.select([order[:, i] == 0, order[:, i] == 1], bound_pcts, np.nan) for i in (0, 1)}
    verdicts = {"limiter": first, "limiter_score": score, "limiter_pct": pct_of[0], "runner_up": second,
                "runner_up_score": second_score, "runner_up_pct": pct_of[1], "top_unit": top, "top_unit_pct": top_pct}
    two_units = np.isin(order[:, 0], [0, 1]) & np.isin(order[:, 1], [0, 1])  # the best two are both units
    return _without_counters(frame, two_units, verdicts, words)


# The explanations whose name is the same for every launch, in the order `_explanations` lists them
FIXED_EXPLANATIONS = ("too few thread blocks", "tail effect", "occupancy (achieved under theoretical)")


def _without_counters(frame: pd.DataFrame, two_units: np.ndarray, verdicts: dict[str, np.ndarray],
                      words: list[str]) -> dict:
    """The verdicts with their margin and confidence ("tie" where the best two are units within TIE_MARGIN),
    those of launches without counters (no counters, alone), and the names in words."""
    none = np.isnan(_column(frame, "ncu_duration_ns"))
    alone: dict[str, Any] = {"limiter": words.index(NO_COUNTERS), "limiter_score": 1.0,
             "limiter_pct": np.nan, "runner_up": words.index(""), "runner_up_score": 0.0, "runner_up_pct": np.nan,
             "top_unit": words.index(""), "top_unit_pct": np.nan}
    verdicts = {name: np.where(none, alone[name], values) for name, values in verdicts.items()}
    verdicts["margin"] = verdicts["limiter_score"] - verdicts["runner_up_score"]
    verdicts["confidence"] = np.select([two_units & ~none & (verdicts["margin"] < TIE_MARGIN),
                                        *(verdicts["margin"] >= floor for floor, _ in CONFIDENCE)],
                                       [TIE, *(word for _, word in CONFIDENCE)], "").astype(object)
    spelled = np.array(words, dtype=object)
    return {name: spelled[values] if name in ("limiter", "runner_up", "top_unit") else values
            for name, values in verdicts.items()}


def _top_units(frame: pd.DataFrame, words: list[str]) -> tuple[tuple, tuple, list[np.ndarray]]:
    """Per launch the busiest two units (`_units`, as their codes in `words`; the first listed among equals; ""
    where none was measured), their % of peak (0 where none) and that % where it is an instruction-level bound
    of a launch with those counters (NaN otherwise)."""
    issue_slots = _column(frame, INSTRUCTION_UNITS["issue slots"])
    pcts = {name: _column(frame, column) for name, column in {**UNITS, **INSTRUCTION_UNITS}.items()}
    pcts["instruction issue"] = np.where(np.isnan(issue_slots), pcts["instruction issue"], np.nan)
    matrix = np.column_stack(list(pcts.values()))
    ranked = np.argsort(-np.where(np.isnan(matrix), -np.inf, matrix), axis=1, kind="stable")[:, :2]
    codes = np.array([words.index(name) for name in pcts])
    instruction_level = ~np.isnan(np.column_stack([_column(frame, c) for c in INSTRUCTION_UNITS.values()])).all(axis=1)
    units, unit_pcts, bound_pcts = [], [], []
    for i in (0, 1):
        pct = np.take_along_axis(matrix, ranked[:, [i]], axis=1)[:, 0]
        measured = ~np.isnan(pct)
        unit = np.where(measured, codes[ranked[:, i]], words.index(""))
        bound = np.isin(unit, [words.index(name) for name in BOUNDS]) & instruction_level
        units.append(unit)
        unit_pcts.append(np.where(measured, pct, 0.0))
        bound_pcts.append(np.where(bound, pct, np.nan))
    return tuple(units), tuple(unit_pcts), bound_pcts


def _explanation_weights(frame: pd.DataFrame, words: list[str]) -> tuple[list, np.ndarray]:
    """`_explanations` of every launch: each explanation's name per launch (codes in `words`, which this extends)
    and its weight (NaN where it does not apply), in the order `_explanations` lists them."""
    waves, achieved = _column(frame, "waves_per_sm"), _column(frame, "achieved_occupancy_pct")
    theoretical = _column(frame, "theoretical_occupancy_pct") / 100
    limits, stall = frame["occupancy_limits"], frame["top_stall"]
    waited = np.full(len(frame), np.nan)  # the top stall reason's warps per issue cycle
    for reason in set(stall.unique()) - {""}:
        rows = (stall == reason).to_numpy()
        waited[rows] = _column(frame, f"stall_{reason}")[rows]
    with np.errstate(invalid="ignore", divide="ignore"):
        expected = theoretical * np.minimum(waves, 1.0)
        shortfall = 1 - achieved / 100 / expected
        issue = _column(frame, "issue_active_pct")
        latency = waited / _column(frame, "stall_warps_per_issue") * (1 - np.where(np.isnan(issue), 0.0, issue / 100))
        weights = np.column_stack([
            np.where(waves < 1, 1 - waves, 0.0), np.where(waves >= 1, 1 - waves / np.ceil(waves), 0.0),
            np.where((waves >= 1) & (limits != "").to_numpy(), 1 - theoretical, np.nan),
            np.where(~np.isnan(achieved) & (expected > 0), np.where(shortfall > 0, shortfall, 0.0), np.nan),
            np.where((stall != "").to_numpy(), latency, np.nan)])
    few, tail, achieved_under = (words.index(name) for name in FIXED_EXPLANATIONS)
    occupancy = _coded(limits, lambda limit: f"occupancy ({limit})", words)
    waiting = _coded(stall, lambda reason: "latency: " + reason.replace("_", " "), words)
    return [few, tail, occupancy, achieved_under, waiting], weights


def _coded(values: pd.Series, word: Callable[[str], str], words: list[str]) -> np.ndarray:
    """Per launch the code in `words` of `word(value)`, each distinct value's word appended to `words` once."""
    codes, distinct = pd.factorize(values)
    start = len(words)
    words.extend(word(value) for value in distinct)
    return codes + start


def verdict_ref(row) -> dict:
    """One launch's verdict, stated for one launch (the test oracle of `limiters`, which judges every launch at
    once): the ranked candidates (units and explanations), the best two, the evidence."""
    if math.isnan(row.ncu_duration_ns):
        return _pick([(NO_COUNTERS, 1.0)], {}, ("", math.nan), _evidence(row))
    units = _ranked_units(row)
    top_pct, top = units[0] if units else (0.0, "")
    busy = min(top_pct / 100, 1.0)
    explanations = sorted(((w, name) for name, w in _explanations(row).items() if w > 0),
                          key=lambda explanation: explanation[0], reverse=True)
    if not explanations:
        explanations = [(ELIMINATION_WEIGHT, BY_ELIMINATION)]
    best = explanations[0][0]
    busy_units = [(name, min(pct / 100, 1.0)) for pct, name in units[1:2] if pct / 100 >= BUSY]
    candidates = [(top, busy), *busy_units, *((name, (1 - busy) * w / best) for w, name in explanations)]
    bounds = {name: pct for pct, name in units[:2] if name in BOUNDS and _has_instruction_counters(row)}
    busy_names = frozenset([top, *(name for name, _ in busy_units)])
    return _pick(candidates, bounds, (top, top_pct), _evidence(row), busy_names)


def _ranked_units(row) -> list[tuple[float, str]]:
    """The measured units of a launch, busiest first (the first listed among equals)."""
    return sorted(((pct, name) for name, pct in _units(row).items() if not math.isnan(pct)),
                  key=lambda unit: unit[0], reverse=True)


def _units(row) -> dict[str, float]:
    """Each unit's % of peak on a launch (NaN where not measured): UNITS, and where the launch has the
    instruction-level counters, the issue slots by instructions executed in place of the issue-active cycles."""
    pcts = {name: getattr(row, column) for name, column in UNITS.items()}
    if not math.isnan(getattr(row, INSTRUCTION_UNITS["issue slots"], math.nan)):
        del pcts["instruction issue"]
    return {**pcts, **{name: getattr(row, column, math.nan) for name, column in INSTRUCTION_UNITS.items()}}


def _has_instruction_counters(row) -> bool:
    return any(not math.isnan(getattr(row, column, math.nan)) for column in INSTRUCTION_UNITS.values())


def _pick(candidates: list[tuple[str, float]], bounds: dict[str, float], top: tuple[str, float],
          evidence: str, units: frozenset[str] = frozenset()) -> dict:
    """The best two candidates, graded ("tie" where both are `units` within TIE_MARGIN); `bounds`: the % of peak
    of the units that are instruction-level bounds the verdict names with their number; `top`: the busiest unit
    and its % of peak."""
    ranked = sorted(candidates, key=lambda candidate: candidate[1], reverse=True)  # stable: ties keep their order
    (name, score), (second, second_score) = ranked[0], ranked[1] if len(ranked) > 1 else ("", 0.0)
    margin = score - second_score
    word = (TIE if {name, second} <= units and margin < TIE_MARGIN
            else next(word for floor, word in CONFIDENCE if margin >= floor))
    return {"limiter": name, "limiter_score": score, "limiter_pct": bounds.get(name, math.nan),
            "runner_up": second, "runner_up_score": second_score, "runner_up_pct": bounds.get(second, math.nan),
            "margin": margin, "confidence": word, "top_unit": top[0], "top_unit_pct": top[1], "evidence": evidence}


def _explanations(row) -> dict[str, float]:
    """Each explanation of a low top unit -> its weight (0-1): how strongly the launch's counters say so."""
    waves = row.waves_per_sm
    theoretical = row.theoretical_occupancy_pct / 100
    weights = {"too few thread blocks": 1 - waves if waves < 1 else 0.0,
               "tail effect": 1 - waves / math.ceil(waves) if waves >= 1 else 0.0}
    if waves >= 1 and row.occupancy_limits:
        weights[f"occupancy ({row.occupancy_limits})"] = 1 - theoretical
    expected = theoretical * min(waves, 1.0)  # under one wave the SMs hold fewer blocks than the cap
    if not math.isnan(row.achieved_occupancy_pct) and expected > 0:
        weights["occupancy (achieved under theoretical)"] = max(0.0, 1 - row.achieved_occupancy_pct / 100 / expected)
    if row.top_stall:
        share = getattr(row, f"stall_{row.top_stall}") / row.stall_warps_per_issue
        issuing = row.issue_active_pct / 100 if not math.isnan(row.issue_active_pct) else 0.0
        weights["latency: " + row.top_stall.replace("_", " ")] = share * (1 - issuing)
    return {name: w for name, w in weights.items() if not math.isnan(w)}


def top_stalls(kernels: pd.DataFrame) -> pd.Series:
    """Per launch, the stall reason most warps wait on, the first listed among equals (NaN where the stall pass did
    not measure it)."""
    waits = np.column_stack([kernels[f"stall_{reason}"].to_numpy(dtype=float) for reason in WAITS])
    missing = np.isnan(waits)
    most = np.argmax(np.where(missing, -1.0, waits), axis=1)
    return pd.Series(np.array(WAITS, dtype=object)[most], index=kernels.index).where(~missing.all(axis=1))


def stall_shares(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per launch, each stall reason's share of the warps resident per issue cycle (rows sum to about 1)."""
    reasons = kernels[[f"stall_{reason}" for reason in STALL_REASONS]]
    return reasons.div(kernels["stall_warps_per_issue"], axis=0).set_axis(list(STALL_REASONS), axis=1)


def _evidence(row) -> str:
    """A launch's counters in words: its ranked units, waves, occupancy and its limits, and the top waits."""
    if math.isnan(row.ncu_duration_ns):
        return f"{row.duration_ns / 1e3:.1f} us, no counters"
    ranked = ", ".join(f"{name} {pct:.0f} %" for pct, name in _ranked_units(row))
    text = (f"{row.duration_ns / 1e3:.1f} us; units by % of peak: {ranked}; waves {row.waves_per_sm:.1f}; "
            f"occupancy {row.theoretical_occupancy_pct:.0f} % theoretical")
    if not math.isnan(row.achieved_occupancy_pct):
        text += f", {row.achieved_occupancy_pct:.0f} % achieved"
    caps = ", ".join(f"{name} {getattr(row, column):.0f}" for name, column in CAPS.items())
    text += f" (blocks/SM: {caps}; {row.registers_per_thread:.0f} registers"
    shared = getattr(row, "shared_mem_bytes", math.nan)
    text += f", {shared / 1e3:.0f} KB shared/block)" if not math.isnan(shared) else ")"
    if row.top_stall:
        shares = {reason: getattr(row, f"stall_{reason}") / row.stall_warps_per_issue for reason in WAITS}
        waits = sorted(((v, k) for k, v in shares.items() if not np.isnan(v)), reverse=True)[:2]
        text += "; warps wait on " + ", ".join(f"{k.replace('_', ' ')} {100 * v:.0f} %" for v, k in waits)
        if not math.isnan(row.issue_active_pct):
            text += f" (issuing {row.issue_active_pct:.0f} % of cycles)"
    return text


def limiter_summary(frame: pd.DataFrame, category: str | None = None, top: int = 20) -> pd.DataFrame:
    """Per kernel and phase (optionally one category) of a `limiters` frame (with or without its evidence),
    largest time first: launches, time, the limiter of most of its time, and the runner-up, margin, confidence
    and evidence of its longest launch with that limiter. An instruction-level bound is said with its % of peak
    (`said`): the limiter's time-weighted over the launches it holds, as `analysis.limits.instruction_bounds` weighs a
    kernel's bound, the runner-up's that of the longest launch; too few thread blocks and a tail effect with the
    longest launch's waves. `limiter_name` is the limiter without its number: what a headline adds up by."""
    chosen = frame["category"] == category if category is not None else slice(None)
    narrow = frame.loc[chosen, ["kernel_name", "phase", "limiter", "limiter_pct", "duration_ns"]]  # not every column
    codes, names = pd.factorize(narrow["limiter"], sort=True)  # ties to the first name, as a sorted groupby
    durations, pcts = narrow["duration_ns"].to_numpy(), narrow["limiter_pct"].to_numpy()
    rows = []
    for (name, phase), at in narrow.groupby(["kernel_name", "phase"]).indices.items():
        held = at[codes[at] == _most_time(codes[at], durations[at], len(names))]
        longest = next(frame.loc[[narrow.index[held[np.argmax(durations[held])]]]].itertuples())
        measured = held[~np.isnan(pcts[held])]
        pct = (np.average(pcts[measured], weights=durations[measured])
               if len(measured) and durations[measured].sum() > 0 else math.nan)
        limiter, waves = names[codes[held[0]]], longest.waves_per_sm
        rows.append({"kernel_name": name, "phase": phase, "launches": len(at),
                     "time_ms": durations[at].sum() / 1e6, "limiter": said(limiter, pct, waves),
                     "runner_up": said(longest.runner_up, longest.runner_up_pct, waves), "margin": longest.margin,
                     "confidence": longest.confidence, "evidence": _evidence(longest), "limiter_name": limiter})
    columns = ["kernel_name", "phase", "launches", "time_ms", "limiter", "runner_up", "margin", "confidence",
               "evidence", "limiter_name"]
    table = pd.DataFrame(rows, columns=columns)
    return table.sort_values("time_ms", ascending=False, ignore_index=True).head(top)


def _most_time(codes: np.ndarray, durations: np.ndarray, count: int) -> int:
    """The limiter (code) holding most of a kernel's time, the first in name order among equals."""
    time = np.bincount(codes, weights=durations, minlength=count)
    return int(np.argmax(np.where(np.bincount(codes, minlength=count) > 0, time, -np.inf)))


def said(name: str, pct: float, waves: float = math.nan) -> str:
    """A verdict in words: the name, and where it is an instruction-level bound, its % of peak; where it is too
    few thread blocks or a tail effect, the grid's waves."""
    if name in WAVE_EXPLANATIONS and not math.isnan(waves):
        return f"{name} ({waves:.2f} waves)"
    return name if math.isnan(pct) else f"{name} at {pct:.1f} % of peak"


def stall_summary(frame: pd.DataFrame, category: str | None = None, top: int = 20) -> pd.DataFrame:
    """Per kernel and phase with warp-stall counters (optionally one category), largest time first: the time,
    the three reasons most warps wait on (`top_waits`, for a page) and each stall reason's share of the warps
    resident per issue cycle (`<reason>_share`, for the chart and the CSV), time-weighted over its launches."""
    if category is not None:
        frame = frame[frame["category"] == category]
    frame = frame[frame["stall_warps_per_issue"].notna()]
    shares = stall_shares(frame).mul(frame["duration_ns"], axis=0)
    grouped = shares.groupby([frame["kernel_name"], frame["phase"]])
    time = frame.groupby(["kernel_name", "phase"])["duration_ns"].sum()
    table = grouped.sum(min_count=1).div(time, axis=0).add_suffix("_share").reset_index()
    table.insert(2, "time_ms", (time / 1e6).to_numpy())
    waits = table[[f"{reason}_share" for reason in WAITS]]
    table.insert(3, "top_waits", [", ".join(f"{name.removesuffix('_share').replace('_', ' ')} {100 * share:.0f} %"
                                            for name, share in row.dropna().nlargest(3).items())
                                  for _, row in waits.iterrows()])
    return table.sort_values("time_ms", ascending=False, ignore_index=True).head(top)


# What each verdict says in Nsight Compute's terms. ncu's compute throughput counts the issue slots, so an
# "instruction issue" or "issue slots" verdict is a compute one there; its memory throughput counts the L1 data
# pipe's shared-memory wavefronts, so "shared memory" is a memory one; its "latency issues" (both throughputs
# low) is what ssmprof's explanations of a low unit (occupancy, waves, stalls) take apart.
VERDICT_CLASSES = {"DRAM bandwidth": "memory", "L2 bandwidth": "memory", "load/store pipe": "memory",
                   "tensor pipe": "compute", "FMA pipe": "compute", "ALU pipe": "compute",
                   "XU pipe (special functions)": "compute", "instruction issue": "compute",
                   "issue slots": "compute", "shared memory": "memory",
                   "too few thread blocks": "latency", "tail effect": "latency", NO_COUNTERS: "no counters"}
# Nsight Compute's rule results -> the class of what they point at, first match on "section rule".
RULE_CLASSES = (("occupancy", "latency"), ("launch", "latency"), ("wave", "latency"), ("tail", "latency"),
                ("stall", "latency"), ("warp state", "latency"), ("issue", "compute"), ("scheduler", "compute"),
                ("pipe", "compute"), ("compute", "compute"), ("memory", "memory"), ("cache", "memory"),
                ("coalesc", "memory"), ("l1tex", "memory"), ("dram", "memory"), ("shared", "memory"))
# The SpeedOfLight bottleneck rule's message -> its verdict, first match (the messages name the heavier side).
BOTTLENECK_MESSAGES = (("memory is more heavily utilized", "memory"), ("compute is more heavily utilized", "compute"),
                       ("latency", "latency"), ("grid is too small", "latency"), ("balanced", "balanced"),
                       ("greater than 80", "high"))
HIGH = "high"  # past 80 % of one side's peak: the heavier side, by the section's throughputs
ADVICE_TYPES = ("OPT", "WRN")  # rule results that advise (INF informs, ERR failed)


def verdict_class(limiter: str) -> str:
    """memory, compute, latency (a low unit explained by occupancy, waves or stalls) or no counters."""
    if limiter.startswith(("occupancy", "latency")):
        return "latency"
    return VERDICT_CLASSES.get(limiter, "")


def rule_class(section: str, rule: str) -> str:
    text = f"{section} {rule}".lower()
    return next((cls for word, cls in RULE_CLASSES if word in text), "")


def ncu_verdicts(rules: pd.DataFrame, metrics: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per launch of Nsight Compute's rule results (`profiler.ncu_extract.parse_details`): its bottleneck (the
    SpeedOfLight bottleneck rule's message: memory, compute, latency, balanced), the advising rule with the
    largest estimated speedup (`top_rule`, its class and speedup), every advising rule, and where the section
    metrics are given, its memory and compute (SM) throughput (% of peak)."""
    throughput = _speed_of_light(metrics)
    rows = []
    for (launch, kernel), group in rules.groupby(["launch_id", "kernel_name"], sort=True):
        solb = group[group["rule"].str.contains("Bottleneck", case=False)]
        message = " ".join(solb["description"]).lower()
        bottleneck = next((cls for phrase, cls in BOTTLENECK_MESSAGES if phrase in message), "")
        if bottleneck == HIGH:
            bottleneck = _heavier(throughput, launch)
        advice = group[group["rule_type"].isin(ADVICE_TYPES) & ~group.index.isin(solb.index)]
        advice = advice.assign(order=advice["speedup_pct"].fillna(-1)).sort_values("order", ascending=False)
        top = advice.iloc[0] if len(advice) else None
        rows.append({"launch_id": launch, "kernel_name": kernel, "ncu_bottleneck": bottleneck,
                     "ncu_top_rule": top["rule"] if top is not None else "",
                     "ncu_top_rule_class": rule_class(top["section"], top["rule"]) if top is not None else "",
                     "ncu_top_rule_speedup_pct": top["speedup_pct"] if top is not None else np.nan,
                     "ncu_rules": "; ".join(f"{r.rule} {r.speedup_pct:.0f} %" if not np.isnan(r.speedup_pct)
                                            else r.rule for r in advice.itertuples())})
    table = pd.DataFrame(rows, columns=["launch_id", "kernel_name", "ncu_bottleneck", "ncu_top_rule",
                                        "ncu_top_rule_class", "ncu_top_rule_speedup_pct", "ncu_rules"])
    for column in ("ncu_memory_pct", "ncu_compute_pct"):
        table[column] = table["launch_id"].map(throughput[column])
    return table


# The SpeedOfLight section's two throughputs, in % of peak. Other sections reuse the names in other units (Memory
# Workload Analysis prints "Memory Throughput" in Gbyte/s or Tbyte/s), so the section and the unit pick the row:
# a launch read with both once made the comparison of two Series, which has no truth value.
_SPEED_OF_LIGHT = {"Memory Throughput": "ncu_memory_pct", "Compute (SM) Throughput": "ncu_compute_pct"}


def _speed_of_light(metrics: pd.DataFrame | None) -> pd.DataFrame:
    """Per launch_id: ncu_memory_pct and ncu_compute_pct (NaN where the metrics are not given)."""
    if metrics is None:
        return pd.DataFrame(columns=list(_SPEED_OF_LIGHT.values()), dtype=float)
    section = metrics["section"].fillna("").str.replace(" ", "")  # "GPU Speed Of Light Throughput" or "SpeedOfLight"
    chosen = metrics[section.str.contains("SpeedOfLight", case=False)
                     & (metrics["unit"] == "%") & metrics["metric"].isin(list(_SPEED_OF_LIGHT))]
    table = chosen.pivot_table(index="launch_id", columns="metric", values="value", aggfunc="first")
    return table.rename(columns=_SPEED_OF_LIGHT).reindex(columns=list(_SPEED_OF_LIGHT.values()))


def _heavier(throughput: pd.DataFrame, launch: int) -> str:
    """memory or compute: the side with the larger SpeedOfLight throughput of a launch ("high" without them)."""
    if launch not in throughput.index:
        return HIGH
    memory, compute = throughput.loc[launch, "ncu_memory_pct"], throughput.loc[launch, "ncu_compute_pct"]
    return HIGH if np.isnan(memory) or np.isnan(compute) else "memory" if memory >= compute else "compute"


def agreement(verdicts: pd.DataFrame, rules: pd.DataFrame, metrics: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per launch: ssmprof's verdict (`limiters` of the same launches, joined on `launch_id`), Nsight Compute's
    (`ncu_verdicts`), and `agree`: "yes" where the verdict's class (`verdict_class`) is ncu's bottleneck or the
    class of its top rule, "runner-up" where only ssmprof's runner-up's is, "no" otherwise; `why` says where
    the two part."""
    ours = verdicts[["launch_id", "kernel_name", "limiter", "runner_up", "margin", "confidence", "top_unit",
                     "top_unit_pct"]]
    table = ours.merge(ncu_verdicts(rules, metrics).drop(columns="kernel_name"), on="launch_id", how="left")
    table["agree"] = [_agree(row) for row in table.itertuples()]
    table["why"] = [_why(row) if row.agree != "yes" else "" for row in table.itertuples()]
    return table


def _ncu_classes(row) -> set[str]:
    return {row.ncu_bottleneck, row.ncu_top_rule_class} - {""}


def _agree(row) -> str:
    if not isinstance(row.ncu_bottleneck, str):
        return "no rule results"
    ncu = _ncu_classes(row)
    if verdict_class(row.limiter) in ncu or (row.ncu_bottleneck == "balanced" and verdict_class(row.limiter) in
                                             ("memory", "compute")):
        return "yes"
    return "runner-up" if verdict_class(row.runner_up) in ncu else "no"


def _why(row) -> str:
    """Where ssmprof and Nsight Compute part, in terms of the rules each applies."""
    if row.agree == "no rule results":
        return "Nsight Compute reported no rule results for this launch"
    ours = verdict_class(row.limiter)
    memory, compute = row.ncu_memory_pct, row.ncu_compute_pct
    if row.ncu_bottleneck == "latency" and ours in ("memory", "compute"):
        return (f"{row.top_unit} at {row.top_unit_pct:.0f} % of peak: ncu calls both throughputs under 60 % latency; "
                "ssmprof calls a unit busy past half its peak the limiter (it accounts for most of the time)")
    if row.ncu_bottleneck in ("memory", "compute") and ours == "latency":
        side = memory if row.ncu_bottleneck == "memory" else compute
        return (f"ncu's {row.ncu_bottleneck} throughput {side:.0f} % is past its 60 % cut; ssmprof's busiest unit "
                f"({row.top_unit} {row.top_unit_pct:.0f} %) is under half its peak, the rest explained by "
                f"{row.limiter}")
    if row.ncu_bottleneck == "memory" and ours == "compute" and memory > row.top_unit_pct:
        return (f"ncu's memory throughput {memory:.0f} % (the busiest of DRAM, L2 and L1/TEX) exceeds ssmprof's top "
                f"unit ({row.top_unit} {row.top_unit_pct:.0f} %): L1/TEX throughput is not among ssmprof's counters")
    return (f"ssmprof: {row.limiter} (runner-up {row.runner_up}); ncu: {row.ncu_bottleneck or 'no bottleneck'}, "
            f"top rule {row.ncu_top_rule or 'none'}")
