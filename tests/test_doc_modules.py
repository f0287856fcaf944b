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
# `analysis.limits.roofline`, `ssmprof.pipeline.measure.profile`: a package of ssmprof, then the module in it, and
# the module after it where the first is a subpackage (not a name that follows another dot or a path:
# `torch.profiler.record_function`, `ssmprof/analysis/...`)
REFERENCE = re.compile(r"(?<![\w./-])(?:ssmprof\.)?(" + "|".join(PACKAGES) + r")\.([a-z]\w*)(?:\.([a-z]\w*))?")
# a file's path, `analysis/limits/roofline.py` or `ssmprof/profiler/ncu_argv.py`: the same reference spelt as a path
PATH = re.compile(r"(?<![\w./-])(?:ssmprof/)?(" + "|".join(PACKAGES) + r")/([a-z]\w*)(?:/([a-z]\w*))?\.py\b")


def module_references(text: str) -> list[tuple[str, ...]]:
    """(package, module) or, where the module is a subpackage, (package, subpackage, module): as far as a file
    stands for the name; a name past a module (a function) is not a file."""
    found = []
    for package, name, inner in REFERENCE.findall(text) + PATH.findall(text):
        nested = inner and (PACKAGE / package / name).is_dir()
        found.append((package, name, inner) if nested else (package, name))
    return found


def missing(references: list[tuple[str, ...]]) -> list[str]:
    return [".".join(reference) for reference in references
            if not (PACKAGE.joinpath(*reference).with_suffix(".py").exists() or PACKAGE.joinpath(*reference).is_dir())]


def docstrings(path: Path) -> list[str]:
    kinds = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
    return [doc for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, kinds)
            and (doc := ast.get_docstring(node))]


def test_the_rule_finds_module_references():
    text = ("through `pipeline.ceilings.check` and ssmprof.profiler.nvml; torch.profiler.record_function; "
            "full reports._; `profiler/links.py`, ssmprof/analysis/limits/roofline.py, not other/analysis/x.py; "
            "`analysis.limits.ceilings`, analysis.step.host.busy_ns")
    assert module_references(text) == [("pipeline", "ceilings"), ("profiler", "nvml"),
                                       ("analysis", "limits", "ceilings"), ("analysis", "step", "host"),
                                       ("profiler", "links"), ("analysis", "limits", "roofline")]
    assert missing(module_references(text)) == ["pipeline.ceilings", "analysis.limits.ceilings", "profiler.links"]


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
