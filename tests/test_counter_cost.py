"""The counter passes' predicted cost (`profiler.counter_cost`): its constants are the fit of the training runs, and
its error is measured on runs it was not fitted on, from what a plan knows before the passes start (each pass's
metric group and launches, the run's peak memory, the GPU's memory)."""

import ast
import json
import statistics
from pathlib import Path

import numpy as np
import pytest

from ssmprof.profiler import counter_cost
from ssmprof.profiler.counter_cost import PlannedPass, pass_cost, plan_message, predict_plan

ROOT = Path(__file__).resolve().parents[1]
TRAINING = ROOT / "tests/data/suite-cost-h100"  # passes not started ahead
CALIBRATION = ROOT / "tests/data/suite-h100-same-host-calibration"  # passes after the first started ahead
STAGES_AFTER_TURN = ("cuda", "plan", "pin", "build", "warmup", "timed", "harness", "exit")


def counters_of(path: Path) -> dict:
    return json.loads(path.read_text()).get("collectors", {}).get("counters", {})


def held_out_runs() -> list[Path]:
    """Every run with pass records and kernel replay bookkeeping (`pass_replay`) of passes on one GPU but the fitted
    ones; runs of application replay, which the model leaves out, are not among them, nor those whose passes were
    spread over GPUs (`spread_runs`: a pass's recorded wall time there runs to when it was waited for)."""
    return sorted(path for path in pass_runs() if not path.is_relative_to(TRAINING)
                  and not path.is_relative_to(CALIBRATION) and (counters_of(path).get("pass_gpus") or 1) == 1)


def pass_runs() -> list[Path]:
    """Every run with pass records and kernel replay bookkeeping."""
    found = [*ROOT.glob("ssmprof/reference/**/run.json"), *ROOT.glob("tests/data/**/*run.json")]
    return sorted(path for path in found if "pass_replay" in (counters := counters_of(path))
                  and "pass_seconds" in counters and counters.get("replay_mode", "kernel") == "kernel")


def spread_runs() -> list[Path]:
    return [path for path in pass_runs() if (counters_of(path).get("pass_gpus") or 1) > 1]


def plan_of(run: dict) -> list[PlannedPass]:
    """The run's passes as its plan had them: the last of several is the warp-stall pass except in focus mode."""
    counters = run["collectors"]["counters"]
    launches = [replay["launches"] for replay in counters["pass_replay"]]
    last = len(launches) - 1
    return [PlannedPass("stalls" if counters["mode"] != "focus" and 0 < number == last else "counters", count)
            for number, count in enumerate(launches)]


def predicted_and_measured(path: Path) -> tuple[list[float], list[float]]:
    """Each pass's predicted and measured wall time; a run whose passes were not started ahead (no `ahead`
    stage: before that existed) is predicted so."""
    run = json.loads(path.read_text())
    counters = run["collectors"]["counters"]
    peak_gib, gpu_gib = run["harness"]["peak_memory_bytes"] / 2**30, run["gpu"]["memory_bytes"] / 2**30
    plan, iteration = plan_of(run), run["coverage"]["launches"]
    if any("ahead" in stages for stages in counters["pass_seconds"]):
        predicted = predict_plan(plan, peak_gib, gpu_gib, iteration_launches=iteration).pass_seconds
    else:
        predicted = [pass_cost(planned.launches, counter_cost.REPLAY_PASSES[planned.group], peak_gib, gpu_gib,
                               False, iteration).wall_s(0.0) for planned in plan]
    return predicted, counters["pass_wall_s"]


