"""docs/architecture.md's layer table, read: the one statement of which layer may import which, kept by
tests/test_layers.py and walked by scripts/walk.py."""

from __future__ import annotations

import re
from pathlib import Path

TABLE = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def _rows(table: Path) -> dict[str, set[str]]:
    """Every row of every table in the file whose first cell names layer paths: path -> the paths it may import."""
    rows: dict[str, set[str]] = {}
    for line in table.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        layers, allowed = re.findall(r"`([^`]+)`", cells[0]), set(re.findall(r"`([^`]+)`", cells[1]))
        rows.update({layer: allowed for layer in layers})
    return rows


def layer_table(table: Path = TABLE) -> dict[str, set[str]]:
    """Each layer path of the table (`profiler/`, `schema.py`, ...) -> the layer paths it may import, in the
    table's order (lowest layer first); a row naming several paths gives each the same allowance."""
    return {path: allowed for path, allowed in _rows(table).items() if path.rstrip("/").count("/") == 0}


def sublayer_table(parent: str, table: Path = TABLE) -> dict[str, set[str]]:
    """The subpackages of one layer (`analysis/` -> `analysis/launches/`, ...) -> the sibling subpackages each may
    import, lowest first: the order inside a layer, kept one level down by the same test."""
    return {path: allowed for path, allowed in _rows(table).items()
            if path.startswith(parent) and path != parent}


def layer_name(path: str) -> str:
    """A layer path as the module name under ssmprof it stands for: `profiler/` -> profiler, `cli.py` -> cli."""
    return path.removesuffix("/").removesuffix(".py")
