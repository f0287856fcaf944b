"""Host-paced steps measured as they run (#56): the harness adds rounds of timed steps until their median is pinned
down (`noise.steady`: both ends of its 95 % interval within 5 % of it) or its cap, and a run that hit the cap says so.
Table-driven on step times of known spread, and one CPU run of the real harness with rules that never and always
hold."""

from pathlib import Path

import numpy as np
import pytest

from ssmprof.analysis.trust.noise import steady
from ssmprof.kernels import plan_kernels
from ssmprof.profiler.harness import STEADY_ROUNDS, run_training
from ssmprof.workloads.registry import get_workload

DATA = Path(__file__).resolve().parent / "data"

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


def test_a_script_whose_steps_did_not_steady_is_told_how_many_would():
    """A script's timed steps are what its loop gives: where their median's interval is wider than STEADY_PCT, the
    page says so and how many steps would pin it (the interval narrows as 1/sqrt(n)): the host-bound script over
    mamba-ssm's LM class on an H100, 10 steps of 73.6 ms (63.5-79.2)."""
    from ssmprof import load
    from ssmprof.analysis.summaries.run import warnings_for
    from ssmprof.analysis.trust.noise import kept_steps, steady, steps_to_steady

    bound = load(DATA / "host-time-h100" / "script-host-bound")
    assert not steady(kept_steps(bound.info)) and steps_to_steady(kept_steps(bound.info)) == 76
    assert ("the script's 10 timed steps leave the median step 73.6 ms with a 95 % interval of 63.5-79.2 ms, wider "
            "than 5 % of it; about 76 timed steps would pin it: profile with --steps 76") in " ".join(
        warnings_for(bound, bound.summary))
    planted = load(DATA / "host-time-h100" / "script-planted")  # 261.2 ms (256.7-272.8): steady
    assert not any("timed steps would pin it" in note for note in warnings_for(planted, planted.summary))