def relative_error(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured


# (runs, largest |error| of a run's total, of one pass): what the held-out runs measure, a point or two above
BOUNDS = [
    # the bundled workloads, H100 and H200: totals -14..+18 %, passes -37..+30 % (-27..+30 % but the H100
    # graph-mamba of 2026-11-27's third pass: 10.8 s predicted, 17.3 s measured)
    ("ssmprof/reference/*/*/run.json", 0.20, 0.39),
    ("ssmprof/reference/*/models/*/run.json", 0.20, 0.32),
    # the bundled sweeps, one focus pass of 5-31 launches (15-36 s): H100 -9..+4 %, H200 -13..+49 % (the
    # transformer's points of 5-12 launches on a host that starts faster than the training host)
    ("ssmprof/reference/*/sweeps/*/*/run.json", 0.50, 0.50),
    # other runs under tests/data: the MoE hybrids of many launches, granite +4 % (the iteration-launch term's fit),
    # qwen3-next +10 % and jamba -26 % held out; the small preset (cache-modes, hybrid-mamba3-small, own-model,
    # instruction-bounds) builds and replays faster than the paper preset fitted, +25..+48 %; the older
    # 14-pass graph-mamba -27 %, the H200 suite before passes were started ahead +17..+35 %
    ("tests/data/**/*run.json", 0.50, 0.76),
]


@pytest.mark.parametrize(("pattern", "total_bound", "pass_bound"), BOUNDS)
def test_held_out_error(pattern, total_bound, pass_bound):
    runs = [path for path in held_out_runs() if path in set(ROOT.glob(pattern))]
    assert runs
    for path in runs:
        predicted, measured = predicted_and_measured(path)
        assert abs(relative_error(sum(predicted), sum(measured))) <= total_bound, path
        assert max(abs(relative_error(p, m)) for p, m in zip(predicted, measured, strict=True)) <= pass_bound, path


def test_the_bundled_paper_suites_meet_the_goal_of_25_percent():
    """The issue's goal, per workload: the bundled H100 and H200 suites' totals within 25 %, and typically within
    10 %."""
    errors = [relative_error(*map(sum, predicted_and_measured(path)))
              for path in held_out_runs() if path.parts[-3] in ("h100-sxm", "h200")]
    assert len(errors) == 16
    assert max(map(abs, errors)) < 0.25
    assert statistics.median(map(abs, errors)) < 0.10


# Runs whose passes were spread over the GPUs of one host (`--pass-gpus`), each total's error (predicted span
# against the measured counter wall time): mamba2-lm paper over 4 H100s (2026-11-27), the MoE hybrids small over
# 2 H100s (2026-11-28; granite before and after the fixes of a62782b and b29dbd8). Two passes at once share the
# host: jamba's took 71-76 s where one GPU's took 50-76 s.
SPREAD_ERRORS = {
    "ssmprof/reference/h100-sxm/parallel/mamba2-lm-single/run.json": (4, -0.152),
    "tests/data/counter-cost-moe-h100/granite-small-2gpu/run.json": (2, 0.015),
    "tests/data/counter-cost-moe-h100/granite-small-2gpu-before-fixes/run.json": (2, -0.019),
    "tests/data/counter-cost-moe-h100/jamba-small-2gpu/run.json": (2, -0.227),
}


def test_passes_spread_over_gpus_within_25_percent():
    assert sorted(ROOT / run for run in SPREAD_ERRORS) == spread_runs()
    for run, (lanes, expected) in SPREAD_ERRORS.items():
        recorded = json.loads((ROOT / run).read_text())
        counters = recorded["collectors"]["counters"]
        peak_gib, gpu_gib = recorded["harness"]["peak_memory_bytes"] / 2**30, recorded["gpu"]["memory_bytes"] / 2**30
        cost = predict_plan(plan_of(recorded), peak_gib, gpu_gib, lanes, recorded["coverage"]["launches"])
        assert counters["pass_gpus"] == lanes
        error = relative_error(cost.total_s, counters["wall_s"])
        assert error == pytest.approx(expected, abs=0.005), run
        assert abs(error) < 0.25


def training_passes() -> list[tuple[dict, dict, float]]:
    """(pass_replay, pass_seconds, wall) of every training pass, with the run's peak GiB in pass_replay."""
    rows = []
    for path in sorted(TRAINING.glob("*-run.json")):
        run = json.loads(path.read_text())
        counters = run["collectors"]["counters"]
        peak = run["harness"]["peak_memory_bytes"] / 2**30
        rows += [({**replay, "peak": peak}, stages, wall) for replay, stages, wall
                 in zip(counters["pass_replay"], counters["pass_seconds"], counters["pass_wall_s"], strict=True)]
    return rows


def test_constants_are_the_fit_of_the_training_runs():
    rows = training_passes()
    assert len(rows) == 18 and not any("ahead" in stages for _, stages, _ in rows)
    assert {replay["passes_median"] for replay, _, _ in rows[0::3] + rows[1::3]} == {counter_cost.REPLAY_PASSES[
        "counters"]}
    assert {replay["passes_median"] for replay, _, _ in rows[2::3]} == {counter_cost.REPLAY_PASSES["stalls"]}
    share = sum(r["launches"] * r["gib_per_pass_median"] for r, _, _ in rows) / \
        sum(r["launches"] * r["peak"] for r, _, _ in rows)
    assert share == pytest.approx(counter_cost.RESTORED_SHARE_OF_PEAK, abs=0.005)
    set_up = statistics.median(wall - stages["profiled"] for _, stages, wall in rows)
    assert set_up == pytest.approx(counter_cost.SET_UP_S, abs=0.05)
    terms = np.array([[1.0, r["launches"], r["launches"] * r["passes_median"] * r["gib_per_pass_median"]]
                      for r, _, _ in rows])
    fit = np.linalg.lstsq(terms, np.array([stages["profiled"] for _, stages, _ in rows]), rcond=None)[0]
    assert fit == pytest.approx([counter_cost.ITERATION_UNDER_NCU_S, counter_cost.SECONDS_PER_LAUNCH,
                                 counter_cost.SECONDS_PER_GIB_RESTORED], rel=0.01)


def test_ahead_constants_are_the_fit_of_the_calibration_runs():
    after_turn, preparations = [], []
    for path in sorted(CALIBRATION.glob("*/run.json")):
        counters = counters_of(path)
        for stages, wall in list(zip(counters["pass_seconds"], counters["pass_wall_s"], strict=True))[1:]:
            own = sum(stages[stage] for stage in STAGES_AFTER_TURN)
            after_turn.append(own)
            if wall - own - stages["profiled"] > 0.5:  # its turn came before it was ready
                preparations.append(stages["start"] + stages["ahead"])
    assert len(after_turn) == 12 and len(preparations) == 2
    assert statistics.median(after_turn) == pytest.approx(counter_cost.AHEAD_SET_UP_S, abs=0.05)
    assert statistics.median(preparations) == pytest.approx(counter_cost.AHEAD_PREPARATION_S, abs=0.05)


def test_through_host_constant_is_the_micro_benchmark():
    log = (ROOT / "tests/data/ncu-pass-cost-h100/ncu-pass-cost.log").read_text()
    holds = {line.split(" GiB more")[0].rsplit(" ", 1)[1]: ast.literal_eval(line[line.index("{"):])
             for line in log.splitlines() if "GiB more" in line}
    empty, past_edge = holds["0"], holds["45"]  # 20 launches each
    per_gib = (past_edge["wall_s"] - empty["wall_s"]) / (20 * past_edge["passes"] * past_edge["gib_per_pass"])
    assert per_gib == pytest.approx(counter_cost.THROUGH_HOST_SECONDS_PER_GIB, rel=0.01)


def test_a_pass_started_ahead_waits_only_for_the_preparation_left():
    ahead = pass_cost(10, 7, 1.0, 80.0, started_ahead=True)
    assert ahead.wall_s(100.0) == pytest.approx(ahead.set_up + ahead.replay)
    assert ahead.wall_s(4.0) == pytest.approx(counter_cost.AHEAD_PREPARATION_S - 4.0 + ahead.set_up + ahead.replay)
    alone = pass_cost(10, 7, 1.0, 80.0, started_ahead=False)
    assert alone.preparation == 0.0 and alone.set_up == counter_cost.SET_UP_S


def test_plan_on_one_gpu_and_on_several():
    plan = [PlannedPass("counters", 60), PlannedPass("counters", 10), PlannedPass("stalls", 30)]
    one = predict_plan(plan, 36.0, 79.2)
    first = pass_cost(60, 7, 36.0, 79.2, False).wall_s(0.0)
    assert one.pass_seconds[0] == pytest.approx(first) and one.total_s == pytest.approx(sum(one.pass_seconds))
    # the third's turn comes after the short second: it is still preparing then
    assert one.pass_seconds[2] > pass_cost(30, 8, 36.0, 79.2, True).wall_s(float("inf"))
    three = predict_plan(plan, 36.0, 79.2, lanes=3)
    assert three.total_s == pytest.approx(max(three.pass_seconds))
    two = predict_plan(plan, 36.0, 79.2, lanes=2)
    # the third starts once the first has been waited for
    assert two.total_s == pytest.approx(max(two.pass_seconds[0] + two.pass_seconds[2], two.pass_seconds[1]))


def test_replay_through_the_host_is_marked_a_lower_bound():
    near_edge = predict_plan([PlannedPass("counters", 52)], 49.1, 79.2)  # mamba3-lm paper on an H100
    assert near_edge.through_host
    assert near_edge.total_s > 200  # it did not finish in 270 s
    assert predict_plan([PlannedPass("counters", 23)], 75.3, 139.8).through_host is False  # H200, 32k tokens
    assert plan_message(near_edge).startswith("counters: 1 pass, 52 launches, at least ")
    assert "lower bound" in plan_message(near_edge)


def test_message():
    cost = counter_cost.PlanCost([PlannedPass("counters", 200), PlannedPass("stalls", 45)], [95.2, 34.6], 129.8,
                                 False)
    assert plan_message(cost) == "counters: 2 passes, 245 launches, about 2 min 10 s (pass 1 95 s, pass 2 35 s)"


def test_a_model_of_many_launches_pays_them_in_every_pass():
    """The iteration-launch term, fitted on granite-4.0-hybrid small (5,414 launches), predicts qwen3-next small
    (11,256 launches, held out) within 10 % on two H100s a day apart: +9.7 % of 327.5 s, -6.7 % of 385.2 s; without
    it, -51 % of the first. Paper-preset iterations (393-1322 launches) pay at most 0.95 s more a pass."""
    predictions = {}
    for run, measured_s, error in (("qwen3-next-small-before-fixes", 327.5, 0.097),
                                   ("qwen3-next-small", 385.2, -0.067)):
        predicted, measured = predicted_and_measured(ROOT / "tests/data/counter-cost-moe-h100" / run / "run.json")
        assert sum(measured) == pytest.approx(measured_s, abs=0.1)
        assert relative_error(sum(predicted), sum(measured)) == pytest.approx(error, abs=0.005)
        predictions[run] = predicted
    without = [p - counter_cost.SECONDS_PER_ITERATION_LAUNCH * (11256 - counter_cost.FIT_ITERATION_LAUNCHES)
               for p in predictions["qwen3-next-small-before-fixes"]]
    assert relative_error(sum(without), 327.5) == pytest.approx(-0.51, abs=0.01)
    assert pass_cost(10, 7, 1.0, 80.0, False, 1322).set_up - pass_cost(10, 7, 1.0, 80.0, False).set_up < 0.95


def parallel_runs() -> list[Path]:
    """Every run of several ranks with pass records: each pass launched the whole job again at its turn."""
    found = [*ROOT.glob("ssmprof/reference/**/run.json"), *ROOT.glob("tests/data/**/*run.json")]
    return sorted(path for path in found if "pass_wall_s" in counters_of(path)
                  and json.loads(path.read_text()).get("parallel", {}).get("world_size", 1) > 1)


def parallel_predicted_and_measured(path: Path, parallel_job: bool = True) -> tuple[list[float], list[float]]:
    """Each pass's predicted wall time (as a parallel job's, or as the passes of one GPU were before it) and the
    measured one."""
    run = json.loads(path.read_text())
    peak_gib, gpu_gib = run["harness"]["peak_memory_bytes"] / 2**30, run["gpu"]["memory_bytes"] / 2**30
    cost = predict_plan(plan_of(run), peak_gib, gpu_gib, iteration_launches=run["coverage"]["launches"],
                        parallel_job=parallel_job)
    return cost.pass_seconds, run["collectors"]["counters"]["pass_wall_s"]


PARALLEL = "ssmprof/reference/h100-sxm/parallel"
PARALLEL_FIT = [ROOT / PARALLEL / "mamba2-lm-tp4/run.json", ROOT / PARALLEL / "mamba2-lm-tp4-cuda-graphs/run.json"]

# (run, error of its total, largest |error| of one pass, a point above): the recorded parallel runs, whose totals the
# model before JOB_START_UP_S predicted 29-50 % too short
PARALLEL_ERRORS = [
    # fitted: 4 x H100, 2026-11-27, 124.7 s and 121.8 s measured
    (f"{PARALLEL}/mamba2-lm-tp4/run.json", -0.039, 0.11),
    (f"{PARALLEL}/mamba2-lm-tp4-cuda-graphs/run.json", -0.016, 0.06),
    # held out, the same host: 123.7 s and 149.7 s measured
    (f"{PARALLEL}/mamba1-lm-tp4/run.json", -0.082, 0.14),
    (f"{PARALLEL}/hybrid-tp4/run.json", 0.056, 0.10),
    # held out, the fitted workload on 4 x H100 the day before: 134.7 s measured
    ("tests/data/tp4-h100-mamba2-lm-paper-straggler/run.json", -0.110, 0.14),
    # held out, TP=2 on 2 x H200 before the torchrun launcher (its ranks plain processes, a host that starts
    # faster): 99.0 s measured
    ("ssmprof/reference/h200/parallel/mamba2-lm-tp2/run.json", 0.236, 0.34),
    # held out, TP=2 on 2 x H100 with the torchrun launcher (2026-11-28, the small preset): 130.5 s measured
    ("tests/data/rank-died-while-sampled-h100/mamba2-lm-small-tp2/run.json", -0.093, 0.15),
    # held out, the same command without the planted death on another 2 x H100 host the next session: 123.8 s
    ("tests/data/sampled-job-h100/mamba2-lm-small-tp2/run.json", -0.020, 0.05),
]


def test_every_parallel_run_with_pass_records_is_measured():
    assert sorted(ROOT / run for run, _, _ in PARALLEL_ERRORS) == parallel_runs()


@pytest.mark.parametrize(("run", "total_error", "pass_bound"), PARALLEL_ERRORS)
def test_parallel_runs_within_25_percent(run, total_error, pass_bound):
    """Each pass a parallel job of its own: the totals within 25 % of the measured counter wall time, fitted or
    held out, where the passes as a single GPU's (after the first started ahead, no job) were 29-50 % short."""
    predicted, measured = parallel_predicted_and_measured(ROOT / run)
    error = relative_error(sum(predicted), sum(measured))
    assert error == pytest.approx(total_error, abs=0.005)
    assert abs(error) < 0.25
    assert max(abs(relative_error(p, m)) for p, m in zip(predicted, measured, strict=True)) <= pass_bound
    before = relative_error(*map(sum, parallel_predicted_and_measured(ROOT / run, parallel_job=False)))
    assert -0.51 < before < -0.28


def test_job_start_up_is_the_fit_of_two_parallel_runs():
    """JOB_START_UP_S: the median over the fitted passes of what each took beyond a pass of one GPU not started
    ahead."""
    beyond = []
    for path in PARALLEL_FIT:
        run = json.loads(path.read_text())
        peak_gib, gpu_gib = run["harness"]["peak_memory_bytes"] / 2**30, run["gpu"]["memory_bytes"] / 2**30
        for planned, wall in zip(plan_of(run), run["collectors"]["counters"]["pass_wall_s"], strict=True):
            alone = pass_cost(planned.launches, counter_cost.REPLAY_PASSES[planned.group], peak_gib, gpu_gib, False,
                              run["coverage"]["launches"])
            beyond.append(wall - alone.wall_s(0.0))
    assert len(beyond) == 6
    assert statistics.median(beyond) == pytest.approx(counter_cost.JOB_START_UP_S, abs=0.05)


def test_a_parallel_job_starts_no_pass_ahead_and_each_pays_the_job():
    plan = [PlannedPass("counters", 60), PlannedPass("counters", 10), PlannedPass("stalls", 30)]
    job = predict_plan(plan, 11.1, 79.2, parallel_job=True)
    alone = [pass_cost(p.launches, counter_cost.REPLAY_PASSES[p.group], 11.1, 79.2, False).wall_s(0.0) for p in plan]
    assert job.pass_seconds == pytest.approx([wall + counter_cost.JOB_START_UP_S for wall in alone])
    assert job.total_s == pytest.approx(sum(job.pass_seconds))
    one_gpu = predict_plan(plan, 11.1, 79.2)  # the default: passes after the first started ahead, no job
    assert one_gpu.pass_seconds[0] == pytest.approx(alone[0]) and one_gpu.pass_seconds[1] < alone[1]
