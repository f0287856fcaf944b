"""scripts/walk.py on a package small enough to walk by hand: the reading order, its stays, and a walk through
only the functions an earlier walk read."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import walk  # noqa: E402 -- a script's module, as `python scripts/walk.py` imports its neighbours

PACKAGE = {
    "__init__.py": "",
    "cli.py": "from ssmprof.pipeline import run\n\ndef report():\n    run.go()\n    _say()\n\ndef _say():\n    pass\n",
    "pipeline/__init__.py": "",
    "pipeline/run.py": "from ssmprof.analysis.table import rows\n\ndef go():\n    rows(_load())\n\n"
                       "def _load():\n    pass\n",
    "analysis/__init__.py": "",
    "analysis/table.py": "def rows(frame):\n    return frame\n",
}


@pytest.fixture
def package(tmp_path):
    for name, text in PACKAGE.items():
        (tmp_path / "ssmprof" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "ssmprof" / name).write_text(text)
    return tmp_path / "ssmprof"


def test_the_walk_reads_each_call_before_its_arguments_and_counts_a_stay_per_module_entered(package):
    order = walk.walk("report", package)
    assert [f"{module}.{function}" for _, module, function in order] == [
        "ssmprof.cli.report", "ssmprof.pipeline.run.go", "ssmprof.analysis.table.rows", "ssmprof.pipeline.run._load",
        "ssmprof.cli._say"]
    counts = walk.summary(order)
    assert (counts["stays"], counts["rooms"], counts["returns"], counts["functions"]) == (5, 3, 2, 5)


def test_a_walk_through_an_earlier_walks_functions_leaves_out_those_added_since(package):
    order = walk.walk("report", package)
    earlier = [step for step in order if step[2] != "_load"]  # as if `_load` were added since
    assert walk.summary(walk.through(order, earlier))["stays"] == 4
    assert walk.through(order, order) == order
