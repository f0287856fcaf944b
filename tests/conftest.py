from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner


def pytest_collection_modifyitems(config, items):
    """GPU tests run only where a CUDA GPU is visible."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@dataclass(frozen=True)
class Rendered:
    """One `ssmprof reference` run: what the command said, the folder it wrote, and the files
    `reporting.reference` returned to it (reports first, traces last)."""

    exit_code: int
    output: str
    out: Path
    written: tuple[Path, ...]


@pytest.fixture(scope="session")
def bundled_reference(tmp_path_factory) -> Rendered:
    """`ssmprof reference` on the bundled runs, run once per test session: rendering every bundled page takes
    about 20 s, and the report, real-run and pipeline tests each read the same pages (none writes into them).
    The command runs for real; `reporting.reference` is only wrapped to keep the list it returns."""
    from ssmprof.cli import app
    from ssmprof.pipeline import reporting

    render, returned = reporting.reference, []

    def recorded(out: Path) -> list[Path]:
        returned.extend(render(out))
        return list(returned)

    out = tmp_path_factory.mktemp("reference")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reporting, "reference", recorded)
        result = CliRunner().invoke(app, ["reference", "--out", str(out)])
    return Rendered(result.exit_code, result.output, out, tuple(returned))


@pytest.fixture(scope="session")
def bundled_suites():
    """Each GPU's bundled suite analyzed as its `ssmprof reference` page has it: (analyzed runs, overview), by
    GPU. Analyzed once per test session (about 2 s a run), shared by every file that reads it; read only."""
    from ssmprof import bundled
    from ssmprof.pipeline import reporting

    return {gpu: reporting.analyze_runs(bundled.runs(gpu)) for gpu in bundled.GPUS}
