"""Regression gate: a baseline from repeated runs, and a run judged against it so that nothing escapes by
changing shape.

A run is measured at five scopes (`SCOPES`): the total kernel time, the time per phase and per category,
per site (a kernel name launched by one op in one phase, over all its launch configurations) and per kernel
(a site's launches of one launch configuration: `GATE_KEY`). The baseline keeps, per scope and metric, the
median over its runs and their spread (median absolute deviation, scaled to a standard deviation).

`compare(baseline, current)` lines the run up with the baseline, without thresholds:
- totals, phases, categories: time (a category or phase that appears or vanishes counts from or to 0);
- a site whose launch configurations and launch counts are the baseline's: per kernel, time per launch, and
  the efficiency metrics (DRAM %, FLOP/s, hit rates) where both sides have counters that passed the
  self-checks of `analysis.trust.counter_checks` (`counter_status` measured or lent); a kernel whose counters failed or
  were never checked is "not judged" on them, never passed or failed;
- a site whose configurations changed (a Triton autotuning choice, another tile size, a kernel split into
  two configurations): the site's time, before and after, as one "config changed" check, and its efficiency
  metrics time-weighted over its configurations;
- a site only in the baseline ("removed kernel") or only in the run ("new kernel"): its whole time; except a new
  site that takes a removed one's place (same phase, launching op, configurations and launch counts: another
  variant of a library kernel), judged as a change of that site's time ("config changed", noted "kernel
  replaced"); and a new site that took the launches a kept site lost (same phase and op: a library sending
  some calls to a variant), judged with that site as one change of their summed time ("kernel partly
  replaced").

`judge(checks, thresholds)` applies the thresholds (`Thresholds`): a check regresses where it is worse than
the median by more than its band (max(relative effect, `sigmas` spreads, and for times per launch
`min_time_ns`)) and the change costs at least `min_impact` of the run's kernel time; removed and new kernels
regress on their time alone against the same impact floor (the baseline no longer describes the run: rebuild
it deliberately), efficiency only for kernels above the impact floor. `choose_thresholds` picks them on
tuning reruns; the README gives what they chose and what held-back reruns and planted regressions show,
tested in tests/test_gate_validation.py.

Pure frame logic: the baseline file is `schema.Baseline`, read and written by `pipeline.gate`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np
import pandas as pd

from ssmprof.analysis.launches.frame import LAUNCH_KEY, time_weighted_by
from ssmprof.errors import SsmprofError
from ssmprof.schema import CHECKED_STATUSES, KERNEL_COLUMNS, LAUNCH_CONFIG, PARALLEL_COLUMNS, config_label

SITE = ["kernel_name", "phase", "launch_op"]  # where a kernel is launched from: a config change keeps it
GATE_KEY = LAUNCH_KEY + ["launch_op"]  # one kernel of the gate: its site and launch configuration
ROW_KEY = ["scope", "kernel_name", "phase", "launch_op", "category", *LAUNCH_CONFIG]  # a baseline row, with `metric`
SCOPES = ("total", "phase", "category", "site", "kernel")
TIME = "time_ns"
PER_LAUNCH = "time_per_launch_ns"
LAUNCHES = "launches"
# efficiency metric -> the direction that is worse
EFFICIENCY = {"dram_throughput_pct": "lower", "flop_per_s": "lower", "l2_hit_rate_pct": "lower",
              "l1_hit_rate_pct": "lower"}
MAD_TO_SIGMA = 1.4826
# Step time and host wait (scope "step"): the host's share of a step varies widely between runs of one host, with
# a heavy tail (mamba2-lm small on one H100: 32.5-49.6 ms a step, 18.9 ms of it kernels: the slowest run 1.53x the
# fastest; the committed H100 and H200 reruns 1.30x), so a step-level change counts past this share of the
# baseline's median step time, and the host wait's too (its noise is the step's: the busy time is stable). A few
# runs' spread estimates such a tail poorly, so the step checks use this floor alone, not `sigmas` spreads. With
# every launch synchronous (CUDA_LAUNCH_BLOCKING=1) the step took 66.6 ms: 1.66x that host's median clean step.
STEP_EFFECT = 0.5
STEP_METRICS = ("step_ms", "host_wait_ms")


@dataclass(frozen=True)
class Thresholds:
    """What counts as a regression (defaults: chosen on tuning reruns by `choose_thresholds`, see README)."""

    min_effect: float = 0.05  # per kernel and site: smallest relative change that counts
    aggregate_effect: float = 0.005  # total, phase, category: smallest relative change that counts
    sigmas: float = 3.0  # noise band, in baseline standard deviations
    min_time_ns: float = 250.0  # smallest change of time per launch that counts
    min_impact: float = 0.0002  # smallest share of the run's kernel time a change must cost


# --- measuring a run


def checked_counters(kernels: pd.DataFrame) -> pd.DataFrame:
    """`kernels` with every counter and counter-derived column NaN on launches whose counters did not pass the
    self-checks (status other than measured/lent): only checked counters are gated."""
    derived = [c for c in kernels.columns if c not in KERNEL_COLUMNS and c not in PARALLEL_COLUMNS and c != "category"]
    out = kernels.copy()
    out.loc[~out["counter_status"].isin(CHECKED_STATUSES), derived] = np.nan
    return out


def _keyed(kernels: pd.DataFrame) -> pd.DataFrame:
    return kernels.assign(launch_op=kernels["launch_op"].fillna("").astype(str),
                          category=kernels["category"].astype(str))


def kernel_table(kernels: pd.DataFrame, key: list[str] = GATE_KEY) -> pd.DataFrame:
    """Per kernel (`GATE_KEY`, or per site with `SITE`): launches, time, time per launch, the efficiency
    metrics over launches with checked counters (NaN where none), and `counters`: checked, or why not (the
    most common other status)."""
    frame = checked_counters(_keyed(kernels))
    table = frame.groupby(key, as_index=False).agg(
        launches=("launch_idx", "size"), time_ns=("duration_ns", "sum"), category=("category", "first"))
    table[PER_LAUNCH] = table[TIME] / table[LAUNCHES]
    rates = time_weighted_by(frame, key, ["dram_throughput_pct", "l2_hit_rate_pct", "l1_hit_rate_pct"])
    measured = frame[frame["flops"].notna() & frame["seconds"].notna()]
    work = measured.groupby(key, as_index=False)[["flops", "seconds"]].sum()
    work["flop_per_s"] = work["flops"] / work["seconds"]
    status = frame["counter_status"].astype(str).where(~frame["counter_status"].isin(CHECKED_STATUSES), "checked")
    why = status.groupby([frame[k] for k in key]).agg(lambda s: s.value_counts().index[0]).rename("counters")
    return (table.merge(rates, on=key, how="left").merge(work[key + ["flop_per_s"]], on=key, how="left")
            .merge(why.reset_index(), on=key, how="left"))


def measure(kernels: pd.DataFrame) -> pd.DataFrame:
    """Long frame (`ROW_KEY`, metric, value) of one run at every scope; `kernels`: an `analysis_frame`."""
    frame = _keyed(kernels)
    parts = [pd.DataFrame({"scope": ["total"], "metric": [TIME], "value": [float(frame["duration_ns"].sum())]})]
    for scope, by in (("phase", ["phase"]), ("category", ["category"]), ("site", SITE)):
        grouped = frame.groupby(by, as_index=False)["duration_ns"].sum().rename(columns={"duration_ns": "value"})
        parts.append(grouped.assign(scope=scope, metric=TIME))
    # a site's efficiency over all its configurations: what a configuration change is judged on
    sites = kernel_table(kernels, SITE).melt(id_vars=SITE, value_vars=list(EFFICIENCY), var_name="metric")
    parts.append(sites.dropna(subset=["value"]).assign(scope="site"))
    table = kernel_table(kernels)
    long = table.melt(id_vars=GATE_KEY + ["category"], value_vars=[LAUNCHES, PER_LAUNCH, *EFFICIENCY],
                      var_name="metric").dropna(subset=["value"])
    parts.append(long.assign(scope="kernel"))
    out = pd.concat(parts, ignore_index=True)
    for column in ROW_KEY:
        if column in LAUNCH_CONFIG:
            out[column] = out[column].fillna(0).astype("int64") if column in out else 0
        else:
            out[column] = out[column].fillna("").astype(str) if column in out else ""
    return out[ROW_KEY + ["metric", "value"]].astype({"value": "float64"})


def build_baseline(runs: list[pd.DataFrame]) -> pd.DataFrame:
    """Long frame: `ROW_KEY` + metric, median, spread, runs (how many of the runs had the row)."""
    if len(runs) < 2:
        raise SsmprofError("a baseline needs at least 2 runs of the same configuration, to know the noise")
    long = pd.concat([measure(k).assign(run=i) for i, k in enumerate(runs)], ignore_index=True)
    grouped = long.groupby(ROW_KEY + ["metric"])["value"]
    baseline = grouped.median().rename("median").to_frame()
    baseline["spread"] = grouped.apply(lambda v: MAD_TO_SIGMA * np.median(np.abs(v - np.median(v))))
    baseline["runs"] = grouped.size()
    return baseline.reset_index()


# --- lining a run up with the baseline


def config_counts(rows: pd.DataFrame) -> pd.Series:
    """Each row's launch configuration with its launch count, e.g. "grid 4x8x4 block 128x1x1 x4"."""
    return pd.Series([f"{config_label(r)} x{int(round(r['launches']))}" for r in rows.to_dict("records")],
                     index=rows.index, dtype=object)


