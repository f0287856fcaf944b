"""The counter join on real inputs: the timeline trace and both Nsight Compute passes of
`ssmprof profile mamba2-lm --preset small --layers 1 --keep-report` on the H100 (tests/data), rebuilt on the CPU."""

import gzip
import json
import lzma
import shutil
from pathlib import Path

import pytest
from known_work import RECORDED_COUNTER_COLUMNS

from ssmprof import schema
from ssmprof.analysis.trust.counter_checks import check_counters, gemm_flops
from ssmprof.hardware import datasheet_peaks
from ssmprof.profiler.counters import CONFIG_KEY, SamplingPlan, attach_counters
from ssmprof.profiler.profile_run import coverage
from ssmprof.profiler.timeline import kernel_table

FIXTURE = Path(__file__).parent / "data" / "join-mamba2-lm-1layer-h100"


@pytest.fixture(scope="module")
def joined(tmp_path_factory):
    from ssmprof.profiler.ncu_extract import read_report

    folder = tmp_path_factory.mktemp("reports")
    reports = []
    for number in (1, 2):
        path = folder / f"counters-{number}.ncu-rep"
        with lzma.open(FIXTURE / f"counters-{number}.ncu-rep.xz") as packed, open(path, "wb") as out:
            shutil.copyfileobj(packed, out)
        reports.append(read_report(path, columns=RECORDED_COUNTER_COLUMNS))
    with gzip.open(FIXTURE / "trace.json.gz", "rt") as f:
        timeline = schema.conform_kernels(kernel_table(json.load(f)))
    # recorded before pass 2 skipped the smallest problems, and before families were profiled at grid bins
    plan = SamplingPlan.of(timeline, min_share=0, bins=None)
    passes = [(reports[0], plan.expected(timeline, "sampled")),
              (reports[1], plan.expected(timeline, "sampled", plan.targets))]
    kernels, notes = attach_counters(timeline, passes, plan)
    gpu = json.loads((FIXTURE / "source.json").read_text())["gpu"]["name"]
    kernels, checks = check_counters(schema.conform_kernels(kernels), datasheet_peaks(gpu))
    return kernels, notes, checks, plan


def test_every_profiled_row_finds_its_launch_and_checked_counters_cover_the_iteration(joined):
    kernels, notes, checks, _ = joined
    assert len(kernels) == 111 and notes["profiled_not_placed"] == []
    assert coverage(kernels)["counter_time_fraction"] >= 0.95
    assert checks["rejected"] == [] and checks["status_time_fraction"]["measured"] > 0.9
    assert all(value <= 1 for value in checks["max_fraction_of_peak"].values())


def test_a_persistent_gemm_configuration_holds_several_problems_each_measured_on_its_own(joined):
    kernels, _, checks, plan = joined
    gemms = kernels[kernels["kernel_name"].str.startswith("nvjet") & (kernels["launch_op"] == "aten::mm")]
    problems_per_config = gemms.groupby(CONFIG_KEY)["launch_shapes"].nunique()
    assert problems_per_config.max() >= 2  # cuBLAS's grid 2x66 runs several GEMM shapes
    assert any(name.startswith("nvjet") for name in plan.targets)  # the targeted pass asked for them
    first_of_each = gemms.drop_duplicates(CONFIG_KEY + ["launch_shapes"])
    assert (first_of_each["counter_status"] == "measured").all()
    lent = gemms[gemms["counter_status"] == "lent"]
    lenders = kernels.set_index("launch_idx").loc[lent["counter_lender"]]
    assert (lenders["launch_shapes"].to_numpy() == lent["launch_shapes"].to_numpy()).all()  # same problem only
    analytic = [gemm_flops(op, shapes) for op, shapes in zip(gemms["launch_op"], gemms["launch_shapes"], strict=True)]
    ratios = gemms["tensor_ops_bf16"] / analytic
    # tensor cores also multiply the padding of partial tiles: 4384 rows in 128-row tiles do 2 % more work
    assert ratios.between(1.0, 1.06).all(), ratios.describe()
    for phase in ("forward", "backward"):
        assert 0.97 <= checks["gemm_flops"][phase]["ratio"] <= 1.05


def test_each_pass_records_what_its_replays_cost(tmp_path):
    """Nsight Compute's own bookkeeping, read from the recorded H100 report: every launch of the 1-layer
    iteration took 14 replay passes, each restoring the 6.17 GiB the process had allocated (the caching
    allocator's pool, not the kernel's working set)."""
    from ssmprof.profiler.ncu_extract import read_report
    from ssmprof.profiler.profile_run import replay_cost

    path = tmp_path / "counters-1.ncu-rep"
    with lzma.open(FIXTURE / "counters-1.ncu-rep.xz") as packed, open(path, "wb") as out:
        shutil.copyfileobj(packed, out)
    rows = read_report(path, columns=RECORDED_COUNTER_COLUMNS)
    assert (rows["replay_passes"] == 14).all() and rows["replay_bytes_per_pass"].nunique() == 1
    cost = replay_cost(rows)
    assert cost["launches"] == 76 and cost["passes_median"] == 14
    assert round(cost["gib_per_pass_median"], 2) == round(cost["gib_per_pass_max"], 2) == 6.17


