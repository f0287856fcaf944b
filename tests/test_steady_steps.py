"""Host-paced steps measured as they run (#56): the harness adds rounds of timed steps until their median is pinned
down (`noise.steady`: both ends of its 95 % interval within 5 % of it) or its cap, and a run that hit the cap says so.
Table-driven on step times of known spread, and one CPU run of the real harness with rules that never and always
hold."""

import numpy as np
import pytest

from ssmprof.analysis.trust.noise import steady
from ssmprof.kernels import plan_kernels
from ssmprof.profiler.harness import STEADY_ROUNDS, run_training
from ssmprof.workloads.registry import get_workload

RNG = np.random.default_rng(0)
# (scenario, step times in ms, steady?)
CASES = [
    ("GPU-paced: 10 steps within 1 %", 213 + RNG.uniform(-1, 1, 10), True),
    ("host-paced: 10 steps of 29-118 ms", [29, 47, 67, 118, 35, 56, 90, 41, 62, 73], False),
    ("host-paced: 50 steps around 60 ms, 10 % spread", 60 + RNG.normal(0, 6, 50), True),
    ("two steps cannot pin a median", [100.0, 100.1], False),
]


@pytest.mark.parametrize(("times", "expected"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_steady_says_whether_the_median_is_pinned_down(times, expected):
    assert steady(times) is expected


@pytest.mark.parametrize(("rule", "rounds", "capped"),
                         [(lambda t: True, 1, False), (lambda t: False, STEADY_ROUNDS, True)],
                         ids=["steady at once", "never steady: the cap"])
def test_the_harness_adds_rounds_until_the_rule_holds_or_the_cap(rule, rounds, capped):
    workload = get_workload("mamba2-lm")
    cfg = workload.config("tiny", {})
    plan = plan_kernels(workload.kernel_ops(cfg), "cpu", False, cfg.dtype)
    result = run_training(workload, "tiny", cfg, plan, steps=2, warmup=0, steady=rule)
    assert len(result.step_times_ms) == 2 * rounds
    assert result.steps_capped is capped