def _configs(rows: pd.DataFrame) -> list[str]:
    """A site's launch configurations with their launch counts, in configuration order."""
    return config_counts(rows.sort_values(LAUNCH_CONFIG)).tolist()


def _shape_change(old: list[str], new: list[str]) -> str:
    """"old -> new" of what differs ("none" for a side without any), and how many stayed as they were."""
    gone, came = [c for c in old if c not in new], [c for c in new if c not in old]
    kept = len(old) - len(gone)
    return (f"{' + '.join(gone) or 'none'} -> {' + '.join(came) or 'none'}"
            + (f" ({kept} other configuration{'s' if kept > 1 else ''} unchanged)" if kept else ""))


def _pair_up(added: list[tuple], candidates: list[tuple], fits) -> dict[tuple, tuple]:
    """New site -> the first of `candidates` that `fits(candidate, new site)`, each candidate taken at most once."""
    pairs, free = {}, list(candidates)
    for site in added:
        match = next((old for old in free if fits(old, site)), None)
        if match is not None:
            pairs[site] = match
            free.remove(match)
    return pairs


def _replacements(removed: list[tuple], added: list[tuple], shapes: dict) -> dict[tuple, tuple]:
    """New site -> the removed site it replaces: same phase and launching op, and the same launch configurations
    and counts (a library swapping one kernel for a variant, e.g. cuBLAS's `_ssched_` GEMMs without workspace).
    `shapes`: site -> (its configurations in the baseline, in the run)."""
    return _pair_up(added, removed, lambda old, new: old[1:] == new[1:] and shapes[old][0] == shapes[new][1])


