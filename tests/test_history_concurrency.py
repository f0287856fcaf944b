"""One history folder appended to and read by several commands at once (CI matrix jobs sharing one).

Planted: 13 runs of one configuration (mamba2-lm small on an H100: the gate's held-back reruns,
tests/data/regress-reruns-h100, cycled, each with its own `created` stamp, 2026-01-01 00:00 to 00:12, its kernels
cut to the 2 kernels with the most time so that a history command takes a few tenths of a second). The first 5 are
a history made beforehand. In each of 20 trials a fresh copy of that history gets the other 8 at once, from the 8
processes of a spawned pool that start together (a barrier), each running the CLI: 7 `ssmprof history DIR --add
RUN` and 1 `ssmprof regress RUN --history DIR --last 5` (which gates the run against the last 5, then appends it).
Required in every trial: no traceback and no nonzero exit other than a regress verdict (exit 1 with FAIL); every run
appended exactly once (13 entries with their 13 `created` stamps, nothing half written left); and each command
computed from one snapshot of the history: a history command's change points sought over rows of exactly the runs
it lists (and it prints that many runs, at least the 5 before and its own), a regress baseline's medians over
exactly the runs its note names. Before the fix (a glob expanded again at each query) about half the trials ended
in a traceback: the rows of a configuration held a run appended after its runs were listed."""

from __future__ import annotations

import multiprocessing
import re
import shutil
import traceback
from pathlib import Path

import pytest

from ssmprof import schema

H100 = Path(__file__).parent / "data" / "regress-reruns-h100"
SEEDED, ADDED, TRIALS = 5, 8, 20
REGRESSING = 1  # of the ADDED commands, `regress --history`; the others `history --add`
pytest.importorskip("duckdb", reason="the history extra (`pip install 'ssmprof[history]'`; CI installs it)")

_seen: list[tuple] = []  # what the instrumented queries of the command running in this worker saw
_barrier = None


def _instrument(barrier) -> None:
    """A pool worker: the CLI imported, and the points where one command's queries meet recorded, to judge whether
    they saw one snapshot (the history command's runs and rows; a rolling baseline's runs and its note's)."""
    global _barrier
    _barrier = barrier
    from ssmprof import cli  # noqa: F401  (imported before the barrier: the commands start together)
    from ssmprof.pipeline import gate, history

    change_points, rolling_baseline = history.change_points, gate.rolling_baseline

    def checked_change_points(rows, runs, *args, **kwargs):
        _seen.append(("trend", len(runs), set(rows["run_id"]) == set(runs["run_id"])))
        return change_points(rows, runs, *args, **kwargs)

    def checked_baseline(folder, run_ids):
        table = rolling_baseline(folder, run_ids)
        _seen.append(("baseline", len(run_ids), int(table["runs"].max())))
        return table

    history.change_points, gate.rolling_baseline = checked_change_points, checked_baseline


def _command(args: list[str]) -> dict:
    """Run one CLI command in this worker once all 8 workers are ready; what it said and what it saw."""
    from typer.testing import CliRunner

    from ssmprof.cli import app

    _seen.clear()
    assert _barrier is not None
    _barrier.wait(timeout=120)
    result = CliRunner().invoke(app, args)
    error = result.exception if not isinstance(result.exception, SystemExit) else None
    return {"args": args, "exit": result.exit_code, "output": result.output, "seen": list(_seen),
            "traceback": "".join(traceback.format_exception(error)) if error is not None else ""}


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """The 13 run directories and the history of the first 5."""
    from ssmprof.pipeline import history

    root = tmp_path_factory.mktemp("concurrent")
    runs = []
    for position in range(SEEDED + ADDED):
        source = schema.read_run(H100 / f"rerun-{position % 8 + 1}")
        kernels = source.kernels
        top = kernels.groupby("kernel_name")["duration_ns"].sum().nlargest(2).index
        info = {**source.info.model_dump(exclude_unset=True), "created": f"2026-01-01T00:{position:02d}:00+00:00"}
        runs.append(schema.write_run(root / f"run-{position:02d}", schema.new_run_info(info),
                                     kernels[kernels["kernel_name"].isin(top)]))
    seeded = root / "seeded"
    history.append(runs[:SEEDED], seeded, commit="00" * 20)
    return runs, seeded


def _trial_commands(runs: list[Path], folder: Path) -> list[list[str]]:
    new = runs[SEEDED:]
    adds = [["history", str(folder), "--add", str(run), "--commit", "aa" * 20] for run in new[REGRESSING:]]
    gates = [["regress", str(run), "--history", str(folder), "--last", "5", "--commit", "bb" * 20]
             for run in new[:REGRESSING]]
    return gates + adds


def _judge(said: dict, trial: int) -> None:
    """One command's exit, and whether its queries saw one snapshot."""
    assert not said["traceback"], f"trial {trial}: {said['args'][0]}: {said['traceback']}"
    regress = said["args"][0] == "regress"
    assert said["exit"] == 0 or (regress and said["exit"] == 1 and "FAIL" in said["output"]), said
    if not regress:
        (_, runs, same), = said["seen"]
        assert same, f"its change points were sought over rows of other runs than its {runs}: {said}"
        assert SEEDED + 1 <= runs <= SEEDED + ADDED and f": {runs} runs, " in said["output"], said
        return
    (_, named, medians), = said["seen"]  # the history holds 5 runs of its configuration at least: it is gated
    note = re.search(r"the last (\d+) runs of its configuration", " ".join(said["output"].split()))
    assert note and int(note.group(1)) == named == medians == 5, said


@pytest.mark.alone
def test_concurrent_appends_and_reads_see_one_snapshot(planted, tmp_path):
    from ssmprof.pipeline import history

    runs, seeded = planted
    context = multiprocessing.get_context("spawn")
    with context.Pool(ADDED, initializer=_instrument, initargs=(context.Barrier(ADDED),)) as pool:
        for trial in range(TRIALS):
            folder = tmp_path / f"trial-{trial:02d}"
            shutil.copytree(seeded, folder)
            for said in pool.map(_command, _trial_commands(runs, folder), chunksize=1):
                _judge(said, trial)
            entries = sorted(folder.iterdir())
            assert len(entries) == SEEDED + ADDED and all(p.suffix == ".parquet" for p in entries), entries
            table = history.runs_table(folder)
            assert sorted(table["created"]) == [f"2026-01-01T00:{i:02d}:00+00:00" for i in range(SEEDED + ADDED)]
