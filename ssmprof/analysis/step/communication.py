"""Communication of a tensor/data-parallel run: collectives per layer against the model's structure, bus
bandwidth against the link, exposed communication, rank imbalance, and a projection to other GPU counts
and links. Pure frames: the kernel table of a merged multi-rank run (`rank`, `layer`, `layer_kind`,
`collective`, `message_bytes`, `group_size`), run.json's `parallel` section, and a links table.

Predicted counts. Every tensor-parallel layer is made of three pieces, whose collectives follow from the
Megatron-style rules mamba-ssm's parallel linears implement (`mamba_ssm.distributed.tensor_parallel`):
a column-parallel input (without sequence parallelism: nothing forward, an all-reduce of the input
gradient backward; with it: an all-gather forward, and backward the input all-gathered again for the
weight gradient plus a reduce-scatter of the input gradient), a row-parallel output (without: an
all-reduce forward; with: a reduce-scatter forward and an all-gather of its gradient backward), and for
Mamba-1 a shared all-reduce of x_proj's output (forward and backward). Mamba-2, attention and the MLP are
column + row; Mamba-1 is column + shared + row. So at TP > 1 without sequence parallelism a Mamba-2
layer all-reduces once forward and once backward, a Mamba-1 layer twice each way.

HolisticTraceAnalysis (0.5.0, read for this): its `get_comm_comp_overlap` is, per rank, the time where
merged communication and merged computation kernel intervals overlap over the communication time, on GPU
kernel events only (stream != -1, NCCL kernels by name); its straggler analysis compares NCCL kernel
durations across ranks. It reads a folder of per-rank raw Kineto trace files (a run directory keeps the
merged table, not the traces), finds nothing in the CPU (gloo) runs, which have no GPU kernels, and
installs jupyterlab and pytest as dependencies. `exposed_communication` computes the same quantity
(`overlap_pct`) on the merged table, on GPU and CPU runs alike; `rank_imbalance` stands for the straggler view.
"""

from __future__ import annotations

import math
from datetime import datetime

import pandas as pd

from ssmprof.analysis.launches.categories import WAITING
from ssmprof.analysis.step.host import busy_ns
from ssmprof.analysis.trust.noise import kept_steps, ratio_interval
from ssmprof.schema import BACKWARD, FORWARD, Link, ParallelSection, Run, RunInfo

ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER = "all_reduce", "all_gather", "reduce_scatter"
_PIECES = {
    ("column", False): {FORWARD: {}, BACKWARD: {ALL_REDUCE: 1}},
    ("column", True): {FORWARD: {ALL_GATHER: 1}, BACKWARD: {ALL_GATHER: 1, REDUCE_SCATTER: 1}},
    ("row", False): {FORWARD: {ALL_REDUCE: 1}, BACKWARD: {}},
    ("row", True): {FORWARD: {REDUCE_SCATTER: 1}, BACKWARD: {ALL_GATHER: 1}},
    ("shared", False): {FORWARD: {ALL_REDUCE: 1}, BACKWARD: {ALL_REDUCE: 1}},
    ("shared", True): {FORWARD: {ALL_REDUCE: 1}, BACKWARD: {ALL_REDUCE: 1}},
}
LAYER_PIECES = {"mamba2": ("column", "row"), "mamba1": ("column", "shared", "row"),
                "attention": ("column", "row"), "mlp": ("column", "row")}
# NCCL-tests' bus-bandwidth factor of a ring over n ranks, and the ring's steps (the projection's alpha term).
BUS_FACTOR = {ALL_REDUCE: lambda n: 2 * (n - 1) / n, ALL_GATHER: lambda n: (n - 1) / n,
              REDUCE_SCATTER: lambda n: (n - 1) / n, "broadcast": lambda n: 1.0}
RING_STEPS = {ALL_REDUCE: lambda n: 2 * (n - 1), ALL_GATHER: lambda n: n - 1, REDUCE_SCATTER: lambda n: n - 1,
              "broadcast": lambda n: n - 1}