def _splits(kept: list[tuple], added: list[tuple], launches: dict) -> dict[tuple, tuple]:
    """New site -> the kept site it took part of the launches of: same phase and launching op, and the launches
    the kept site lost are the new site's (a library sending some calls of one GEMM to a variant, e.g. cuBLAS
    without workspace: 9 launches became 5 of the kernel and 4 of its `_ssched_` variant). `launches`: site ->
    (in the baseline, in the run)."""
    return _pair_up(added, kept, lambda old, new: old[1:] == new[1:]
                    and launches[old][0] - launches[old][1] == launches[new][1] > 0)


@dataclass(frozen=True)
class _Sides:
    """A run lined up with a baseline: what every kind of check reads."""

    baseline: pd.DataFrame  # the baseline's rows the run is expected to have
    now: pd.DataFrame  # `measure` of the run
    current: pd.DataFrame  # the run's analysis frame
    total: float  # the run's kernel time, ns

    @property
    def base_kernels(self) -> pd.DataFrame:
        return self.baseline[self.baseline["scope"] == "kernel"]

    def base_launches(self) -> pd.DataFrame:
        kernels = self.base_kernels
        return kernels[kernels["metric"] == LAUNCHES][GATE_KEY + ["median"]].rename(columns={"median": "launches"})


@dataclass(frozen=True)
class _SiteShapes:
    """Every site of the baseline or the run, by how its launch configurations compare."""

    shapes: dict  # site -> (its configurations in the baseline, in the run)
    counts: dict  # site -> (its launches in the baseline, in the run)
    same_shape: list  # sites in both with the same configurations and launch counts: judged per kernel
    changed: list  # sites in both whose configurations or launch counts changed: judged as one change of time


