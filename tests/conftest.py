import fcntl
import os
import pickle
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

# Under pytest-xdist each worker takes its share of the CPUs for torch's threads, and so do the processes its tests
# start (OMP_NUM_THREADS): two workers each running two threads on CI's two cores wait on each other's threads
# (test_workloads and test_next_ssms: 33 s on two workers, 18 s with one thread each). A thread count set by the
# caller is kept.
if os.environ.get("PYTEST_XDIST_WORKER") and "OMP_NUM_THREADS" not in os.environ:
    _threads = max(1, len(os.sched_getaffinity(0)) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    os.environ["OMP_NUM_THREADS"] = str(_threads)
    torch.set_num_threads(_threads)


def pytest_collection_modifyitems(config, items):
    """GPU tests run only where a CUDA GPU is visible."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A test marked `alone` times real processes on the host: under pytest-xdist it runs while no other worker
    runs a test (their fixtures' setup included), as it would in one process. Every other test runs beside the
    others."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return (yield)
    with _cpus(item, alone=item.get_closest_marker("alone") is not None):
        return (yield)


@contextmanager
def _cpus(item, alone: bool) -> Iterator[None]:
    """The CPUs for one test, shared with the other workers' tests or alone: a readers-writer lock in the run's
    shared temporary folder (each worker's basetemp is a folder of it). The gate is held while waiting, so that a
    test waiting to run alone is not passed by the other workers' next tests."""
    folder = Path(item.config.option.basetemp).parent
    with open(folder / "cpus.gate", "a") as gate, open(folder / "cpus.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        fcntl.flock(gate, fcntl.LOCK_UN)
        yield  # the lock is released as its file closes


@dataclass(frozen=True)
class Rendered:
    """One `ssmprof reference` run: what the command said, the folder it wrote, and the files
    `reporting.reference` returned to it (reports first, traces last)."""

    exit_code: int
    output: str
    out: Path
    written: tuple[Path, ...]


def once_per_run(tmp_path_factory, name: str, make: Callable[[Path], object]):
    """What `make(folder)` returns, made once per test run. Under pytest-xdist (`make test`) each worker has its
    own session; the first worker to ask makes it in a folder of the run's shared temporary directory, under a
    lock, and leaves it there pickled; the others wait for it and read it."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return make(tmp_path_factory.mktemp(name))
    folder = tmp_path_factory.getbasetemp().parent / name  # the run's, above each worker's own
    with open(f"{folder}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes
        made = folder / "made.pickle"
        if made.exists():
            return pickle.loads(made.read_bytes())
        folder.mkdir(exist_ok=True)
        value = make(folder)
        made.write_bytes(pickle.dumps(value))
        return value


@pytest.fixture(scope="session")
def bundled_reference(tmp_path_factory) -> Rendered:
    """`ssmprof reference` on the bundled runs, run once per test run: rendering every bundled page takes
    about 45 s, and the report, real-run and pipeline tests each read the same pages (none writes into them).
    The command runs for real; `reporting.reference` is only wrapped to keep the list it returns."""
    return once_per_run(tmp_path_factory, "reference", _render_reference)


def _render_reference(out: Path) -> Rendered:
    from ssmprof.cli import app
    from ssmprof.pipeline import reporting

    render, returned = reporting.reference, []

    def recorded(out: Path) -> list[Path]:
        returned.extend(render(out))
        return list(returned)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reporting, "reference", recorded)
        result = CliRunner().invoke(app, ["reference", "--out", str(out)])
    return Rendered(result.exit_code, result.output, out, tuple(returned))


@pytest.fixture(scope="session")
def bundled_suites(tmp_path_factory):
    """Each GPU's bundled suite analyzed as its `ssmprof reference` page has it: (analyzed runs, overview), by
    GPU. Analyzed once per test run (about 2 s a run), shared by every file that reads it; read only."""
    return once_per_run(tmp_path_factory, "suites", lambda _: _analyze_suites())


def _analyze_suites():
    from ssmprof import bundled
    from ssmprof.pipeline import reporting

    return {gpu: reporting.analyze_runs(bundled.runs(gpu)) for gpu in bundled.GPUS}
