"""Where the host's time in a training step goes: a sampling thread reads the stacks of the process's Python threads.

The rule: while a sampled step runs, a daemon thread wakes at random intervals of 0.5 to 1.5 `interval_s` (a
fixed period restarted with each step could read every step at the same places and turn the sampling error into a
bias), reads every thread's Python stack
(`sys._current_frames`) and charges the wall time since its previous reading to what the step's thread was doing then
(`schema.HOST_CATEGORIES`) and where: the innermost frame outside torch, Triton and the standard library (the model's
line, or the library's that called torch), as `path:line in function` (`syncs.call_site`'s form, so a line the sync
debug mode named matches). Sampled and unsampled steps alternate, and the ratio of their medians is the sampler's own
cost (`analysis.step.host_time`).

Why in-process: it needs no ptrace permission and no binary of its own (py-spy's), a script's forked children are
not sampled (their time is the parent's wait), and a rank that dies takes only its own samples with it. What it
costs: the thread needs the GIL to read a stack, and a thread running Python hands the GIL over once per switch
interval (5 ms by default), so while sampling the interval is lowered to SWITCH_INTERVAL_S; C code that keeps the GIL
delays a reading until it returns, and that time goes to the stack then seen. Garbage collection also keeps the
GIL: `gc.callbacks` times each collection exactly, charges it to the line whose allocation set it off, and takes it
out of the reading that follows. The backward pass runs on autograd's threads: while the step's thread waits in
the engine, a reading goes to the autograd thread running Python (a custom Function's backward, its Triton
launches) where one is, and to the engine's own C++ otherwise. The time from a step's last reading to its end (under
one interval) is "unattributed". A reading the operating system runs late (the sampler's core busy) charges its
delay to what it then sees.

Measured (tests/data/host-time-h100): a planted collection found at its line to 0.01 %; a planted busy-wait and the
GPU sync after it found at their lines together within 3 %, but 0.75 ms of the busy-wait's 3 ms charged to the sync
that follows (-26 %, +19 %); on a GPU-paced step the sampler costs 0.0 % (-0.7 to +1.0 %), on host-paced ones
about 10-20 % (wide intervals).
"""

from __future__ import annotations

import collections
import contextlib
import dis
import gc
import importlib.util
import os
import random
import sys
import sysconfig
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from ssmprof import schema
from ssmprof.profiler.syncs import call_site_of

INTERVAL_S = 0.001  # a reading a millisecond: a 1 ms share of a step is found to about one reading per step
SWITCH_INTERVAL_S = 0.0001  # how soon a thread running Python hands the sampler the GIL (default 5 ms)
# Instructions whose execution is a call into C where the frame reading them is the innermost: a Python callee
# would have a frame of its own
_CALLS = frozenset(name for name in dis.opmap if name.startswith(("CALL", "PRECALL", "BINARY_", "STORE_SUBSCR",
                                                                  "COMPARE_OP", "CONTAINS_OP", "UNARY_")))
_CALL_CODES = frozenset(dis.opmap[name] for name in _CALLS)
# ssmprof's own code around a user's step (the step marker, the backward wrapper, phase hooks): never a site
_OURS = Path(__file__).resolve().parents[1]
_HOOKS = ("api.py", "profiler/script_child.py", "profiler/markers.py", "profiler/host_sampler.py")
_ENGINE = ("_engine_run_backward", "run_backward", "backward", "grad")  # autograd's Python entries to its engine


def _module_file(name: str) -> str | None:
    """A single-file module's path (typing_extensions: the standard library's backport, its wrappers no site)."""
    spec = importlib.util.find_spec(name)
    return spec.origin if spec and spec.origin else None


def _package(name: str) -> str | None:
    spec = importlib.util.find_spec(name)
    return str(Path(spec.origin).parent) if spec and spec.origin else None


class _Places:
    """Which package each source file belongs to (torch, its autograd and cuda parts, Triton, the standard
    library, ssmprof's hooks; "other" for the model, the loop and every other library), cached by file name."""

    def __init__(self) -> None:
        torch, triton = _package("torch"), _package("triton")
        self.roots = [(root, kind) for root, kind in (  # folders end in "/": torch_geometric is not torch
            (torch and f"{torch}/autograd/", "autograd"), (torch and f"{torch}/cuda/", "cuda"),
            (torch and f"{torch}/", "torch"), (triton and f"{triton}/", "triton"),
            (sysconfig.get_paths()["stdlib"] + "/", "stdlib"), (_module_file("typing_extensions"), "stdlib"),
            *((str(_OURS / name), "hook") for name in _HOOKS)) if root]
        self.known: dict[str, str] = {}

    def kind(self, filename: str) -> str:
        found = self.known.get(filename)
        if found is None:
            found = next((kind for root, kind in self.roots if filename.startswith(root)), "other")
            if found == "stdlib" and "-packages" in filename:
                found = "other"
            self.known[filename] = found
        return found


