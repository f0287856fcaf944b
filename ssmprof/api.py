"""The marks a training script of one's own adds to be profiled: `ssmprof.step()` around each training
iteration, `ssmprof.phase()` where hooks cannot see a phase.

    import ssmprof
    for batch in loader:
        with ssmprof.step(model=model, optimizer=optimizer):
            loss = model(batch).loss
            loss.backward()
            optimizer.step()

`ssmprof.step()` is also a decorator (`@ssmprof.step(model=model, optimizer=optimizer)` on the function that
runs one iteration). Outside `ssmprof profile --script` the marks do nothing: each call checks one module
global and returns a shared object whose enter and exit do nothing (benchmarks/bench_inactive_step.py measures
the cost), so the marks can stay in a script that trains for days; this module imports nothing, torch
included, for that reason. Under `ssmprof profile --script` the script runs in `profiler.script_child`, which
installs its `StepDriver` here before the script starts (`install`), and every mark goes to it.
"""

from __future__ import annotations

import sys
from typing import Literal

__all__ = ["phase", "step"]


class _Inactive:
    """The mark outside a profile: enter and exit do nothing, and as a decorator it returns the function itself
    (the driver is installed before the script runs, so a function decorated outside a profile never runs inside
    one)."""

    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> Literal[False]:
        return False

    def __call__(self, function):
        return function


_INACTIVE = _Inactive()
_driver = None  # the profiled process's `StepDriver`; None everywhere else


def step(model=None, optimizer=None, items: int | None = None):
    """One training iteration, as a `with` block or a decorator. `model` (a torch.nn.Module) and `optimizer` (a
    torch.optim.Optimizer) are hooked once to mark the phases: forward from the model's first call, backward from
    `loss.backward()` (torch.autograd.backward), optimizer between the optimizer's step hooks. `items`: tokens or
    samples per iteration, for the run's throughput (else it counts iterations)."""
    if _driver is None:
        return _INACTIVE
    return _driver.step(model, optimizer, items, _caller())


def phase(name: str):
    """Mark a phase by hand inside `ssmprof.step()`: forward, backward or optimizer; the hooks keep out of it."""
    if _driver is None:
        return _INACTIVE
    return _driver.phase(name)


def install(driver) -> None:
    """Send every mark of this process to `driver` (`profiler.script_child.StepDriver`): called by the profiled
    script's process only, before the script runs; the driver is handed in so that this module imports none."""
    global _driver
    _driver = driver


def _caller() -> str:
    """`file:line` of the code that called `step()`: where error lines point."""
    frame = sys._getframe(2)
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"
