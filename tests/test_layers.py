"""docs/architecture.md's layer table is the rule for imports: every `ssmprof.*` import of every module (function-level
ones included) must be one its layer's row allows, so the table a newcomer reads is the one the code keeps."""

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ssmprof"
sys.path.insert(0, str(ROOT / "scripts"))
from layer_table import layer_table, sublayer_table  # noqa: E402 -- the one reader of the table, shared with scripts/walk.py

# Imports the table forbids that are known and being removed (none now); an entry whose import is gone fails the
# test, so the list never outlives its reason.
KNOWN_EXCEPTIONS: set[tuple[str, str]] = set()


def layer_of(module: str, layers: set[str]) -> str | None:
    """The layer of a dotted module (`ssmprof.analysis.limits.roofline` -> `analysis/`), None where no row holds it."""
    top = module.split(".")[1] if module.count(".") else ""
    return next((layer for layer in (f"{top}/", f"{top}.py") if layer in layers), None)


def ssmprof_imports(path: Path) -> set[str]:
    """The `ssmprof.*` modules a file imports, at any depth (`from ssmprof import bundled` is ssmprof.bundled)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("ssmprof.")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "ssmprof":
                found |= {f"ssmprof.{alias.name}" for alias in node.names}
            elif node.module.startswith("ssmprof."):
                found.add(node.module)
    return found


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def test_the_table_names_every_layer_it_allows():
    table = layer_table()
    assert {"schema.py", "analysis/", "profiler/", "pipeline/", "cli.py", "hardware.py"} <= set(table)
    assert [path for path in table if not (PACKAGE / path).exists()] == [], "the table names a module not there"
    assert {allowed for allowances in table.values() for allowed in allowances} <= set(table) | {"nothing"}
    assert table["schema.py"] == {"errors.py"} and "analysis/" not in table["profiler/"]


def test_every_import_is_one_its_layer_allows():
    table = layer_table()
    modules = [path for path in sorted(PACKAGE.rglob("*.py")) if path != PACKAGE / "__init__.py"]
    unplaced = [str(path.relative_to(ROOT)) for path in modules if layer_of(module_name(path), set(table)) is None]
    assert unplaced == [], "add a row for these modules to docs/architecture.md's layer table"
    broken, seen = [], set()
    for path in modules:
        name, where = module_name(path), str(path.relative_to(ROOT))
        own = layer_of(name, set(table))
        for imported in sorted(ssmprof_imports(path)):
            target = layer_of(imported, set(table))
            if target == own:
                continue
            if (where, target) in KNOWN_EXCEPTIONS:
                seen.add((where, target))
            elif target not in table[own]:
                broken.append(f"{where} ({own}) imports {imported} ({target or 'in no layer'})")
    assert broken == []
    assert seen == KNOWN_EXCEPTIONS, f"fixed, remove from KNOWN_EXCEPTIONS: {sorted(KNOWN_EXCEPTIONS - seen)}"


def test_analysis_subpackages_keep_their_order():
    """One level down: `analysis/` is grouped by question, and a subpackage imports only the subpackages its row of
    the second table allows; no module of `analysis/` lies outside a subpackage the table names."""
    table = sublayer_table("analysis/")
    assert list(table) and all((PACKAGE / path).is_dir() for path in table), "the table names a subpackage not there"
    analysis = PACKAGE / "analysis"
    flat = [path.name for path in analysis.glob("*.py") if path.name != "__init__.py"]
    assert flat == [], "every module of analysis/ belongs in a subpackage named for its question"
    unplaced = [str(path.relative_to(ROOT)) for path in analysis.glob("*/")
                if path.is_dir() and path.name != "__pycache__" and f"analysis/{path.name}/" not in table]
    assert unplaced == []
    broken = []
    for path in sorted(analysis.rglob("*.py")):
        own = f"analysis/{path.relative_to(analysis).parts[0]}/"
        for imported in sorted(ssmprof_imports(path)):
            parts = imported.split(".")
            if parts[:2] != ["ssmprof", "analysis"] or len(parts) < 3:
                continue
            target = f"analysis/{parts[2]}/"
            if target != own and target not in table.get(own, set()):
                broken.append(f"{path.relative_to(ROOT)} ({own}) imports {imported} ({target})")
    assert broken == []


def test_the_subpackage_order_is_a_chain():
    """Each subpackage may import exactly those above it in the table: the order reads top to bottom."""
    table = sublayer_table("analysis/")
    order = list(table)
    assert all(table[path] - {"nothing"} == set(order[:i]) for i, path in enumerate(order))
