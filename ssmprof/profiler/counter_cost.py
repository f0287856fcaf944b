"""What Nsight Compute's counter passes will cost, predicted before they start.

A pass (`profile_run.collect_counters`) is a child process that starts, builds and warms up the workload, then
runs the profiled iteration while ncu replays each profiled launch once per replay pass, saving and restoring the
GPU memory the child holds on each. Its wall time is taken apart the way `counters.pass_seconds` records it:

- set-up: everything but the profiled iteration (start-up, imports, CUDA, build, warm-up, the timed step, exit),
  a constant; a pass started ahead of its turn does its start-up and imports while the pass before it replays,
  so only the rest counts, plus whatever of its preparation the pass before it left undone;
- replay: the profiled iteration, `ITERATION_UNDER_NCU_S` plus, per profiled launch, `SECONDS_PER_LAUNCH` and
  `SECONDS_PER_GIB_RESTORED` for each GiB restored on each of its replay passes.

The constants that do not depend on passes being started ahead were fitted on the six H100 paper-suite runs of
tests/data/suite-cost-h100 (18 passes, none started ahead); the two that do (`AHEAD_SET_UP_S`,
`AHEAD_PREPARATION_S`) on the H100 suite of tests/data/suite-h100-same-host-calibration, whose passes after the
first were started ahead. The error is measured on other runs (tests/test_counter_cost.py), from what a plan
knows (each pass's group and launches, the run's peak memory): the 18 bundled H100 and H200 workload runs
(ssmprof/reference, not the sweeps) have their total within 18 % of the measured counter wall time (median 6 %),
every pass within 30 %; the 24 bundled sweep points, one short focus pass each, within 49 % (median 8 %: the
H200 transformer's 5-12 launches on a host that starts faster). Runs unlike the training runs err more: the
small preset (tests/data: cache-modes, hybrid-mamba3-small, own-model, instruction-bounds) builds and replays
faster than the paper preset, predicted 25-48 % too long.

A parallel run's pass (`parallel_job`, `distributed.RankPass`) launches the whole job again at its turn, so none is
started ahead: each pays the set-up of a pass not started ahead and the job's start-up (`JOB_START_UP_S`, fitted on
two TP=4 H100 runs; the three other TP=4 H100 runs with pass records, held out, have their total within 11 %, every
pass within 14 %, and a TP=2 run on two H100s -9 %), so the model has no term for the world size.

Replay through the host (`counters.replay_through_host`) is modelled from a single micro-benchmark and no
profiled run that went through the host finished: its prediction is a rough lower bound, marked unreliable.
"""

from __future__ import annotations

from dataclasses import dataclass

from ssmprof.schema import duration_words

# Median replay passes per profiled launch of each metric group on the H100, as every pass of the training runs
# recorded (`pass_replay` passes_median): 7 for the counter set, 8 for the warp-stall set. The bundled H100 and
# H200 runs with the same sets record the same.
REPLAY_PASSES = {"counters": 7, "stalls": 8}

# The GiB a replay pass restores, as a share of the process's peak of live tensors (run.json harness
# peak_memory_bytes): the launch-weighted ratio of `pass_replay` gib_per_pass_median to the peak over the
# training passes. A launch holds less than the iteration's peak (the peak is reached once; small workloads
# hold mostly their weights and optimizer state: 0.4-0.6 of peak for graph-mamba, 0.9 for the language models).
RESTORED_SHARE_OF_PEAK = 0.84

# Set-up of a pass not started ahead: the median of wall minus profiled iteration over the 18 training passes
# (15.0-21.8 s): ncu's and Python's start-up 5.0 s, imports and planning 2.5 s, build 6.0 s, warm-up 3.0 s,
# CUDA, the timed step and exit 1.4 s (medians).
SET_UP_S = 18.3

# Set-up of a pass started ahead, from its turn on: CUDA, building on imported libraries, warm-up, the timed step
# and exit. The median over the 12 ahead passes of the calibration runs (3.2-6.1 s).
AHEAD_SET_UP_S = 4.7

# What a pass started ahead does before its turn can begin (start-up and importing its kernel libraries); a turn
# that comes sooner waits for the rest. The median over the calibration passes whose turn came before they were
# ready (10.5 and 12.6 s: mamba1-lm's and mamba2-lm's third, after a second pass of 7 and 11 s).
AHEAD_PREPARATION_S = 11.5

