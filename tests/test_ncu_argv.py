import gzip
from pathlib import Path

import pytest

from ssmprof.profiler.ncu_argv import (
    CHIPS,
    LAUNCH_METRICS,
    METRIC_GROUPS,
    NOT_ASKED,
    UnknownMetric,
    check_metrics,
    chip_for,
    column_metrics,
    counter_metrics,
    ncu_argv,
    parse_query_metrics,
    targeted_kernel_id,
)
from ssmprof.schema import COUNTER_METRICS, STALL_REASONS

# `ncu --query-metrics --chip CHIP` of Nsight Compute 2025.3.1, beside the checkout (CI has it; see shared/README)
QUERY_LISTS = Path(__file__).resolve().parents[2] / "shared" / "ncu"

TARGET = ["python", "-m", "ssmprof.cli", "run", "mamba2-lm", "--preset", "small"]


def option(argv, name):
    return argv[argv.index(name) + 1]


@pytest.mark.parametrize("mode", ["sampled", "all"])
def test_every_invocation_carries_the_flags_we_learnt_we_need(tmp_path, mode):
    argv = ncu_argv(TARGET, tmp_path / "it.ncu-rep", mode)
    assert argv[0] == "ncu" and argv[-len(TARGET):] == TARGET
    assert option(argv, "--profile-from-start") == "off"
    assert option(argv, "--clock-control") == "none"
    assert option(argv, "--import-sass") == "no"  # metrics only: reports an order of magnitude smaller
    assert "--nvtx" in argv and "--set" not in argv and "--section" not in argv
    assert option(argv, "--export") == str(tmp_path / "it.ncu-rep")
    assert option(argv, "--metrics").split(",") == counter_metrics()
    asked = {m for column, (m, _, _) in COUNTER_METRICS.items() if column not in NOT_ASKED}
    assert set(counter_metrics()) == asked | set(LAUNCH_METRICS)
    assert option(argv, "--kernel-name") == "regex:^(?!nccl)"  # NCCL kernels are never replayed


def test_sampled_profiles_one_launch_per_launch_config_and_all_profiles_every_launch(tmp_path):
    sampled = ncu_argv(TARGET, tmp_path / "r", "sampled")
    everything = ncu_argv(TARGET, tmp_path / "r", "all")
    assert option(sampled, "--filter-mode") == "per-launch-config" and option(sampled, "--launch-count") == "1"
    assert "--filter-mode" not in everything and "--launch-count" not in everything


def test_unknown_mode_is_refused(tmp_path):
    with pytest.raises(ValueError, match="counter mode"):
        ncu_argv(TARGET, tmp_path / "r", "some")


def test_targeted_pass_asks_for_the_union_of_invocations_of_the_named_functions(tmp_path):
    argv = ncu_argv(TARGET, tmp_path / "r", "sampled", targets={"nvjet_a": [2, 15], "Kernel": [2]})
    assert option(argv, "--kernel-id") == "::regex:^(Kernel|nvjet_a)$:^(2|15)$"
    assert "--filter-mode" not in argv and "--kernel-name" not in argv
    assert targeted_kernel_id({"a.b": [3]}) == "::regex:^(a\\.b)$:^(3)$"


def query_listing(chip: str) -> str:
    """`ncu --query-metrics --chip CHIP`'s output, or a skip where shared/ is not beside the checkout."""
    listing = QUERY_LISTS / f"{chip}-metrics-ncu2025.3.1.txt.gz"
    if not listing.exists():
        pytest.skip(f"{listing} is not beside this checkout")
    with gzip.open(listing, "rt") as text:
        return text.read()


@pytest.mark.parametrize("chip", sorted(set(CHIPS.values())))
def test_every_chip_metric_set_exists_in_that_chips_query_list(chip):
    available = parse_query_metrics(query_listing(chip))
    for group in METRIC_GROUPS:
        check_metrics(counter_metrics(chip, group), available, chip)  # raises on any unknown metric
    # what Hopper alone has is mapped or dropped on the others, never asked for
    if chip != "gh100":
        with pytest.raises(UnknownMetric, match="sm__ops_path_tensor_"):
            check_metrics(counter_metrics("gh100"), available, chip)