def predicted_counts(kind: str, sequence_parallel: bool) -> dict[str, dict[str, int]]:
    """phase -> collective -> count of one layer of `kind` at TP > 1 (see the module docstring)."""
    counts: dict[str, dict[str, int]] = {FORWARD: {}, BACKWARD: {}}
    for piece in LAYER_PIECES[kind]:
        for phase, collectives in _PIECES[(piece, sequence_parallel)].items():
            for collective, n in collectives.items():
                counts[phase][collective] = counts[phase].get(collective, 0) + n
    return counts


def described_rank(info: RunInfo) -> int | None:
    """The rank whose kernels a multi-rank run's kernel analyses describe (breakdown, roofline, limiters, host,
    findings): the one Nsight Compute profiled, else rank 0; None for a single-GPU run. TP ranks run the same
    kernels on their shards, so one rank is the per-GPU view; summed over ranks, times would count every GPU."""
    parallel = info.parallel
    if not parallel:
        return None
    return 0 if parallel.counters_rank is None else parallel.counters_rank


def one_rank(kernels: pd.DataFrame, info: RunInfo) -> pd.DataFrame:
    """The kernels of `described_rank` (all of them for a single-GPU run), each collective split into its transfer
    and its waiting for the other ranks (`with_waiting_category`)."""
    rank = described_rank(info)
    if rank is None:
        return kernels
    split = with_waiting_category(transfer_split(kernels))
    return split[split["rank"] == rank]


def collectives(kernels: pd.DataFrame) -> pd.DataFrame:
    return kernels[kernels["collective"].fillna("") != ""]


def with_transfer_times(kernels: pd.DataFrame) -> pd.DataFrame:
    """The collectives of a run, each with `transfer_ns` (the part of its kernel time that moved data), `wait_ns`
    (the rest: waiting for the other ranks) and `paired`.

    A collective's kernel starts on each rank when that rank reaches it and ends once every rank has: on all but
    the last rank to arrive its duration includes waiting (2 H200s, mamba2-lm TP=2: one rank's collectives took
    55 ms of a backward pass in which the other's took 5 ms). Where every rank launches the same sequence of
    collectives over the whole world (kind and size agree, one group), the i-th collective of each rank is the
    same collective; its transfer time is its shortest kernel over the ranks (the last to arrive waits for no one).
    Elsewhere (one rank, TP x DP groups interleaving, sequences that disagree) the whole kernel counts as
    transfer and `paired` is False."""
    comm = collectives(kernels).sort_values(["rank", "launch_idx"])
    comm = comm.assign(instance=comm.groupby("rank").cumcount())
    ranks = comm["rank"].nunique()
    sequences = [tuple(zip(group["collective"], group["message_bytes"], strict=True))
                 for _, group in comm.groupby("rank")]
    # gloo records no group for its all-reduces (-1): where every recorded group is the world, theirs is too
    whole_world = "group_size" in comm and ((comm["group_size"] == ranks) | (comm["group_size"] <= 0)).all()
    if ranks > 1 and whole_world and all(seq == sequences[0] for seq in sequences):
        transfer = comm.groupby("instance")["duration_ns"].transform("min")
        return comm.assign(transfer_ns=transfer, wait_ns=comm["duration_ns"] - transfer, paired=True)
    return comm.assign(transfer_ns=comm["duration_ns"], wait_ns=0, paired=False)


def transfer_split(kernels: pd.DataFrame) -> pd.DataFrame:
    """Every rank's kernels with each collective cut to its transfer part (`duration_ns` = transfer, started
    when the waiting ends) and `wait_ns` (0 on compute kernels): the frame busy time and the category split read."""
    comm = with_transfer_times(kernels)
    frame = kernels.assign(wait_ns=0)
    frame.loc[comm.index, "wait_ns"] = comm["wait_ns"].to_numpy()
    return frame.assign(start_ns=frame["start_ns"] + frame["wait_ns"],
                        duration_ns=frame["duration_ns"] - frame["wait_ns"])


