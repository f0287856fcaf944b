import pytest

from ssmprof.profiler.ncu import counter_metrics, ncu_argv
from ssmprof.schema import COUNTER_METRICS

TARGET = ["python", "-m", "ssmprof.cli", "run", "mamba2-lm", "--preset", "small"]


def option(argv, name):
    return argv[argv.index(name) + 1]


@pytest.mark.parametrize("mode", ["sampled", "all"])
def test_every_invocation_carries_the_flags_we_learnt_we_need(tmp_path, mode):
    argv = ncu_argv(TARGET, tmp_path / "it.ncu-rep", mode)
    assert argv[0] == "ncu" and argv[-len(TARGET):] == TARGET
    assert option(argv, "--profile-from-start") == "off"
    assert option(argv, "--clock-control") == "none"
    assert "--nvtx" in argv and "--set" not in argv and "--section" not in argv
    assert option(argv, "--export") == str(tmp_path / "it.ncu-rep")
    assert option(argv, "--metrics").split(",") == counter_metrics()
    assert len(counter_metrics()) == len(COUNTER_METRICS) + 2  # + grid and block size, for the join
    assert option(argv, "--kernel-name") == "regex:^(?!nccl)"  # NCCL kernels are never replayed


def test_sampled_profiles_one_launch_per_launch_config_and_all_profiles_every_launch(tmp_path):
    sampled = ncu_argv(TARGET, tmp_path / "r", "sampled")
    everything = ncu_argv(TARGET, tmp_path / "r", "all")
    assert option(sampled, "--filter-mode") == "per-launch-config" and option(sampled, "--launch-count") == "1"
    assert "--filter-mode" not in everything and "--launch-count" not in everything


def test_unknown_mode_is_refused(tmp_path):
    with pytest.raises(ValueError, match="counter mode"):
        ncu_argv(TARGET, tmp_path / "r", "some")