@pytest.fixture
def recorded_timeline(monkeypatch):
    """The recorded iteration's timeline, with `collect` reading every pass's report as empty and every metric
    listed for the chip: the pass machinery on real launches, no Nsight Compute."""
    import pandas as pd

    from ssmprof.profiler import profile_run
    from ssmprof.profiler.ncu_argv import METRIC_GROUPS, counter_metrics

    with gzip.open(FIXTURE / "trace.json.gz", "rt") as f:
        timeline = schema.conform_kernels(kernel_table(json.load(f)))
    names = {m.split(".")[0] for group in METRIC_GROUPS for m in counter_metrics("gh100", group)}
    monkeypatch.setattr(profile_run, "available_metrics", lambda chip: names)
    empty = pd.DataFrame(columns=["kernel_name", "kernel_name_full", *CONFIG_KEY])
    monkeypatch.setattr(profile_run, "read_report", lambda path, chip, group: empty)
    return timeline

@pytest.mark.parametrize(("lanes", "failing", "expected"), [
    (1, "none", [("start", "counters-1", False), ("start", "counters-2", True), ("finish", "counters-1"),
                 ("start", "stalls-3", True), ("finish", "counters-2"), ("finish", "stalls-3")]),
    (1, "counters-2", [("start", "counters-1", False), ("start", "counters-2", True), ("finish", "counters-1"),
                       ("start", "stalls-3", True), ("finish", "counters-2"), ("cancel", "stalls-3")]),
    # two GPUs: two passes replay at once (none waits ahead), the third starts as soon as the first ends
    (2, "none", [("start", "counters-1", False), ("start", "counters-2", False), ("finish", "counters-1"),
                 ("start", "stalls-3", False), ("finish", "counters-2"), ("finish", "stalls-3")]),
    (3, "counters-1", [("start", "counters-1", False), ("start", "counters-2", False),
                       ("start", "stalls-3", False), ("finish", "counters-1"), ("cancel", "counters-2"),
                       ("cancel", "stalls-3")]),
])
def test_each_pass_after_the_first_starts_while_the_one_before_runs(recorded_timeline, tmp_path, lanes, failing,
                                                                    expected):
    """On the recorded iteration's timeline: on one GPU pass k+1 is started (ahead) before pass k is let finish;
    on `lanes` GPUs that many replay at once; a failing pass stops the ones started behind it instead of
    leaving them behind."""
    from ssmprof.profiler import profile_run
    from ssmprof.profiler.counters import CounterCollectionError

    timeline = recorded_timeline
    events = []

    class Pass:
        def __init__(self, report, mode, metrics, targets, names, ahead):
            self.name = report.stem
            events.append(("start", self.name, ahead))

        def finish(self, on_kernel):
            events.append(("finish", self.name))
            if self.name == failing:
                raise CounterCollectionError("the profiled child failed")
            return 1.0

        def cancel(self):
            events.append(("cancel", self.name))

    try:
        profile_run.collect_counters(timeline, "sampled", H100, tmp_path, Pass, lambda k, g: (k, {}), lambda *a: None,
                                 0.0, lanes=lanes)
    except CounterCollectionError:
        assert failing != "none"
    assert events == expected


H100 = {"compute_capability": "9.0", "name": "NVIDIA H100 80GB HBM3", "memory_bytes": 85017493504}  # as recorded


@pytest.mark.parametrize(("held_gib", "through_host"), [(0.2, False), (36.0, False), (49.1, True)])
def test_each_pass_says_when_its_replay_goes_through_the_host(recorded_timeline, tmp_path, held_gib, through_host):
    """mamba2-lm paper holds 36 GiB at its peak (the H100 profiles it in minutes), mamba3-lm paper 49 GiB (its
    first pass did not finish in 270 s on an H100): the progress of every pass says so, and run.json records it."""
    from ssmprof.profiler import profile_run

    timeline = recorded_timeline
    stages = set()

    class Pass:
        def __init__(self, *args):
            pass

        def finish(self, on_kernel):
            on_kernel(0)
            return 1.0

    _, notes, _, _ = profile_run.collect_counters(timeline, "sampled", H100, tmp_path, Pass, lambda k, g: (k, {}),
                                              lambda stage, done, total: stages.add(stage), held_gib * 2**30)
    assert notes["replay_through_host"] is through_host and len(stages) == 3
    said = {"replay through the host: 49 of 79 GiB held" in stage for stage in stages}
    assert said == {through_host}, stages