def with_waiting_category(kernels: pd.DataFrame) -> pd.DataFrame:
    """`kernels` (`transfer_split`, an `analysis_frame`) with each collective's waiting apart: the collective's
    row keeps its transfer time, and a second row, "<kernel> (waiting)" of category WAITING, holds the rest, so
    every view by category or kernel (breakdown, compare, history, gate) shows transfer and waiting apart."""
    waits = kernels[kernels["wait_ns"] > 0]
    waiting = waits.assign(kernel_name=waits["kernel_name"] + " (waiting)", category=WAITING,
                           start_ns=waits["start_ns"] - waits["wait_ns"], duration_ns=waits["wait_ns"])
    return pd.concat([kernels, waiting], ignore_index=True)


def collective_counts(kernels: pd.DataFrame, sequence_parallel: bool) -> pd.DataFrame:
    """Per layer kind, phase and collective: the count per layer the run shows on every rank (min and max over
    layers and ranks), the count the structure predicts, whether they agree, the median message size and
    the mean time per layer. Rows for collectives the prediction has but the run lacks are kept (0)."""
    comm = collectives(kernels)
    comm = comm[(comm["layer"] >= 0) & comm["phase"].isin((FORWARD, BACKWARD))]
    layers = kernels.loc[kernels["layer"] >= 0, ["rank", "layer", "layer_kind"]].drop_duplicates()
    expected = [{"layer_kind": kind, "phase": phase, "collective": collective, "predicted": n}
                for kind in layers["layer_kind"].unique() if kind in LAYER_PIECES
                for phase, counts in predicted_counts(kind, sequence_parallel).items()
                for collective, n in counts.items()]
    seen = comm.groupby(["layer_kind", "phase", "collective"])[[]].size().index.to_frame(index=False)
    keys = pd.concat([pd.DataFrame(expected, columns=["layer_kind", "phase", "collective", "predicted"])
                      .drop(columns="predicted"), seen], ignore_index=True).drop_duplicates()
    rows = []
    for key in keys.itertuples(index=False):
        these = layers[layers["layer_kind"] == key.layer_kind]
        mine = comm[(comm["layer_kind"] == key.layer_kind) & (comm["phase"] == key.phase)
                    & (comm["collective"] == key.collective)]
        per_layer = (mine.groupby(["rank", "layer"]).size()
                     .reindex(pd.MultiIndex.from_frame(these[["rank", "layer"]]), fill_value=0))
        predicted = next((e["predicted"] for e in expected if (e["layer_kind"], e["phase"], e["collective"])
                          == (key.layer_kind, key.phase, key.collective)), 0)
        rows.append({"layer_kind": key.layer_kind, "phase": key.phase, "collective": key.collective,
                     "layers": these["layer"].nunique(), "measured_min": int(per_layer.min()),
                     "measured_max": int(per_layer.max()), "predicted": predicted,
                     "matches": bool(per_layer.min() == per_layer.max() == predicted),
                     "message_bytes": float(mine["message_bytes"].median()) if len(mine) else float("nan"),
                     "time_per_layer_us": float(mine["duration_ns"].sum() / max(len(per_layer), 1) / 1e3)})
    return pd.DataFrame(rows).sort_values(["layer_kind", "phase", "collective"], ignore_index=True)


def _group_sizes(comm: pd.DataFrame, tp: int) -> pd.Series:
    """Each collective's group size; where not recorded (gloo all-reduces), the TP degree."""
    return comm["group_size"].where(comm["group_size"] > 0, tp)