def _aggregate_checks(sides: _Sides) -> list[pd.DataFrame]:
    """Totals, phases, categories: time; what vanished or appeared counts from or to 0. `kernel_band`: the root
    sum of squares of the times of the baseline's kernels in it (independent noise adds so): an aggregate of one
    kernel is allowed that kernel's band, one of many kernels less, relative to its time."""
    base_k = sides.base_kernels
    per_launch = base_k[base_k["metric"] == PER_LAUNCH].set_index(GATE_KEY)
    kernel_time = per_launch["median"] * base_k[base_k["metric"] == LAUNCHES].set_index(GATE_KEY)["median"]
    squares = per_launch[["category"]].assign(square=kernel_time**2).reset_index()
    checks = []
    for scope in ("total", "phase", "category"):
        base, cur = sides.baseline[sides.baseline["scope"] == scope], sides.now[sides.now["scope"] == scope]
        merged = base.merge(cur, on=ROW_KEY + ["metric"], how="outer")
        if scope == "total":
            merged["kernel_band"] = np.sqrt(squares["square"].sum())
        else:
            merged["kernel_band"] = merged[scope].map(np.sqrt(squares.groupby(scope)["square"].sum()))
        merged["median"] = merged["median"].fillna(0.0)
        merged["spread"] = merged["spread"].fillna(0.0)
        merged["current"] = merged["value"].fillna(0.0)
        merged["check"] = scope
        checks.append(merged)
    return checks


def _site_shapes(sides: _Sides) -> _SiteShapes:
    """Each site's launch configurations and counts on both sides."""
    base_k, now = sides.base_kernels, sides.now
    base_shape = base_k[base_k["metric"] == LAUNCHES].rename(columns={"median": "launches"})
    now_shape = now[(now["scope"] == "kernel") & (now["metric"] == LAUNCHES)].rename(columns={"value": "launches"})
    base_sites = _site_times(sides.baseline, "median").index
    now_sites = _site_times(now, "value").index
    old_by_site = {site: rows for site, rows in base_shape.groupby(SITE)}
    new_by_site = {site: rows for site, rows in now_shape.groupby(SITE)}
    empty = base_shape.iloc[:0]
    result = _SiteShapes({}, {}, [], [])
    for site in base_sites.union(now_sites):
        old, new = old_by_site.get(site, empty), new_by_site.get(site, empty)
        result.shapes[site] = (_configs(old), _configs(new))
        result.counts[site] = (float(old["launches"].sum()), float(new["launches"].sum()))
        if site in base_sites and site in now_sites:
            same = result.shapes[site][0] == result.shapes[site][1]
            (result.same_shape if same else result.changed).append(site)
    return result


def _site_times(rows: pd.DataFrame, column: str) -> pd.DataFrame:
    """The site-scope time rows of a baseline (`column` "median") or a measured run ("value"), by site."""
    return rows[(rows["scope"] == "site") & (rows["metric"] == TIME)].set_index(SITE)


def _shape_checks(sides: _Sides, sites: _SiteShapes) -> list[pd.DataFrame]:
    """One check of a site's time per site whose shape changed: "config changed" (also a kernel replaced by a
    variant, or partly replaced), "new kernel", "removed kernel"."""
    base_sites, now_sites = _site_times(sides.baseline, "median"), _site_times(sides.now, "value")
    shapes, counts = sites.shapes, sites.counts
    added = [s for s in shapes if s not in base_sites.index]
    replaced = _replacements([s for s in shapes if s not in now_sites.index], added, shapes)
    split = _splits([s for s in shapes if s in base_sites.index and s in now_sites.index],
                    [s for s in added if s not in replaced], counts)
    parts = {kept: new for new, kept in split.items()}  # a kept site and the new site that took its launches
    rows = []
    for site, (old_shape, new_shape) in shapes.items():
        if site in sites.same_shape or site in replaced.values() or site in split:
            continue
        former = replaced.get(site)
        was = former or site
        median = float(base_sites.loc[was, "median"]) if was in base_sites.index else 0.0
        spread = float(base_sites.loc[was, "spread"]) if was in base_sites.index else 0.0
        value = sum(float(now_sites.loc[s, "value"]) for s in (site, parts.get(site)) if s in now_sites.index)
        kind = ("config changed" if former or (site in base_sites.index and site in now_sites.index)
                else "new kernel" if site not in base_sites.index else "removed kernel")
        change = f"{(value - median) / 1000:+.1f} us"
        partner = parts.get(site)
        note = (f"kernel replaced: {former[0]} -> {site[0]} ({' + '.join(new_shape)}), {change}" if former else
                f"kernel partly replaced: {int(counts[site][0])} launches -> {int(counts[site][1])} + "
                f"{int(counts[partner][1])} of {partner[0]}, {change}" if partner else
                {"new kernel": f"new kernel: {' + '.join(new_shape)}, {change}",
                 "removed kernel": f"removed kernel: {' + '.join(old_shape)}, {change}",
                 "config changed": f"config changed: {_shape_change(old_shape, new_shape)}, {change}"}[kind])
        rows.append({**dict(zip(SITE, site, strict=True)), "scope": "site", "metric": TIME, "check": kind,
                     "median": median, "spread": spread, "current": value, "launches": counts[was][0], "note": note})
    return [pd.DataFrame(rows)] if rows else []