def _in_c_call(frame: FrameType) -> bool:
    code = frame.f_code.co_code
    return 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] in _CALL_CODES


_OPEN: weakref.WeakSet[HostSampler] = weakref.WeakSet()  # the samplers entered and not yet left


def _forked() -> None:
    """In a child forked while a sampler runs (a script's worker, a data loader): the child has no sampling thread and
    its copy of the sampler's lock may be held for ever, so its collections are not timed there."""
    for sampler in list(_OPEN):
        sampler.failure = "forked"
        if sampler._collected in gc.callbacks:
            gc.callbacks.remove(sampler._collected)


os.register_at_fork(after_in_child=_forked)


class HostSampler:
    """`with HostSampler() as sampler:` then `with sampler.step(index, sampled):` around each step; `host_time()`
    gives run.json's `harness.host_time`. Where the sampling thread fails, the steps run on unsampled and
    `host_time()` says why (`failure`): a run is never lost to its sampler."""

    def __init__(self, interval_s: float = INTERVAL_S, sync_sites: set[str] | frozenset[str] = frozenset()):
        self.interval_s, self.sync_sites = interval_s, frozenset(sync_sites)
        self.places = _Places()
        self.charged: dict[tuple[int, str, str], float] = collections.defaultdict(float)  # ns
        self.readings = 0
        self._step: int | None = None
        self._stepper = 0  # the thread running the step
        self._last = 0  # ns of the previous reading (or of the step's start)
        self._gc_start: tuple[int, str] | None = None
        self._gc_pending = 0  # ns of collections since the previous reading, charged already
        self._jitter = random.Random(0)
        self._stop = threading.Event()
        self._sampling = threading.Event()  # set while a sampled step runs: between them the thread only waits
        self._lock = threading.RLock()  # a collection's callback may come inside a held lock
        self._thread = threading.Thread(target=self._run, name="ssmprof-host-sampler", daemon=True)
        self._switch = sys.getswitchinterval()
        self.failure: str | None = None  # why the sampling thread stopped early

    def __enter__(self) -> HostSampler:
        gc.callbacks.append(self._collected)
        _OPEN.add(self)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.end()
        self._stop.set()
        self._sampling.set()
        self._thread.join()
        _OPEN.discard(self)
        if self._collected in gc.callbacks:
            gc.callbacks.remove(self._collected)

    def begin(self, index: int) -> None:
        """Sample from here until `end`: step `index`, run by the calling thread. Only a sampled step runs with
        the lowered switch interval and a thread taking readings: an unsampled one runs as without the sampler."""
        with self._lock:
            self._stepper, self._last, self._gc_pending = threading.get_ident(), time.perf_counter_ns(), 0
            self._step = index
            self._switch = sys.getswitchinterval()
            sys.setswitchinterval(SWITCH_INTERVAL_S)
            self._sampling.set()

    def end(self) -> None:
        with self._lock:
            if self._step is not None:
                self._charge(self._step, time.perf_counter_ns(), (schema.UNATTRIBUTED, ""))
                self._step = None
                self._sampling.clear()
                sys.setswitchinterval(self._switch)

    @contextlib.contextmanager
    def step(self, index: int, sampled: bool = True) -> Iterator[None]:
        """Sample the step run inside (`sampled`; an unsampled step only runs, for the overhead's comparison)."""
        if sampled:
            self.begin(index)
        try:
            yield
        finally:
            self.end()

    def host_time(self, times_ms: list[float]) -> dict:
        """run.json `harness.host_time`, given the step times of the unsampled and sampled steps in turn (the
        unsampled first): (step, category, site, ms) for every sampled step, and the readings' settings; where the
        sampling thread failed, only why (`missing`)."""
        if self.failure is not None:
            return {"missing": f"the host sampler stopped: {self.failure}"}
        return {"interval_ms": self.interval_s * 1e3, "switch_interval_ms": SWITCH_INTERVAL_S * 1e3,
                "readings": self.readings, "sampled_steps_ms": times_ms[1::2], "unsampled_steps_ms": times_ms[::2],
                "rows": [[step, category, site, ns / 1e6]
                         for (step, category, site), ns in sorted(self.charged.items())]}

    def _run(self) -> None:
        try:
            self._read()
        except Exception as exc:  # the sampler's own defect: the steps go on unsampled, the run says why
            self.failure = f"{type(exc).__name__}: {exc}"

    def _read(self) -> None:
        own = threading.get_ident()
        while not self._stop.is_set():
            self._sampling.wait()
            # one C call (a wait on a Condition would need the GIL several times), for a random 0.5-1.5 intervals:
            # readings a fixed period after each step's start would fall at the same places of every step
            time.sleep(self.interval_s * (0.5 + self._jitter.random()))
            with self._lock:
                if self._step is not None:
                    self._take_reading(own)

    def _take_reading(self, own: int) -> None:
        """One reading of the step's stacks. Its own method so that the frames die with it: a frame read and kept
        while the thread sleeps keeps its locals alive, the step's activations among them (the mamba2-lm paper
        step's peak rose from 35.9 to 42.4 GiB on an H100 while a reading's frames outlived it)."""
        now = time.perf_counter_ns()
        frames = sys._current_frames()
        frames.pop(own, None)
        leaf = frames.get(self._stepper)
        if leaf is not None and leaf.f_code.co_filename == __file__:
            return  # inside `_collected`: the collection just timed is charged once it returns
        assert self._step is not None
        self._charge(self._step, now, self._doing(frames))
        self.readings += 1

    def _charge(self, step: int, now: int, doing: tuple[str, str]) -> None:
        """Charge the wall time since the previous reading, less the collections charged meanwhile, to what the
        step was doing (category, site)."""
        self.charged[(step, doing[0], doing[1])] += max(now - self._last - self._gc_pending, 0)
        self._last, self._gc_pending = now, 0

    def _doing(self, frames: dict[int, FrameType]) -> tuple[str, str]:
        """(category, site) of the step's thread, or of the autograd thread running Python for it."""
        leaf = frames.get(self._stepper)
        if leaf is None:
            return schema.UNATTRIBUTED, ""
        if self.places.kind(leaf.f_code.co_filename) == "autograd" and leaf.f_code.co_name in _ENGINE:
            backward = (self._classify(frame) for ident, frame in frames.items()
                        if ident != self._stepper and self._runs_backward(frame))
            return next(backward, (schema.AUTOGRAD, self._site(leaf)))
        return self._classify(leaf)

    def _runs_backward(self, leaf: FrameType) -> bool:
        """A thread whose outermost Python frame is autograd's: the engine calling a Python backward."""
        frame = leaf
        while frame.f_back is not None:
            frame = frame.f_back
        return self.places.kind(frame.f_code.co_filename) == "autograd"

    def _classify(self, leaf: FrameType) -> tuple[str, str]:
        """(category, site) of a thread's stack, read from its innermost frame out to the site."""
        kinds, frame = self._to_site(leaf)
        site = call_site_of(frame) if frame is not None else "torch"
        if "triton" in kinds:
            return schema.TRITON, site
        if kinds[0] == "cuda" and leaf.f_code.co_name == "synchronize":
            return schema.SYNCHRONIZING, site
        if _in_c_call(leaf):
            return (schema.SYNCHRONIZING if site in self.sync_sites else schema.DISPATCH), site
        return (schema.TORCH_PYTHON if kinds[0] in ("torch", "autograd", "cuda") else schema.PYTHON), site

    def _to_site(self, leaf: FrameType) -> tuple[list[str], FrameType | None]:
        """The kinds of the frames from `leaf` out to the first of the model's, the loop's or another library's
        (the site; None where the stack has none), that one included."""
        kinds = []
        frame: FrameType | None = leaf
        while frame is not None:
            kinds.append(self.places.kind(frame.f_code.co_filename))
            if kinds[-1] == "other":
                break
            frame = frame.f_back
        return kinds, frame

    def _site(self, leaf: FrameType) -> str:
        frame = self._to_site(leaf)[1]
        return call_site_of(frame) if frame is not None else "torch"

    def _collected(self, phase: str, info: dict) -> None:
        """gc.callbacks: time each collection while a step is sampled, charged to the line that set it off (on
        whichever thread it ran; the sampler's own collections are its overhead, not the step's)."""
        if self._step is None or threading.get_ident() == self._thread.ident:
            return
        with self._lock:
            now = time.perf_counter_ns()
            if phase == "start":
                self._gc_start = (now, self._site(sys._getframe(1)))
            elif self._gc_start is not None and self._step is not None:
                began, site = self._gc_start
                self.charged[(self._step, schema.GARBAGE_COLLECTION, site)] += now - began
                self._gc_pending += now - began
                self._gc_start = None