def bus_bandwidth(kernels: pd.DataFrame, tp: int, link_gb_s: float | None) -> pd.DataFrame:
    """Per phase, collective and message size: count (over all ranks), mean transfer time and mean wait
    (`with_transfer_times`), NCCL-tests algorithm and bus bandwidth on the transfer time (busbw = size / time x
    the ring factor; NCCL-tests starts all ranks together, so its times hold no wait either), and busbw as % of
    the link's datasheet bandwidth (NaN: no link)."""
    comm = with_transfer_times(kernels)
    comm = comm.assign(ranks=_group_sizes(comm, tp))
    table = (comm.groupby(["phase", "collective", "message_bytes", "ranks"], as_index=False)
             .agg(count=("transfer_ns", "size"), mean_us=("transfer_ns", lambda d: d.mean() / 1e3),
                  wait_mean_us=("wait_ns", lambda d: d.mean() / 1e3)))
    algbw = table["message_bytes"] / (table["mean_us"] * 1e3)  # bytes/ns = GB/s
    factor = [BUS_FACTOR.get(c, lambda n: 1.0)(n) for c, n in zip(table["collective"], table["ranks"], strict=True)]
    table = table.assign(algbw_gb_per_s=algbw, busbw_gb_per_s=algbw * factor)
    return table.assign(pct_of_link=100 * table["busbw_gb_per_s"] / link_gb_s if link_gb_s else float("nan"))


def _exposed_ns(comm: pd.DataFrame, compute: pd.DataFrame) -> tuple[int, int]:
    """(time the `comm` intervals cover, the part of it no `compute` interval covers): union lengths of
    `host.busy_ns`, by inclusion-exclusion."""
    comm_ns = busy_ns(comm)
    return comm_ns, busy_ns(pd.concat([comm, compute])) - busy_ns(compute)