def _kernel_now(current: pd.DataFrame) -> pd.DataFrame:
    table = kernel_table(current).rename(columns={"launches": "launches_now"})
    table["launch_op"] = table["launch_op"].astype(str)
    return table


def _kernel_checks(sides: _Sides, sites: _SiteShapes, kernel_now: pd.DataFrame) -> list[pd.DataFrame]:
    """Kernels of sites whose shape is unchanged: time per launch."""
    base_k = sides.base_kernels
    per_launch = base_k[base_k["metric"] == PER_LAUNCH].merge(sides.base_launches(), on=GATE_KEY, how="left")
    site_index = pd.MultiIndex.from_frame(per_launch[SITE])
    per_launch = per_launch[site_index.isin(pd.Index(sites.same_shape))] if sites.same_shape else per_launch.iloc[:0]
    timed = per_launch.merge(kernel_now[GATE_KEY + [PER_LAUNCH]], on=GATE_KEY, how="left")
    return [timed.rename(columns={PER_LAUNCH: "current"}).assign(check="kernel")]


def _efficiency_checks(sides: _Sides, sites: _SiteShapes, kernel_now: pd.DataFrame) -> list[pd.DataFrame]:
    """Efficiency: per kernel wherever the kernel is in both, on checked counters; per site (time-weighted over
    its configurations) where the configurations changed."""
    base_k = sides.base_kernels
    kernel_eff = base_k[base_k["metric"].isin(list(EFFICIENCY))].merge(sides.base_launches(), on=GATE_KEY,
                                                                        how="left")
    kernel_eff = kernel_eff.merge(kernel_now, on=GATE_KEY, how="inner", suffixes=("", "_now"))
    site_now = kernel_table(sides.current, SITE).assign(launch_op=lambda f: f["launch_op"].astype(str))
    base = sides.baseline
    site_eff = base[(base["scope"] == "site") & base["metric"].isin(list(EFFICIENCY))]
    site_eff = site_eff[pd.MultiIndex.from_frame(site_eff[SITE]).isin(pd.Index(sites.changed))] if sites.changed \
        else site_eff.iloc[:0]
    site_eff = site_eff.merge(site_now.drop(columns=["category"]), on=SITE, how="inner")
    efficiency = pd.concat([kernel_eff, site_eff], ignore_index=True)
    if not len(efficiency):
        return []
    values = efficiency[list(EFFICIENCY)].to_numpy()
    column = efficiency["metric"].map({name: i for i, name in enumerate(EFFICIENCY)}).to_numpy()
    efficiency["current"] = values[np.arange(len(efficiency)), column]
    efficiency["judged"] = efficiency["current"].notna()
    why = "not judged: counters " + efficiency["counters"].astype(str)
    efficiency["note"] = np.where(efficiency["judged"], "", why)
    efficiency["kernel_share"] = efficiency[TIME] / sides.total
    return [efficiency[ROW_KEY + ["metric", "median", "spread", "runs", "launches", "current", "judged", "note",
                                  "kernel_share"]].assign(check="efficiency")]


CHECK_ORDER = ["total", "phase", "category", "config changed", "new kernel", "removed kernel", "kernel", "efficiency"]


