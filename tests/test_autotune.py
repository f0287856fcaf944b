"""Triton autotuning choices survive the trip from the timeline process to the counter child."""

import json

import triton

from ssmprof.profiler import autotune

CONFIGS = [triton.Config({"BLOCK": 64}, num_warps=2), triton.Config({"BLOCK": 64}, num_warps=4),
           triton.Config({"BLOCK": 128}, num_warps=4)]


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def scale_kernel(x_ptr, n, BLOCK: "tl.constexpr"):  # noqa: F821 - never compiled here
    pass


def test_snapshot_then_pin_restores_each_choice_by_position():
    scale_kernel.cache.clear()
    # what the parent's autotuning chose for two problem sizes (key: n, then the dtypes of tensor args)
    scale_kernel.cache[(4096, "torch.bfloat16")] = CONFIGS[1]
    scale_kernel.cache[(512, "torch.bfloat16")] = CONFIGS[2]
    name = f"{__name__}.scale_kernel"
    choices = json.loads(json.dumps(autotune.snapshot()))  # through the file the child reads
    assert choices[name] == [[[4096, "torch.bfloat16"], 1, str(CONFIGS[1])],
                             [[512, "torch.bfloat16"], 2, str(CONFIGS[2])]]

    scale_kernel.cache.clear()  # a fresh process has chosen nothing
    assert autotune.pin(choices) == 2
    assert scale_kernel.cache == {(4096, "torch.bfloat16"): CONFIGS[1], (512, "torch.bfloat16"): CONFIGS[2]}


def test_pin_skips_choices_whose_config_list_changed():
    scale_kernel.cache.clear()
    stale = {f"{__name__}.scale_kernel": [[[4096, "torch.bfloat16"], 1, "BLOCK: 32, num_warps: 8"]],
             "no_such_module_anywhere.kernel": []}
    assert autotune.pin(stale) == 0
    assert scale_kernel.cache == {}


def test_a_profile_pins_the_choices_of_the_run_it_names():
    """`--autotune-from RUN`: the choices that run recorded, checked when the settings are built."""
    from ssmprof import bundled, schema
    from ssmprof.profiler.profile_run import ProfileSettings

    run = bundled.REFERENCE / "h100-sxm" / "mamba2-lm"
    choices = ProfileSettings(autotune_from=run).pinned_choices
    assert choices == schema.read_run(run).info.triton_autotune
    assert any("_chunk_cumsum_bwd_kernel" in kernel for kernel in choices)
    assert ProfileSettings().pinned_choices is None