def exposed_communication(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per rank and phase: communication time (union of its collectives' kernels), the part no compute interval
    of the same rank overlaps (exposed) and the overlapped share (HolisticTraceAnalysis' comm/comp overlap, on
    the merged table; GPU: kernels, CPU: ops and gloo work); then the same split of the kernels' transfer part
    (`with_transfer_times`: the end of each kernel, its shortest duration over the ranks), `exposed_transfer_us`,
    and `wait_us`, the time this rank's collectives waited for the others (a rank imbalance, not a link cost)."""
    rows = []
    comm = with_transfer_times(kernels)
    compute = kernels[kernels["collective"].fillna("") == ""]
    transfer = comm.assign(start_ns=comm["start_ns"] + comm["wait_ns"], duration_ns=comm["transfer_ns"])
    for (rank, phase), group in kernels.groupby(["rank", "phase"]):
        mine = (comm["rank"] == rank) & (comm["phase"] == phase)
        theirs = compute[(compute["rank"] == rank) & (compute["phase"] == phase)]
        comm_ns, exposed_ns = _exposed_ns(comm[mine], theirs)
        transfer_ns, exposed_transfer_ns = _exposed_ns(transfer[mine], theirs)
        end = group["start_ns"] + group["duration_ns"]
        rows.append({"rank": rank, "phase": phase, "collectives": int(mine.sum()),
                     "comm_us": comm_ns / 1e3, "exposed_us": exposed_ns / 1e3,
                     "overlap_pct": 100 * (1 - exposed_ns / comm_ns) if comm_ns else float("nan"),
                     "wait_us": comm.loc[mine, "wait_ns"].sum() / 1e3, "transfer_us": transfer_ns / 1e3,
                     "exposed_transfer_us": exposed_transfer_ns / 1e3,
                     "phase_span_us": (end.max() - group["start_ns"].min()) / 1e3})
    return pd.DataFrame(rows)


# A rank's entries that are tables of their own, not a number of its row (`host_time.rank_hosts` reads them)
RANK_DETAIL = ("process", "host_time")


def per_rank(kernels: pd.DataFrame, info: RunInfo) -> pd.DataFrame:
    """One row per rank: its step time, final loss, launches, compute time, and its collectives' time split into
    transfer and waiting for the other ranks (`with_transfer_times`)."""
    is_comm = kernels["collective"].fillna("") != ""
    times = kernels.assign(compute=kernels["duration_ns"].where(~is_comm, 0)).groupby("rank").agg(
        launches=("launch_idx", "size"), compute_ms=("compute", "sum"))
    comm = with_transfer_times(kernels).groupby("rank").agg(comm_ms=("duration_ns", "sum"),
                                                            transfer_ms=("transfer_ns", "sum"),
                                                            wait_ms=("wait_ns", "sum"))
    times = times.join(comm).fillna(0.0)
    times[["compute_ms", "comm_ms", "transfer_ms", "wait_ms"]] /= 1e6
    ranks = pd.DataFrame(info.parallel.ranks if info.parallel else []).set_index("rank")
    ranks = ranks.drop(columns=[name for name in RANK_DETAIL if name in ranks])
    return ranks.join(times, how="outer").reset_index()


def rank_imbalance(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per phase: each rank's span (first start to last end) and compute time; the slowest and fastest rank,
    and how much longer the slowest is (a TP step waits for its slowest rank at every collective)."""
    frame = kernels.assign(end_ns=kernels["start_ns"] + kernels["duration_ns"],
                           compute=kernels["duration_ns"].where(kernels["collective"].fillna("") == "", 0))
    spans = frame.groupby(["phase", "rank"]).agg(start=("start_ns", "min"), end=("end_ns", "max"),
                                                  compute_ns=("compute", "sum")).reset_index()
    spans = spans.assign(span_ns=spans["end"] - spans["start"])
    rows = []
    for phase, group in spans.groupby("phase"):
        slow, fast = group.loc[group["compute_ns"].idxmax()], group.loc[group["compute_ns"].idxmin()]
        rows.append({"phase": phase, "ranks": len(group), "slowest_rank": int(slow["rank"]),
                     "fastest_rank": int(fast["rank"]), "compute_max_us": slow["compute_ns"] / 1e3,
                     "compute_min_us": fast["compute_ns"] / 1e3,
                     "imbalance_pct": 100 * (slow["compute_ns"] / fast["compute_ns"] - 1) if fast["compute_ns"] else
                     float("nan"), "span_max_us": group["span_ns"].max() / 1e3,
                     "span_min_us": group["span_ns"].min() / 1e3})
    return pd.DataFrame(rows)


def project_communication(kernels: pd.DataFrame, links: pd.DataFrame, world_sizes: list[int],
                          rank: int = 0) -> pd.DataFrame:
    """A PROJECTION, not a measurement: one rank's communication time per step at other TP degrees and over
    other links, from the collectives this run measured (count and NCCL-tests size per phase).

    Model: a ring collective over n ranks of size S takes (alpha-beta) t = steps(n) * alpha + S * f(n) / B,
    with steps and the bus factor f of `RING_STEPS` / `BUS_FACTOR` (all-reduce 2(n-1) steps and 2(n-1)/n;
    all-gather and reduce-scatter n-1 and (n-1)/n), B the link's per-direction datasheet bandwidth and alpha
    its assumed per-step latency (`links.latency_us`). S is held at the measured size: in these models a
    collective carries a whole activation or gradient (B x L x d_model, or all replicated gradients), which
    does not shrink with more TP ranks; the count per layer does not change either. It ignores overlap with
    compute, contention and NCCL's protocol and algorithm choices (tree, LL/LL128): a lower bound of the
    exposed time if nothing overlapped, at the link's peak."""
    comm = collectives(kernels)
    comm = comm[comm["rank"] == rank]
    sizes = comm.groupby(["phase", "collective", "message_bytes"]).size().rename("count").reset_index()
    rows = []
    for link in links.itertuples(index=False):
        for n in world_sizes:
            for row in sizes.itertuples(index=False):
                steps = RING_STEPS.get(row.collective, lambda k: k - 1)(n)
                factor = BUS_FACTOR.get(row.collective, lambda k: 1.0)(n)
                seconds = steps * link.latency_us * 1e-6 + row.message_bytes * factor / (link.gb_s * 1e9)
                rows.append({"link": link.name, "world_size": n, "phase": row.phase, "collective": row.collective,
                             "message_bytes": row.message_bytes, "count": row.count,
                             "projected_us": row.count * seconds * 1e6})
    table = pd.DataFrame(rows, columns=["link", "world_size", "phase", "collective", "message_bytes", "count",
                                        "projected_us"])
    summary = table.groupby(["link", "world_size", "phase"], as_index=False, sort=False)["projected_us"].sum()
    return summary.assign(kind="projection (alpha-beta ring model, link peak, no overlap)")


def projection_check(projection: pd.DataFrame, measured: pd.DataFrame, link: str, world_size: int,
                     rank: int = 0) -> pd.DataFrame:
    """The projection against a run it never saw: per phase, the communication time `projection` (of another
    run, `project_communication`) gives at `world_size` over `link`, beside the transfer time the collectives of
    `measured` (a run at that size, over that link) took on `rank` (`with_transfer_times`: the projection models
    moving data, not waiting for other ranks), and the error in %."""
    projected = projection[(projection["link"] == link) & (projection["world_size"] == world_size)]
    comm = with_transfer_times(measured)
    took = comm[comm["rank"] == rank].groupby("phase")["transfer_ns"].sum().rename("measured_us") / 1e3
    table = projected.set_index("phase")[["projected_us"]].join(took, how="inner").reset_index()
    return table.assign(error_pct=100 * (table["projected_us"] / table["measured_us"] - 1))


def single_gpu_twin(info: RunInfo, candidates: list[RunInfo]) -> RunInfo | None:
    """The single-GPU run among `candidates` of the same workload, preset, config and GPU model as the multi-GPU run
    `info` (the baseline of its scaling); where several are, the one measured nearest in time (most likely the same
    host and software); None where there is none or `info` is itself single-GPU. Workload and preset alone are not
    enough: a set of runs (a sweep's points beside a suite) holds single-GPU runs of the same workload at other
    sequence lengths or state sizes, whose steps say nothing of this run's scaling."""
    if not info.parallel:
        return None
    same = [other for other in candidates if not other.parallel and other.gpu.name == info.gpu.name
            and other.workload.name == info.workload.name and other.workload.preset == info.workload.preset
            and other.workload.config == info.workload.config]
    return min(same, key=lambda other: _hours_apart(other, info), default=None)


def _hours_apart(a: RunInfo, b: RunInfo) -> float:
    """How far apart two runs were measured, in hours; infinite where either has no date (ordered last)."""
    if not a.created or not b.created:
        return math.inf
    return abs((datetime.fromisoformat(a.created) - datetime.fromisoformat(b.created)).total_seconds()) / 3600


def graphed_speedup(info: RunInfo, twin: RunInfo | None) -> dict[str, float]:
    """`graphed_speedup` (with `_low`, `_high`): the single-GPU twin's median step over this run's step replayed as
    one CUDA graph (`--cuda-graphs`), with the interval of the ratio of the two sets of steps; none where either is
    missing. The eager speedup is the step as a training loop runs it; this one, the step without per-launch host
    cost."""
    graphed = info.harness.cuda_graphs
    if twin is None or graphed is None or not graphed.step_times_ms:
        return {}
    interval = ratio_interval(kept_steps(twin), graphed.step_times_ms)
    return {"graphed_speedup": interval.value, "graphed_speedup_low": interval.low,
            "graphed_speedup_high": interval.high}


def scaling(infos: dict[str, RunInfo]) -> pd.DataFrame:
    """Step time from 1 to N GPUs: each run's world size, step time, and speedup and parallel efficiency over its
    single-GPU twin among `infos` (`single_gpu_twin`: same workload, preset, config and GPU; a single-GPU run is
    its own, 1x; NaN where none is there), each with the interval of the ratio of the two runs' kept timed steps
    (`noise.ratio_interval`). The global batch is the same at every size (TP splits the model, DP the batch), so
    speedup = t1 / tN."""
    rows = []
    labels = {id(info): label for label, info in infos.items()}
    for label, info in infos.items():
        parallel = info.parallel or ParallelSection()
        twin = info if not info.parallel else single_gpu_twin(info, list(infos.values()))
        interval = ratio_interval(kept_steps(twin), kept_steps(info)) if twin is not None else None
        rows.append({"run": label, "workload": info.workload.name, "preset": info.workload.preset,
                     "gpu": info.gpu.name, "world_size": parallel.world_size, "tp": parallel.tp, "dp": parallel.dp,
                     "step_ms": info.harness.step_ms,
                     "single_gpu_step_ms": twin.harness.step_ms if twin is not None else float("nan"),
                     "speedup": twin.harness.step_ms / info.harness.step_ms if twin is not None else float("nan"),
                     "speedup_low": interval.low if interval else float("nan"),
                     "speedup_high": interval.high if interval else float("nan"),
                     "single_gpu_run": labels[id(twin)] if twin is not None else "",
                     **graphed_speedup(info, twin if info.parallel else None)})
    table = pd.DataFrame(rows)
    efficiency = {f"efficiency_pct{end}": 100 * table[f"speedup{end}"] / table["world_size"]
                  for end in ("", "_low", "_high")}
    return table.assign(**efficiency).sort_values(["workload", "preset", "gpu", "world_size"], ignore_index=True)


def parallel_overview(runs: dict[str, Run]) -> pd.DataFrame:
    """One row per multi-GPU run of `runs` (label -> run, every rank's kernels): its split, step time and speedup over
    the single-GPU run of the same workload among `runs` (`scaling`), the collectives per layer forward and backward
    (`collective_counts`; kinds of layer with the same collectives are one entry) and whether the model's
    structure predicts them, the per-step transfer time no compute hides and the time spent waiting for the other
    ranks (the larger rank's sum over forward and backward, `exposed_communication`), and the bus bandwidth of
    the layers' largest collectives (lowest and highest over phases and kinds of collective, `bus_bandwidth`)."""
    steps = scaling({label: run.info for label, run in runs.items()}).set_index("run")
    rows = []
    for label, run in runs.items():
        info, kernels, parallel = run.info, run.kernels, run.info.parallel
        if not parallel:
            continue
        counts = collective_counts(kernels, parallel.sequence_parallel)
        exposed = exposed_communication(kernels)
        layers = exposed[exposed["phase"].isin((FORWARD, BACKWARD))].groupby("rank")
        busbw = bus_bandwidth(kernels, parallel.tp, (parallel.link or Link()).gb_s)
        comm = collectives(kernels)
        inside = busbw[busbw["message_bytes"].isin(comm.loc[comm["layer"] >= 0, "message_bytes"])]  # the layers'
        largest = inside[inside["message_bytes"] == inside["message_bytes"].max()]
        rows.append({"run": label, "workload": info.workload.name, "tp": parallel.tp,
                     "dp": parallel.dp, "sequence_parallel": parallel.sequence_parallel,
                     **steps.loc[label, ["step_ms", "single_gpu_step_ms", "speedup",
                                         *(["graphed_speedup"] if "graphed_speedup" in steps else [])]].to_dict(),
                     **{f"{phase}_per_layer": _per_layer(counts[counts["phase"] == phase])
                        for phase in (FORWARD, BACKWARD)},
                     "as_predicted": bool(counts["matches"].all()),
                     "exposed_transfer_ms": layers["exposed_transfer_us"].sum().max() / 1e3,
                     "wait_ms": layers["wait_us"].sum().max() / 1e3,
                     "layer_message_mib": largest["message_bytes"].max() / 2**20,
                     "busbw_gb_per_s_min": largest["busbw_gb_per_s"].min(),
                     "busbw_gb_per_s_max": largest["busbw_gb_per_s"].max()})
    return pd.DataFrame(rows)


def _per_layer(counts: pd.DataFrame) -> str:
    """One phase's collectives per layer, e.g. "1 all_gather + 1 reduce_scatter"; where kinds of layer differ,
    each kind's ("mamba2: ...; attention: ...")."""
    kinds = {kind: " + ".join(f"{row.measured_max} {row.collective}" for row in group.itertuples()
                              if row.measured_max)
             for kind, group in counts.groupby("layer_kind", sort=False)}
    if len(set(kinds.values())) <= 1:
        return next(iter(kinds.values()), "")
    return "; ".join(f"{kind}: {text}" for kind, text in kinds.items())