def _finished(table: pd.DataFrame, total: float) -> pd.DataFrame:
    """The checks of every kind as one table: key columns filled, `worse_by`, `impact`, sorted by kind and
    impact."""
    for column in ROW_KEY:
        table[column] = table[column].fillna(0 if column in LAUNCH_CONFIG else "")
    table = table.astype({c: "int64" for c in LAUNCH_CONFIG})
    table["note"] = table["note"].fillna("") if "note" in table else ""
    table["judged"] = table["judged"].fillna(True).astype(bool) if "judged" in table else True
    higher = table["metric"].map(EFFICIENCY).fillna("higher") == "higher"
    table["worse_by"] = np.where(higher, table["current"] - table["median"], table["median"] - table["current"])
    cost = np.where(table["check"] == "kernel", table["worse_by"] * table["launches"],
                    np.where(table["check"] == "removed kernel", table["median"], table["worse_by"]))
    table["impact"] = cost / total if total else np.nan
    table.loc[table["check"] == "efficiency", "impact"] = np.nan  # a rate's change costs no time of its own
    if "kernel_share" not in table:  # the share of the run's time of an efficiency check's kernel or site
        table["kernel_share"] = np.nan
    kernel = table["check"] == "kernel"
    table.loc[kernel, "judged"] = table.loc[kernel, "current"].notna()
    table.loc[kernel & ~table["judged"], "note"] = "kernel not launched with this configuration"
    order = {name: i for i, name in enumerate(CHECK_ORDER)}
    table["rank"] = -table["impact"].fillna(table["kernel_share"])
    table = table.sort_values(["check", "rank"], key=lambda s: s.map(order) if s.name == "check" else s,
                              kind="stable", ignore_index=True)
    return table[["check", *ROW_KEY, "metric", "median", "spread", "current", "worse_by", "impact", "launches",
                  "kernel_band", "kernel_share", "judged", "note"]]


def compare(baseline: pd.DataFrame, current: pd.DataFrame) -> pd.DataFrame:
    """Every check of a run against `baseline` (from `build_baseline`), no thresholds yet: `check` (total,
    phase, category, kernel, config changed, removed kernel, new kernel, efficiency), `scope`, the key
    columns, metric, median, spread, current, worse_by (positive: worse), `impact` (share of the run's kernel
    time the change costs; NaN for efficiency), `launches` (the baseline's), `kernel_band` (aggregates: root
    sum of squares of their kernels' times), `kernel_share` (efficiency: the kernel's or site's share of the
    run's kernel time), `note`, and `judged` (False: counters not checked, see `note`). The checks of each
    kind come from one function each, concatenated."""
    # a site or kernel found in at most half of the baseline's runs is not part of what the baseline expects
    runs = int(baseline["runs"].max()) if len(baseline) else 0
    expected = baseline[~baseline["scope"].isin(["site", "kernel"]) | (2 * baseline["runs"] > runs)]
    total = float(current["duration_ns"].sum())
    sides = _Sides(expected, measure(current), current, total)
    sites = _site_shapes(sides)
    kernel_now = _kernel_now(current)
    checks = [*_aggregate_checks(sides), *_shape_checks(sides, sites), *_kernel_checks(sides, sites, kernel_now),
              *_efficiency_checks(sides, sites, kernel_now)]
    return _finished(pd.concat(checks, ignore_index=True), total)


def judge(checks: pd.DataFrame, thresholds: Thresholds = Thresholds()) -> pd.DataFrame:
    """`checks` (from `compare`) with `allowed` (the band a change must exceed) and `regressed`."""
    t = thresholds
    table = checks.copy()
    aggregate = table["check"].isin(["total", "phase", "category"])
    step = table["check"] == "step"  # step time and host wait: STEP_EFFECT of the baseline's step time
    effect = np.select([aggregate, step], [t.aggregate_effect, 0.0], t.min_effect)
    floor = np.select([table["check"] == "kernel", table["check"] == "config changed"],
                      [t.min_time_ns, t.min_time_ns * table["launches"].fillna(0)], 0.0)
    band = np.where(step, STEP_EFFECT, t.min_effect) * table["kernel_band"].fillna(0)
    table["allowed"] = np.maximum.reduce([effect * table["median"].abs(), t.sigmas * table["spread"].fillna(0),
                                          floor, band])
    table.loc[step, "allowed"] = band[step]
    shape = table["check"].isin(["new kernel", "removed kernel"])  # their whole time against the floors
    table.loc[shape, "allowed"] = t.min_time_ns
    efficiency = table["check"] == "efficiency"
    over_floor = np.where(efficiency, table["kernel_share"].fillna(0) >= t.min_impact,
                          table["impact"] >= t.min_impact)
    beyond = np.where(shape, np.maximum(table["current"], table["median"]) > t.min_time_ns,
                      table["worse_by"] > table["allowed"])
    table["regressed"] = table["judged"] & beyond & over_floor
    return table


