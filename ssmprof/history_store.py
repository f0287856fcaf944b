"""The run history's query engine: DuckDB SQL over the folder of history files the contract defines and writes
(`schema.write_history_entry`, one parquet file per appended run, `schema.HISTORY_COLUMNS`).

Every question across runs (which runs, the last N of a configuration, medians and spreads over them) is one query
here, so a history of thousands of runs is never looped over in Python. The contract says what a history file
holds; this module only reads the folder of them, through DuckDB, an optional dependency (`ssmprof[history]`).

Other processes may append while one reads (CI jobs sharing a history): a query reads the entry files listed
once (`snapshot`), never a glob expanded again, and a command asking several questions asks them all of one
`Snapshot`, so they all see the same runs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ssmprof.errors import CorruptFile, SsmprofError
from ssmprof.schema import HISTORY_GLOB, HISTORY_VERSION


def duckdb_module() -> Any:
    """DuckDB, which every history query runs on; its absence is one line, said before a command's work (a
    profile's history is appended after it) as well as at a query."""
    try:
        import duckdb
    except ImportError:
        raise SsmprofError("the run history needs DuckDB: pip install 'ssmprof[history]'") from None
    return duckdb


@dataclass(frozen=True)
class Snapshot:
    """The history as one reader sees it: its folder and the entry files in it when the snapshot was taken. An
    entry is renamed into place whole and never changed or removed (`schema.write_history_entry`), so every query
    over one snapshot sees the same runs however many are appended meanwhile: a command that asks several
    questions (the runs, then each configuration's rows) takes one and asks them all of it."""

    folder: Path
    files: tuple[Path, ...]


def snapshot(folder: Path) -> Snapshot:
    """The history folder's entries now, as absolute paths (none where the folder does not exist); a file being
    written (a hidden staging name) is no entry."""
    folder = Path(folder)
    if not folder.is_dir():
        return Snapshot(folder, ())
    entries = (path for path in folder.resolve().glob(HISTORY_GLOB) if not path.name.startswith("."))
    return Snapshot(folder, tuple(sorted(entries)))


History = Path | Snapshot  # a folder (read as it is at each query) or one snapshot of it


def query_history(history: History, sql: str, parameters: list | None = None) -> pd.DataFrame:
    """Run `sql` over the history through DuckDB: `history` in it names the table of every appended run (of the
    snapshot given, or of the folder as it is now). A folder without entries, another layout version or an
    unreadable file is one `CorruptFile` line."""
    duckdb = duckdb_module()
    view = history if isinstance(history, Snapshot) else snapshot(history)
    folder = view.folder
    if not view.files:
        state = "holds no runs" if folder.is_dir() else "is a file, not a folder" if folder.exists() else \
            "does not exist"
        raise CorruptFile(f"history {folder} {state}: append runs with `ssmprof history {folder} --add RUN_DIR`, "
                          f"or `--history {folder}` on profile, suite or regress")
    connection = duckdb.connect()
    try:
        # exactly the snapshot's entries: a glob here would be expanded again at each query, seeing other runs
        connection.read_parquet([str(path) for path in view.files], union_by_name=True).create_view("history")
        versions = connection.execute("SELECT DISTINCT history_version FROM history").fetchall()
        found = sorted(v for (v,) in versions)
        if found != [HISTORY_VERSION]:
            raise CorruptFile(f"history {folder} has layout version {found}, this ssmprof reads {HISTORY_VERSION}")
        return connection.execute(sql, parameters or []).df()
    except duckdb.Error as exc:
        raise CorruptFile(f"history {folder} cannot be read: {str(exc).splitlines()[0]}") from None
    finally:
        connection.close()
