"""The host sampler (`profiler.host_sampler`) on CPU steps with one cost planted at a known line.

Planted: a module written to a temporary folder and imported, so that its lines are known exactly, whose step runs
small torch CPU ops, then the planted cost, then more ops, and times the planted cost itself. Three costs, one a
scenario: a 4 ms busy-wait (Python calling `time.perf_counter`), a 4 ms `time.sleep` standing for a wait on the GPU
(its line named a sync site, as the sync debug mode names a `.item()`'s), and a full `gc.collect()` over a heap of
300k small lists. 40 steps run unsampled and sampled in turn, as the harness runs them. Required: the planted line's
site, named as `syncs.call_site` names it, is charged its true mean time per sampled step within 10 %, in the
scenario's categories (the readings are about 1 ms apart, so a 4 ms cost is found to a reading or so a step; the
collection is timed exactly by `gc.callbacks`); each sampled step's rows sum to its wall time (to 2 % or 0.3 ms);
at least 90 % of the host's time is attributed; the sampler's overhead has an interval. Seen on CI's kind of host
(2 cores): the busy-wait found 5 % low to 1 % high (mostly low: a reading waits for the GIL longer in Python than
in torch's ops), the sleep within 6 %, the collection within 0.1 %.

Two things keep the error the sampler's own. The ops before the planted cost last 3 ms and a random part of an
interval more each step, so that the readings fall at every phase of it, as a real step's jitter makes them: a phase
lock would turn the sampling error into a bias that more steps do not shrink. And the sampler's thread and the
steps' run on CPUs of their own: left to itself, Linux at times wakes the sampler on the core the steps keep busy,
and its readings then come up to 4 ms late, the lateness charged to the sleep that follows (found up to 7 % high,
with 11 to 18 % of the step unattributed). For the same reason the module's tests run alone under pytest-xdist.
Last, the sampler leaves the process as it found it: the switch interval lowered only inside a sampled step, its
`gc.callbacks` entry and its thread gone on exit, and an unsampled step charged nothing."""

import gc
import importlib.util
import os
import random
import statistics
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from functools import cache, partial

import numpy as np
import pytest
import torch

from ssmprof.analysis.step.host_time import attributed_pct, host_sites, sampler_overhead
from ssmprof.profiler.host_sampler import SWITCH_INTERVAL_S, HostSampler
from ssmprof.profiler.syncs import call_site
from ssmprof.schema import DISPATCH, GARBAGE_COLLECTION, PYTHON, SYNCHRONIZING, HostTime

pytestmark = pytest.mark.alone

PLANTED = '''\
import gc
import time

import torch

HEAP = [[i] for i in range(300_000)]  # what each full collection walks


def work(seconds):
    x = torch.ones(32, 32)
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        x = torch.tanh(x @ x)


def step(plant, lead_s, delay_s):
    work(lead_s)
    start = time.perf_counter()
    if plant == "spin":
        until = start + delay_s
        while time.perf_counter() < until:  # planted: spin
            pass
    elif plant == "sleep":
        time.sleep(delay_s)  # planted: sleep
    else:
        gc.collect()  # planted: gc
    spent = time.perf_counter() - start
    work(0.002)
    return spent
'''
LINES = {text.split("# planted: ")[1]: number for number, text in enumerate(PLANTED.splitlines(), 1)
         if "# planted: " in text}
STEPS = 40  # unsampled and sampled in turn: 20 sampled
DELAY_S = 0.004
LEAD_S = 0.003  # the ops before the planted cost, plus up to JITTER_S
JITTER_S = 0.0015  # more than one interval between readings (1 ms and the wake-up's lateness)
TOLERANCE = 0.10

# scenario -> (planted cost, the categories its line's time goes to, the steps' random lead beyond LEAD_S)
SCENARIOS = {
    "busy-wait 4 ms": ("spin", {PYTHON, DISPATCH}, JITTER_S),  # the loop's own bytecode, and its calls into C
    "sleep 4 ms at a sync site": ("sleep", {SYNCHRONIZING}, JITTER_S),
    "full collection over 300k lists": ("gc", {GARBAGE_COLLECTION}, JITTER_S),
}


