"""Triton autotuning choices: read them after the timeline run, impose them on the Nsight Compute child.

Each process autotunes anew, on noisy timings, so the counter child could pick another configuration
(another num_warps, hence another block size) than the timeline run measured. Its counters would then
describe a kernel the timeline never ran, and the launch-by-launch join could not match it: on our H100
that left part of mamba2-lm's kernel time without counters, all of it in autotuned Triton kernels. The
parent's choices, named by their position in each autotuner's own config list, are pinned in the child
before its first step (which also spares the child the autotuning benchmarks). They are recorded in
run.json too: a changed choice explains a changed kernel.
"""

from __future__ import annotations

import gc
import importlib


def _autotuners() -> dict:
    """Every live Triton autotuner, by the module-qualified name of the kernel it tunes."""
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return {}
    # type() rather than isinstance(): isinstance reads __class__, which some lazy objects warn on
    return {f"{obj.base_fn.__module__}.{obj.base_fn.__qualname__}": obj
            for obj in gc.get_objects() if issubclass(type(obj), Autotuner)}


def snapshot() -> dict[str, list]:
    """{kernel: [[tuning key, config index, config text], ...]} for each autotuner that has chosen."""
    choices = {}
    for name, tuner in sorted(_autotuners().items()):
        texts = [str(config) for config in tuner.configs]
        entries = [[list(key), texts.index(str(config)), str(config)]
                   for key, config in tuner.cache.items() if str(config) in texts]
        if entries:
            choices[name] = entries
    return choices


def pin(choices: dict[str, list]) -> int:
    """Pre-fill the autotuners' choices from `snapshot()` (importing the kernels' modules first); returns
    how many were pinned. A kernel whose module is gone or whose config list changed is left to autotune."""
    for name in choices:
        try:
            importlib.import_module(name.rsplit(".", 1)[0])
        except ImportError:
            continue
    tuners = _autotuners()
    pinned = 0
    for name, entries in choices.items():
        tuner = tuners.get(name)
        if tuner is None:
            continue
        for key, index, text in entries:
            if index < len(tuner.configs) and str(tuner.configs[index]) == text:
                tuner.cache[tuple(key)] = tuner.configs[index]
                pinned += 1
    return pinned
