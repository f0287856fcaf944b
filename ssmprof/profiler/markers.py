"""Phase marks of a training iteration.

Autograd launches backward kernels from its own worker thread, and NVTX push/pop ranges are per
thread, so a push/pop "backward" range on the main thread would not cover them (ncu caught only a
fraction of the iteration's kernels that way). NVTX start/end ranges are process-wide, so each phase is one
start/end range in the `ssmprof` domain: ncu filters with `--nvtx --nvtx-include "ssmprof@backward/"`.
The same names go to torch.profiler through `record_function`, for the timeline collector.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import torch

from ssmprof.schema import PHASES  # the phases are the contract's (`schema.PHASE_VALUES`); defined there once

__all__ = ["NVTX_DOMAIN", "PHASES", "NvtxMarker", "PhaseMarker", "RecordingMarker"]
NVTX_DOMAIN = "ssmprof"


class PhaseMarker:
    """Marks phases; subclasses say how. The base class marks nothing."""

    @contextmanager
    def phase(self, name: str):
        token = self.start(name)
        try:
            yield
        finally:
            self.end(token)

    def start(self, name: str):
        return name

    def end(self, token) -> None:
        pass


class NvtxMarker(PhaseMarker):
    """Process-wide NVTX start/end ranges plus a torch.profiler label per phase."""

    def __init__(self):
        import nvtx

        self._nvtx = nvtx

    def start(self, name: str):
        label = torch.profiler.record_function(f"{NVTX_DOMAIN}/{name}")
        label.__enter__()
        return self._nvtx.start_range(message=name, domain=NVTX_DOMAIN), label

    def end(self, token) -> None:
        nvtx_range, label = token
        label.__exit__(None, None, None)
        self._nvtx.end_range(nvtx_range)


class RecordingMarker(PhaseMarker):
    """Keeps (event, phase, thread id) tuples: what tests check instead of reading a profile by eye."""

    def __init__(self):
        self.events: list[tuple[str, str, int]] = []

    def start(self, name: str):
        self.events.append(("start", name, threading.get_ident()))
        return name

    def end(self, token) -> None:
        self.events.append(("end", token, threading.get_ident()))

    def phases(self) -> list[str]:
        return [name for event, name, _ in self.events if event == "start"]