@dataclass(frozen=True)
class Run:
    host_time: HostTime
    site: str  # the planted line's
    truth_ms: float  # the planted cost's mean over the sampled steps, timed by the step
    walls_ms: dict[int, float]  # each sampled step's wall time, by its index


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """The planted module, imported once, with torch on one thread (CI's two cores: the sampler needs the other)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    path = tmp_path_factory.mktemp("planted") / "planted.py"
    path.write_text(PLANTED)
    spec = importlib.util.spec_from_file_location("planted", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def runs(planted):
    """Each scenario's run, made once for the tests that read it."""
    return cache(partial(sample, planted))


def site(module, plant: str) -> str:
    return call_site([traceback.FrameSummary(module.__file__, LINES[plant], "step")])


def sample(module, scenario: str) -> Run:
    plant, _, jitter_s = SCENARIOS[scenario]
    rng = random.Random(0)
    module.step(plant, LEAD_S, DELAY_S)  # warm-up: torch's first ops, the first collection's cache misses
    times_ms, walls_ms, truth_s = [], {}, []
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {max(cpus)})  # the sampler's thread, started by `with`, keeps this CPU
    try:
        with HostSampler(sync_sites={site(module, "sleep")}) as sampler:
            os.sched_setaffinity(0, {min(cpus)})  # and the steps run on another
            for i in range(STEPS):
                start = time.perf_counter()
                with sampler.step(i // 2, sampled=i % 2 == 1):
                    spent = module.step(plant, LEAD_S + rng.uniform(0, jitter_s), DELAY_S)
                times_ms.append((time.perf_counter() - start) * 1e3)
                if i % 2:
                    walls_ms[i // 2] = times_ms[-1]
                    truth_s.append(spent)
    finally:
        os.sched_setaffinity(0, cpus)
    return Run(HostTime(**sampler.host_time(times_ms)), site(module, plant), statistics.mean(truth_s) * 1e3,
               walls_ms)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=list(SCENARIOS))
def test_planted_cost_is_charged_to_its_line(runs, scenario):
    run = runs(scenario)
    _, categories, _ = SCENARIOS[scenario]
    sites = host_sites(run.host_time)
    at_line = sites[sites["site"] == run.site]
    assert set(at_line["category"]) & categories, (run.site, sites.head(8))
    found = at_line.loc[at_line["category"].isin(categories), "ms"].sum()
    assert abs(found / run.truth_ms - 1) <= TOLERANCE, (found, run.truth_ms, sites.head(8))


@pytest.mark.parametrize("scenario", SCENARIOS, ids=list(SCENARIOS))
def test_each_sampled_step_is_charged_its_wall_time(runs, scenario):
    run = runs(scenario)
    charged = {}
    for step, _, _, ms in run.host_time.rows:
        charged[step] = charged.get(step, 0.0) + ms
    assert charged.keys() == run.walls_ms.keys()
    off = {step: (charged[step], wall) for step, wall in run.walls_ms.items()
           if abs(charged[step] - wall) > max(0.02 * wall, 0.3)}
    assert off == {}


@pytest.mark.parametrize("scenario", SCENARIOS, ids=list(SCENARIOS))
def test_host_time_is_attributed_and_overhead_has_an_interval(runs, scenario):
    host_time = runs(scenario).host_time
    assert attributed_pct(host_time) >= 90
    overhead = sampler_overhead(host_time)
    assert np.isfinite([overhead.value, overhead.low, overhead.high]).all(), overhead


def test_sampler_leaves_the_process_as_it_found_it(planted):
    """The switch interval lowered only while a sampled step runs, and restored after it and on exit; the unsampled
    steps (0 and 2) charged nothing."""
    switch, callbacks = sys.getswitchinterval(), list(gc.callbacks)
    sys.setswitchinterval(0.003)  # not the default: the value before is restored, not 5 ms
    seen = []
    try:
        with HostSampler() as sampler:
            assert len(gc.callbacks) == len(callbacks) + 1
            for i in range(3):
                with sampler.step(i, sampled=i == 1):
                    planted.step("spin", LEAD_S, DELAY_S)
                    seen.append(sys.getswitchinterval())
                seen.append(sys.getswitchinterval())
        seen.append(sys.getswitchinterval())
    finally:
        sys.setswitchinterval(switch)
    assert seen == pytest.approx([0.003, 0.003, SWITCH_INTERVAL_S, 0.003, 0.003, 0.003, 0.003])
    assert gc.callbacks == callbacks
    assert "ssmprof-host-sampler" not in [thread.name for thread in threading.enumerate()]
    assert {step for step, *_ in sampler.host_time([10.0] * 3)["rows"]} == {1}