# The profiled iteration's time apart from its profiled launches (the iteration itself with the caching
# allocator off, every other launch passing through ncu) and each profiled launch's replay cost: ncu's work per
# launch and, per replay pass, restoring what the process holds in spare GPU memory. Least squares of
# `profiled` = ITERATION_UNDER_NCU_S + launches x (SECONDS_PER_LAUNCH + SECONDS_PER_GIB_RESTORED x passes x GiB
# restored per pass) over the 18 training passes (relative error: 11 % rms, 30 % at most). Their replay passes
# (7 or 8) are too alike to tell a cost per pass from one per launch, so SECONDS_PER_LAUNCH holds for metric sets
# of about that many passes. The iteration's other launches (393-1322) were tried as a further term: 10 % rms,
# not worth a term.
ITERATION_UNDER_NCU_S = 1.4
SECONDS_PER_LAUNCH = 0.326
SECONDS_PER_GIB_RESTORED = 4.9e-4

# The iteration's launches beyond those of the fitted runs: each passes through Nsight Compute's interception in every
# step the pass runs (warm-up, the timed step, the profiled iteration), so a model of many small launches pays them
# in set-up and replay alike. Within the fitted runs' 393-1322 launches the term was not worth it (above); past their
# median of 930 (FIT_ITERATION_LAUNCHES) it is: hf:granite-4.0-hybrid small's 5,414 launches cost each of its 7
# passes a median 10.8 s more than the model without it (tests/data/counter-plan-h100/granite-small), 2.4 ms a
# launch, fitted there (226.4 s predicted for its 218.1 s, +4 %; -31 % without the term); held out, hf:qwen3-next
# small's 11,256 launches are then predicted 359.2 s for their 327.5 s (+10 %; -51 % without the term;
# tests/test_counter_cost.py). hf:jamba small, held out too, is predicted 26 % short (153.4 s for 206.4 s; its
# profiled launches pay 0.44-0.52 s each in replay where the model gives 0.35: the per-launch cost varies 0.30-0.50 s
# over the bundled runs, which launches, restored bytes and the iteration's size do not explain).
FIT_ITERATION_LAUNCHES = 930
SECONDS_PER_ITERATION_LAUNCH = 2.4e-3

# What a parallel run's pass (`distributed.RankPass`: the whole torchrun job launched again at its turn, the rank
# under ncu replaying) costs beyond a pass of one GPU not started ahead: torchrun, the other ranks' start-up, the
# process group, the wait for every rank at exit. The median of measured wall minus `pass_cost` (not started ahead)
# over the 6 passes of mamba2-lm-tp4 and its cuda-graphs twin on 4 x H100 (ssmprof/reference/h100-sxm/parallel,
# 2026-11-27; 7.4-14.4 s; their totals then -4 % and -2 %). Held out (tests/test_counter_cost.py), totals: that
# host's mamba1-lm-tp4 -8 % and hybrid-tp4 +6 %, the fitted workload's run of 2026-11-26
# (tests/data/tp4-h100-mamba2-lm-paper-straggler) -11 %; every pass within 14 % (the model before, its passes after
# the first started ahead and no job: totals -43 % to -50 %). The world size is not a term: held out at TP=2 on
# 2 x H100 (tests/data/rank-died-while-sampled-h100, the small preset) the total is -9 % (-47 % before). The TP=2
# run on 2 x H200 (ssmprof/reference/h200/parallel/mamba2-lm-tp2, 2026-11-24) predates the torchrun launcher (its
# ranks plain processes, on a host that starts faster) and is predicted +24 % (its passes +17 % to +33 %).
JOB_START_UP_S = 8.3

# Replay through the host, per GiB per replay pass: 20 GEMM launches of 14 replay passes holding 45.2 GiB took
# 181.9 s on an H100 where holding 0.2 GiB took 12.6 s (tests/data/ncu-pass-cost-h100/ncu-pass-cost.log):
# (181.9 - 12.6) s / (20 x 14 x 45.2 GiB). One micro-benchmark; mamba3-lm's 52 pass-1 launches at 49 GiB did
# not finish in 270 s on an H100, slower than this predicts, so a prediction through the host is a lower bound.
THROUGH_HOST_SECONDS_PER_GIB = 0.0134


@dataclass(frozen=True)
class PlannedPass:
    """One counter pass as `collect_counters` plans it: its metric group ("counters" or "stalls") and the
    launches it profiles (`SamplingPlan.expected`)."""

    group: str
    launches: int


@dataclass(frozen=True)
class PassCost:
    """One pass's predicted wall time in parts (seconds): `preparation` (start-up and imports done before its turn,
    overlapping the pass before it; 0 where the pass is not started ahead), `set_up` (the rest of the set-up, on
    its own time), `replay` (the profiled iteration); `through_host`: its replay goes through the host, so the
    prediction is a lower bound."""

    preparation: float
    set_up: float
    replay: float
    through_host: bool

    def wall_s(self, turn_after_s: float) -> float:
        """The wall time the pass adds (what `NcuPass.finish` measures) when its turn comes `turn_after_s`
        seconds after it started: the preparation still undone then, the set-up and the replay."""
        return max(0.0, self.preparation - turn_after_s) + self.set_up + self.replay


