"""Where a training step makes the host wait for the GPU.

A call that synchronizes (a `.item()`, a boolean mask, a copy to the host, a size the host needs) empties the GPU's
queue: the kernels after it start only as fast as the host launches them, so a step that synchronizes is partly
host-bound whatever its kernels, and any host cost (a slower CPU, a tracer's per-launch cost) lengthens it.
torch's sync debug mode warns at each such call; `synchronizing_sites` counts them over one step, by the
innermost frame outside torch (the model's own line, or the library's that called torch). Calls made on autograd's
own threads (the backward pass) count only where torch hands their warnings on to Python: the sites recorded so far
(tests/data/sync-sites-h100) are all in forward code.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import torch

SYNC_WARNING = "called a synchronizing CUDA operation"  # what torch's sync debug mode warns at its warn level
_TORCH = Path(torch.__file__).parent


def synchronizing_sites(step: Callable[[], object]) -> dict[str, int]:
    """The synchronizing calls of one run of `step` on the GPU, counted by site (`path:line in function`). The
    debug mode slows the step it watches (a Python warning per call), so the harness gives it a step of its own,
    untimed."""
    with recorded_syncs() as sites:
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    return dict(sites)


@contextlib.contextmanager
def recorded_syncs() -> Iterator[collections.Counter[str]]:
    """Count the sync debug mode's warnings raised inside, by site. Every one is counted (a site warns at each
    call, not once); other warnings are dropped: the steps before showed them."""
    sites: collections.Counter[str] = collections.Counter()

    def record(message, category, filename, lineno, file=None, line=None) -> None:
        if SYNC_WARNING in str(message):
            sites[call_site(traceback.extract_stack()[:-1])] += 1

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        yield sites


def call_site(stack: list[traceback.FrameSummary]) -> str:
    """The innermost frame outside torch and the warnings machinery, as `path:line in function` (the path from
    its package on: `site-packages/` and the folder above `ssmprof/` left out)."""
    for frame in reversed(stack):
        if not Path(frame.filename).is_relative_to(_TORCH) and frame.filename != warnings.__file__:
            return _site(frame.filename, frame.lineno, frame.name)
    return "torch"


def call_site_of(frame: FrameType) -> str:
    """A live frame as `call_site` names one: `path:line in function`."""
    return _site(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)


@functools.lru_cache(maxsize=4096)
def _site(filename: str, line: int | None, name: str) -> str:
    return f"{_short(filename)}:{line} in {name}"


def _short(filename: str) -> str:
    path = Path(filename)
    parts = path.parts
    for anchor in ("site-packages", "dist-packages"):
        if anchor in parts:
            return "/".join(parts[len(parts) - parts[::-1].index(anchor):])
    package = Path(__file__).resolve().parents[2]  # the folder holding `ssmprof/`
    return str(path.relative_to(package)) if path.is_relative_to(package) else filename