# What Nsight Compute accepts after a base metric of each type (its "Metrics Structure"): counters and throughputs
# take a roll-up (then optionally a sub-metric), ratios one of their own forms; anything else is refused at launch.
ROLL_UPS = {"Counter": {"sum", "avg", "min", "max"}, "Throughput": {"sum", "avg", "min", "max"},
            "Ratio": {"ratio", "pct", "max_rate"}}
SUB_METRICS = {"pct_of_peak_sustained_active", "pct_of_peak_sustained_elapsed", "per_second", "per_cycle_active",
               "per_cycle_elapsed", "peak_sustained"}


@pytest.mark.parametrize("chip", sorted(set(CHIPS.values())))
def test_every_metric_asks_for_a_form_its_type_has(chip):
    rows = map(str.split, query_listing(chip).splitlines())
    types = {parts[0]: parts[1] for parts in rows if len(parts) >= 2 and "__" in parts[0]}
    for group in METRIC_GROUPS:
        for metric in counter_metrics(chip, group):
            if metric.startswith("launch__"):  # launch attributes: no type, no suffix
                continue
            base, *suffixes = metric.split(".")
            assert suffixes and suffixes[0] in ROLL_UPS[types[base]], (chip, metric, types[base])
            if types[base] == "Ratio":
                assert len(suffixes) == 1, (chip, metric)
            else:
                assert set(suffixes[1:]) <= SUB_METRICS, (chip, metric)


def test_a100_collects_what_it_has_and_says_what_it_lacks():
    a100 = column_metrics(chip_for("8.0"))
    assert a100["tensor_ops_bf16"] == "sm__ops_path_tensor_src_bf16_dst_fp32.sum"
    assert [c for c, m in a100.items() if m is None] == ["tensor_ops_fp16", "tensor_ops_fp8", "tensor_ops_bf16_wgmma",
                                                         "tensor_ops_bf16_mma"]  # fp16: NOT_ASKED on every chip


def test_the_stall_pass_asks_for_every_reason_the_chip_counts_and_their_sum():
    hopper = column_metrics("gh100", "stalls")
    assert hopper["stall_warps_per_issue"] == "smsp__average_warps_active_per_issue_active.ratio"
    assert all(hopper[f"stall_{reason}"] for reason in STALL_REASONS)
    assert [c for c, m in column_metrics("ga100", "stalls").items() if m is None] == ["stall_gmma"]
    assert sorted(c for c, m in column_metrics("gb100", "stalls").items() if m is None) == ["stall_gmma",
                                                                                            "stall_imc_miss"]
    # the join places stall rows by launch configuration too
    assert set(LAUNCH_METRICS) <= set(counter_metrics("gh100", "stalls"))


def test_unknown_chip_and_unknown_metric_are_one_line_errors():
    with pytest.raises(UnknownMetric, match="compute capability 7.5"):
        chip_for("7.5")
    with pytest.raises(UnknownMetric, match="dram__bytes_sideways.sum on gh100"):
        check_metrics(["dram__bytes_read.sum", "dram__bytes_sideways.sum", "launch__grid_dim_x"],
                      {"dram__bytes_read"}, "gh100")


@pytest.mark.parametrize(("cache", "control"), [("flush", "all"), ("keep", "none")])
def test_the_cache_mode_is_nsight_computes_cache_control(tmp_path, cache, control):
    """Nsight Compute flushes every cache before each replayed pass unless told to keep them (`--ncu-cache keep`)."""
    assert option(ncu_argv(TARGET, tmp_path / "r", "sampled", cache=cache), "--cache-control") == control
    assert option(ncu_argv(TARGET, tmp_path / "r", "sampled"), "--cache-control") == "all"  # ncu's default
    with pytest.raises(ValueError, match="cache must be one of"):
        ncu_argv(TARGET, tmp_path / "r", "sampled", cache="warm")


def test_a_bad_cache_mode_is_one_line_before_any_work():
    from ssmprof.errors import InvalidConfig
    from ssmprof.profiler.profile_run import ProfileSettings

    with pytest.raises(InvalidConfig, match="--ncu-cache must be flush or keep, got 'warm'"):
        ProfileSettings(ncu_cache="warm")
    assert ProfileSettings(ncu_cache="keep").ncu_cache == "keep"