def restored_gib(peak_gib: float) -> float:
    """The GiB a replay pass saves and restores for a process whose peak of live tensors is `peak_gib`."""
    return RESTORED_SHARE_OF_PEAK * peak_gib


def pass_cost(launches: int, replay_passes: float, peak_gib: float, gpu_memory_gib: float,
              started_ahead: bool, iteration_launches: int = 0, parallel_job: bool = False) -> PassCost:
    """The predicted cost of one pass profiling `launches` launches of `replay_passes` replay passes each, in a
    process whose peak of live tensors is `peak_gib` on a GPU of `gpu_memory_gib`, whose iteration launches
    `iteration_launches` kernels (0: not known; those past FIT_ITERATION_LAUNCHES add to the set-up). A pass of a
    parallel run (`parallel_job`, never started ahead) adds the job's start-up (JOB_START_UP_S) to its set-up.
    Replay goes through the host
    where the copy of what a replay pass restores does not fit beside it (`counters.replay_through_host`'s rule
    on the restored GiB, not the peak: the H200's 32k-token sweep points peaked at 75-79 GiB, which the peak
    calls through the host on its 140 GiB, and replayed 61-64 GiB a pass in GPU memory in 24-36 s)."""
    through_host = 2 * restored_gib(peak_gib) > gpu_memory_gib
    per_gib = THROUGH_HOST_SECONDS_PER_GIB if through_host else SECONDS_PER_GIB_RESTORED
    per_launch = SECONDS_PER_LAUNCH + per_gib * replay_passes * restored_gib(peak_gib)
    replay = ITERATION_UNDER_NCU_S + launches * per_launch
    many = SECONDS_PER_ITERATION_LAUNCH * max(0, iteration_launches - FIT_ITERATION_LAUNCHES)
    if started_ahead:
        return PassCost(AHEAD_PREPARATION_S, AHEAD_SET_UP_S + many, replay, through_host)
    job = JOB_START_UP_S if parallel_job else 0.0
    return PassCost(0.0, SET_UP_S + job + many, replay, through_host)


@dataclass(frozen=True)
class PlanCost:
    """The predicted cost of a plan's passes: each pass's wall time (as `collect_counters` records `pass_wall_s`),
    the collection's (its `wall_s`), and whether any replay goes through the host (a lower bound then)."""

    passes: list[PlannedPass]
    pass_seconds: list[float]
    total_s: float
    through_host: bool


def predict_plan(passes: list[PlannedPass], peak_gib: float, gpu_memory_gib: float, lanes: int = 1,
                 iteration_launches: int = 0, parallel_job: bool = False) -> PlanCost:
    """The passes' predicted cost (`pass_cost`, of an iteration of `iteration_launches` kernels), run as
    `collect_counters` runs them. On one GPU (`lanes` 1) one after another,
    each after the first started as the one before it gets its turn, so it prepares while that one runs: the
    total is the sum. A parallel run's passes (`parallel_job`) also run one after another, but each launches the
    whole job at its turn (`distributed.RankPass`), none started ahead. On `lanes` identical GPUs, none started
    ahead: the first `lanes` start at once and each later one when the pass `lanes` before it has been waited
    for, in order; the total is the span."""
    costs = [pass_cost(planned.launches, REPLAY_PASSES[planned.group], peak_gib, gpu_memory_gib,
                       lanes == 1 and number > 0 and not parallel_job, iteration_launches, parallel_job)
             for number, planned in enumerate(passes)]
    walls: list[float] = []
    if lanes == 1:
        for cost in costs:
            walls.append(cost.wall_s(walls[-1] if walls else 0.0))
        total = sum(walls)
    else:
        waited: list[float] = []  # when each pass has been waited for, in order
        for number, cost in enumerate(costs):
            started = waited[number - lanes] if number >= lanes else 0.0
            walls.append(cost.wall_s(0.0))
            waited.append(max(started + walls[-1], waited[-1] if waited else 0.0))
        total = waited[-1] if waited else 0.0
    return PlanCost(passes, walls, total, any(cost.through_host for cost in costs))


def plan_message(cost: PlanCost) -> str:
    """One line before the passes start: "counters: 3 passes, 245 launches, about 2 min 10 s (pass 1 95 s,
    pass 2 20 s, pass 3 15 s)", saying so where replay through the host makes it a lower bound."""
    launches = sum(planned.launches for planned in cost.passes)
    each = ", ".join(f"pass {number} {wall:.0f} s" for number, wall in enumerate(cost.pass_seconds, 1))
    count = f"{len(cost.passes)} pass{'' if len(cost.passes) == 1 else 'es'}"
    bound = "at least" if cost.through_host else "about"
    host = "; replay through the host: a lower bound, it may take many times longer" if cost.through_host else ""
    return f"counters: {count}, {launches} launches, {bound} {duration_words(cost.total_s)} ({each}){host}"
