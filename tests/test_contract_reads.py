"""run.json is read through the contract alone: readers take the typed `schema.RunInfo` (attributes), never the
file's keys as strings, so a renamed or retyped key is one edit in `schema.py` and a reader's typo fails lint,
not a report."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ssmprof"
CONTRACT = PACKAGE / "schema.py"


def _names_run_info(node: ast.AST) -> bool:
    """Whether an expression is run.json by its name: `info`, `*_info`, `info_*` (two runs' `info_a`, `info_b`),
    `run.info`, `infos[label]` (a chain of keys, `info["gpu"]["name"]`, is one read)."""
    if isinstance(node, ast.Name):
        return node.id == "info" or node.id.endswith("_info") or node.id.startswith("info_")
    if isinstance(node, ast.Attribute):
        return node.attr == "info"
    if isinstance(node, ast.Subscript) and not _is_key(node.slice):  # one run of several: infos[label]
        return isinstance(node.value, ast.Name) and node.value.id.startswith("infos")
    return False


def _is_key(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def string_key_reads(source: str) -> list[int]:
    """Lines that read run info by a string key: `info["k"]`, `info.get("k")`, `"k" in info` (stores, which
    writers building run.json's dict make, are not reads)."""
    def read(node: ast.AST) -> bool:
        if isinstance(node, ast.Subscript):
            return isinstance(node.ctx, ast.Load) and _is_key(node.slice) and _names_run_info(node.value)
        if isinstance(node, ast.Call):
            return isinstance(node.func, ast.Attribute) and node.func.attr == "get" and bool(node.args) \
                and _is_key(node.args[0]) and _names_run_info(node.func.value)
        if isinstance(node, ast.Compare):
            return _is_key(node.left) and isinstance(node.ops[0], ast.In | ast.NotIn) \
                and _names_run_info(node.comparators[0])
        return False

    lines = [node.lineno for node in ast.walk(ast.parse(source)) if read(node)]
    return lines


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
    ],
)
def test_the_rule_sees_string_key_reads(source, found):
    assert len(string_key_reads(source)) == found


def test_no_string_key_read_of_run_info_outside_the_contract():
    found = {str(path.relative_to(PACKAGE.parent)): lines for path in sorted(PACKAGE.rglob("*.py"))
             if path != CONTRACT and (lines := string_key_reads(path.read_text()))}
    assert found == {}, "read run.json through schema.RunInfo's attributes (add the key there first)"
