"""The run history's query engine: DuckDB SQL over the folder of history files the contract defines and writes
(`schema.write_history_entry`, one parquet file per appended run, `schema.HISTORY_COLUMNS`).

Every question across runs (which runs, the last N of a configuration, medians and spreads over them) is one query
here, so a history of thousands of runs is never looped over in Python. The contract says what a history file
holds; this module only reads the folder of them, through DuckDB, an optional dependency (`ssmprof[history]`)."""

from __future__ import annotations

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


def query_history(folder: Path, sql: str, parameters: list | None = None) -> pd.DataFrame:
    """Run `sql` over the history folder through DuckDB: `history` in it names the table of every appended
    run. A folder without entries, another layout version or an unreadable file is one `CorruptFile` line."""
    duckdb = duckdb_module()
    folder = Path(folder)
    if not folder.is_dir() or not any(folder.glob(HISTORY_GLOB)):
        state = "holds no runs" if folder.is_dir() else "is a file, not a folder" if folder.exists() else \
            "does not exist"
        raise CorruptFile(f"history {folder} {state}: append runs with `ssmprof history {folder} --add RUN_DIR`, "
                          f"or `--history {folder}` on profile, suite or regress")
    connection = duckdb.connect()
    try:
        files = str(folder.resolve() / HISTORY_GLOB).replace("'", "''")  # a SQL string literal
        connection.execute(f"CREATE VIEW history AS SELECT * FROM read_parquet('{files}', union_by_name = true)")
        versions = connection.execute("SELECT DISTINCT history_version FROM history").fetchall()
        found = sorted(v for (v,) in versions)
        if found != [HISTORY_VERSION]:
            raise CorruptFile(f"history {folder} has layout version {found}, this ssmprof reads {HISTORY_VERSION}")
        return connection.execute(sql, parameters or []).df()
    except duckdb.Error as exc:
        raise CorruptFile(f"history {folder} cannot be read: {str(exc).splitlines()[0]}") from None
    finally:
        connection.close()
