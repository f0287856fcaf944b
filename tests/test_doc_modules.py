"""Docs and docstrings name only modules that are there: a reference like `pipeline.measure.profile` or
`ssmprof.profiler.nvml` sends a reader to a file, and a module renamed or folded into another leaves the names
behind unless a test reads them."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ssmprof"
PACKAGES = sorted(path.name for path in PACKAGE.iterdir() if (path / "__init__.py").exists())
# `analysis.roofline`, `ssmprof.pipeline.measure.profile`: a package of ssmprof, then the module in it (not a name
# that follows another dot or a path: `torch.profiler.record_function`, `ssmprof/analysis/...`)
REFERENCE = re.compile(r"(?<![\w./-])(?:ssmprof\.)?(" + "|".join(PACKAGES) + r")\.([a-z]\w*)")
# a file's path, `analysis/roofline.py` or `ssmprof/profiler/ncu.py`: the same reference spelt as a path
PATH = re.compile(r"(?<![\w./-])(?:ssmprof/)?(" + "|".join(PACKAGES) + r")/([a-z]\w*)\.py\b")


def module_references(text: str) -> list[tuple[str, str]]:
    return REFERENCE.findall(text) + PATH.findall(text)


def missing(references: list[tuple[str, str]]) -> list[str]:
    return [f"{package}.{name}" for package, name in references
            if not (PACKAGE / package / f"{name}.py").exists() and not (PACKAGE / package / name).is_dir()]


def docstrings(path: Path) -> list[str]:
    kinds = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
    return [doc for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, kinds)
            and (doc := ast.get_docstring(node))]


def test_the_rule_finds_module_references():
    text = ("through `pipeline.ceilings.check` and ssmprof.profiler.nvml; torch.profiler.record_function; "
            "full reports._; `profiler/links.py`, ssmprof/analysis/roofline.py, not other/analysis/x.py")
    assert module_references(text) == [("pipeline", "ceilings"), ("profiler", "nvml"), ("profiler", "links"),
                                       ("analysis", "roofline")]
    assert missing(module_references(text)) == ["pipeline.ceilings", "profiler.links"]


def test_the_packages_are_found():
    assert {"analysis", "pipeline", "profiler", "reports", "workloads"} <= set(PACKAGES)


DOCS = sorted([*ROOT.glob("*.md"), *(ROOT / "docs").rglob("*.md")])
SOURCES = sorted(path for folder in ("ssmprof", "scripts", "benchmarks", "tests")
                 for path in (ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("path", DOCS, ids=lambda path: str(path.relative_to(ROOT)))
def test_a_doc_names_only_modules_that_exist(path):
    assert missing(module_references(path.read_text())) == []


def test_docstrings_name_only_modules_that_exist():
    found = {str(path.relative_to(ROOT)): names for path in SOURCES
             if (names := missing([ref for doc in docstrings(path) for ref in module_references(doc)]))}
    assert found == {}
