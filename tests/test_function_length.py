"""No function of ssmprof is longer than a reader takes in at once (80 lines): a longer one does several things,
each of which wants its own name."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ssmprof"
MAX_LINES = 80


def test_no_function_over_80_lines():
    long = [f"{path.relative_to(PACKAGE)}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path in sorted(PACKAGE.rglob("*.py")) for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_LINES]
    assert long == []
