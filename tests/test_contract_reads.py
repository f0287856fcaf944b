"""run.json is read through the contract alone: readers take the typed `schema.RunInfo` (attributes), never the
file's keys as strings, so a renamed or retyped key is one edit in `schema.py` and a reader's typo fails lint
(mypy in `make lint`, and this test), not a report on a GPU host."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ssmprof"
CONTRACT = PACKAGE / "schema.py"
READERS = (PACKAGE, ROOT / "scripts", ROOT / "benchmarks")


def _typed_names(tree: ast.AST) -> set[str]:
    """Names that hold a RunInfo by their annotation (`x: RunInfo`, `infos: dict[str, RunInfo]`) or by what they
    are assigned (`here = run.info`), whatever they are called."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None and "RunInfo" in ast.unparse(node.annotation):
            names.add(node.arg)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and "RunInfo" in ast.unparse(node.annotation):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute) and node.value.attr == "info":
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
    return names


def _names_run_info(node: ast.AST, typed: frozenset[str] = frozenset()) -> bool:
    """Whether an expression is run.json by its name: `info`, `*_info`, `info_*` (two runs' `info_a`, `info_b`),
    `run.info`, `infos[label]` (a chain of keys, `info["gpu"]["name"]`, is one read), or a name typed RunInfo
    (`_typed_names`)."""
    if isinstance(node, ast.Name):
        return node.id == "info" or node.id.endswith("_info") or node.id.startswith("info_") or node.id in typed
    if isinstance(node, ast.Attribute):
        return node.attr == "info"
    if isinstance(node, ast.Subscript) and not _is_key(node.slice):  # one run of several: infos[label]
        return isinstance(node.value, ast.Name) and (node.value.id.startswith("infos") or node.value.id in typed)
    return False


def _is_key(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def string_key_reads(source: str) -> list[int]:
    """Lines that read run info by a string key: `info["k"]`, `info.get("k")`, `"k" in info` (stores, which
    writers building run.json's dict make, are not reads)."""
    tree = ast.parse(source)
    typed = frozenset(_typed_names(tree))

    def read(node: ast.AST) -> bool:
        if isinstance(node, ast.Subscript):
            return isinstance(node.ctx, ast.Load) and _is_key(node.slice) and _names_run_info(node.value, typed)
        if isinstance(node, ast.Call):
            return isinstance(node.func, ast.Attribute) and node.func.attr == "get" and bool(node.args) \
                and _is_key(node.args[0]) and _names_run_info(node.func.value, typed)
        if isinstance(node, ast.Compare):
            return _is_key(node.left) and isinstance(node.ops[0], ast.In | ast.NotIn) \
                and _names_run_info(node.comparators[0], typed)
        return False

    return [node.lineno for node in ast.walk(tree) if read(node)]


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ('step = info["harness"]["step_ms"]', 1),
        ('name = run.info["gpu"]["name"]', 1),
        ('c = info.get("collectors", {})', 1),
        ('x = target_info["gpu"]', 1),
        ('x = infos[label]["harness"]', 1),
        ('ok = "checks" in run.info', 1),
        ('info["checks"] = checks', 0),  # a writer building the dict
        ("step = run.info.harness.step_ms", 0),
        ('args = event.get("args", {})', 0),
        ('def f(here: RunInfo):\n    return here["gpu"]', 1),  # any name typed RunInfo
        ('here = run.info\nname = here["workload"]', 1),
        ('runs: dict[str, RunInfo] = {}\nx = runs[label]["gpu"]', 1),
        ('def f(here: dict):\n    return here["gpu"]', 0),
    ],
)
def test_the_rule_sees_string_key_reads(source, found):
    assert len(string_key_reads(source)) == found


def test_no_string_key_read_of_run_info_outside_the_contract():
    paths = sorted(path for folder in READERS for path in folder.rglob("*.py"))
    assert ROOT / "scripts" / "ncu_rules.py" in paths
    found = {str(path.relative_to(ROOT)): lines for path in paths
             if path != CONTRACT and (lines := string_key_reads(path.read_text()))}
    assert found == {}, "read run.json through schema.RunInfo's attributes (add the key there first)"


PLANTED = """from pathlib import Path

from ssmprof.schema import read_run

run = read_run(Path("."))
workload = run.info["workload"]
"""


def test_a_planted_string_key_read_in_a_script_is_found():
    assert string_key_reads(PLANTED) == [6]


@pytest.mark.skipif(shutil.which("mypy", path=str(Path(sys.executable).parent)) is None, reason="mypy not installed")
def test_mypy_fails_a_planted_string_key_read_in_a_script(tmp_path):
    """The type checker of `make lint` refuses the read too (RunInfo is not subscriptable)."""
    script = tmp_path / "planted.py"
    script.write_text(PLANTED)
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                           "--follow-imports", "silent", "--cache-dir", str(tmp_path / "mypy-cache"), str(script)],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 1, done.stdout
    assert f'{script}:6: error: Value of type "RunInfo" is not indexable  [index]' in done.stdout