def build_step_baseline(steps: list[pd.DataFrame]) -> pd.DataFrame:
    """Baseline rows (scope "step") of step time and host wait over runs; `steps`: one frame (metric, value) per
    run, as `analysis.change.history.step_rows` makes them."""
    long = pd.concat([s[s["metric"].isin(STEP_METRICS)].assign(run=i) for i, s in enumerate(steps)])
    grouped = long.groupby("metric")["value"]
    table = pd.DataFrame({"median": grouped.median(), "runs": grouped.size(),
                          "spread": grouped.apply(lambda v: MAD_TO_SIGMA * np.median(np.abs(v - np.median(v))))})
    table = table.reset_index().assign(scope="step")
    for column in ROW_KEY[1:]:
        table[column] = 0 if column in LAUNCH_CONFIG else ""
    return table[ROW_KEY + ["metric", "median", "spread", "runs"]]


def step_checks(baseline: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """The checks of a run's step time and host wait (`steps`: its step rows) against the baseline's step rows,
    in `compare`'s columns, `check` "step"; `kernel_band` holds the baseline's step time (the band's base for
    both, `STEP_EFFECT`). None where the baseline holds no step rows (built before they were recorded)."""
    base = baseline[baseline["scope"] == "step"].set_index("metric")
    if not set(STEP_METRICS) <= set(base.index):
        return pd.DataFrame()
    now = steps.set_index("metric")["value"]
    rows = []
    for metric in STEP_METRICS:
        median, current = float(base.loc[metric, "median"]), float(now[metric])
        rows.append({"check": "step", "scope": "step", "metric": metric, "median": median,
                     "spread": float(base.loc[metric, "spread"]), "current": current, "worse_by": current - median,
                     "impact": (current - median) / float(base.loc["step_ms", "median"]),
                     "launches": np.nan, "kernel_band": float(base.loc["step_ms", "median"]),
                     "kernel_share": np.nan, "judged": True, "note": ""})
    table = pd.DataFrame(rows)
    for column in ROW_KEY[1:]:
        table[column] = 0 if column in LAUNCH_CONFIG else ""
    return table


def regressions(baseline: pd.DataFrame, current: pd.DataFrame, thresholds: Thresholds = Thresholds()) -> pd.DataFrame:
    """`judge(compare(baseline, current), thresholds)`: every check of a run, with `regressed`."""
    return judge(compare(baseline, current), thresholds)


# --- choosing the thresholds on tuning reruns

LADDERS: dict[str, tuple[float, ...]] = {
    "min_impact": (0.0, 0.0002, 0.0005, 0.001, 0.002, 0.005),
    "min_time_ns": (0.0, 250.0, 500.0, 1000.0, 2000.0, 4000.0),
    "aggregate_effect": (0.0025, 0.005, 0.01, 0.02, 0.05),
    "min_effect": (0.01, 0.02, 0.05, 0.1, 0.2),
}


def choose_thresholds(checks: list[pd.DataFrame], ladders: dict[str, tuple[float, ...]] = LADDERS,
                      margin_steps: int = 1, sigmas: float = 3.0) -> Thresholds:
    """The thresholds a set of clean tuning reruns (their `compare` frames) allow: start with every threshold
    at the loosest value of its ladder, lower each in turn (the order of `ladders`) to the tightest value that
    leaves every tuning rerun without an alarm, then step back `margin_steps` up the ladder (a few reruns
    do not show all the noise there is)."""
    chosen = Thresholds(sigmas=sigmas, **{name: ladder[-1] for name, ladder in ladders.items()})

    def quiet(candidate: Thresholds) -> bool:
        return not any(judge(c, candidate)["regressed"].any() for c in checks)

    if not quiet(chosen):
        raise SsmprofError("the tuning reruns alarm even at the loosest thresholds")
    for name, ladder in ladders.items():
        tightest = len(ladder) - 1
        for i in range(len(ladder) - 1, -1, -1):
            if not quiet(replace(chosen, **{name: ladder[i]})):
                break
            tightest = i
        chosen = replace(chosen, **{name: ladder[min(tightest + margin_steps, len(ladder) - 1)]})
    return chosen


THRESHOLD_NAMES = [f.name for f in fields(Thresholds)]
