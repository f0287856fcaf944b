"""docs/columns.md, the reference of every CSV section's columns: written from the headers the code writes for the
bundled runs (their reviewed snapshots, tests/data/golden-bundled-runs, that scripts/golden.py writes) and the meanings
of `ssmprof.reports.columns`.

Each page set's `<i>-<section>.csv`, `suite-<section>.csv` and `sweep-<section>.csv` gives its header line, and
`digests.json` the header of each table kept as its digest; a section's columns are the union over every run and page
set, in the order first seen. tests/test_columns.py fails where docs/columns.md is not what this writes now.

    python scripts/column_reference.py [--check]
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from pathlib import Path

from ssmprof.reports.columns import column_reference

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "golden-bundled-runs"
DOC = ROOT / "docs" / "columns.md"
DIGESTS = "digests.json"
# `3-breakdown.csv` -> run 3's breakdown; `suite-ssm_kernels.csv`, `sweep-best.csv` keep their prefix; a page of one
# run writes `breakdown.csv`
CSV_NAME = re.compile(r"^(?:(?P<run>\d+)-|(?P<page>suite-|sweep-))?(?P<section>\w+)\.csv$")


def section_of(name: str) -> tuple[int, str] | None:
    """A snapshot file's (order, section): runs first by index, then the suite's and the sweep's files; None for a
    file that is no section's CSV (compare.md, digests.json)."""
    match = CSV_NAME.match(name)
    if match is None:
        return None
    if match["page"] is None:
        return int(match["run"] or 0), match["section"]
    return sys.maxsize, match["page"] + match["section"]


def page_set_headers(folder: Path) -> list[tuple[tuple[int, str], str]]:
    """One page set's ((order, section), header line) per section file, inline or kept as a digest, in order."""
    headers = {path.name: path.read_text().split("\n", 1)[0] for path in folder.glob("*.csv")}
    digests = folder / DIGESTS
    if digests.exists():
        headers |= {name: entry["header"] for name, entry in json.loads(digests.read_text()).items()}
    found = [(key, header) for name, header in headers.items() if (key := section_of(name)) is not None]
    return sorted(found, key=lambda item: (item[0][0], item[0][1]))


def read_headers(golden: Path = GOLDEN) -> dict[str, list[str]]:
    """Section -> its columns: the union over the page sets (in name order) and their runs, in first-seen order."""
    sections: dict[str, list[str]] = {}
    for folder in sorted(path for path in golden.iterdir() if path.is_dir()):
        for (_, section), header in page_set_headers(folder):
            columns = sections.setdefault(section, [])
            columns += [column for column in next(csv.reader([header])) if column not in columns]
    return sections


def generate(golden: Path = GOLDEN) -> str:
    """docs/columns.md as the snapshots and the meanings make it now."""
    return column_reference(read_headers(golden))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether docs/columns.md is current; exit 1 if "
                        "it is not")
    check = parser.parse_args().check
    text = generate()
    if check:
        current = DOC.exists() and DOC.read_text() == text
        said = "current" if current else "out of date: python scripts/column_reference.py writes it"
        print(f"{DOC.relative_to(ROOT)} is {said}")
        sys.exit(0 if current else 1)
    DOC.write_text(text)
    print(f"wrote {DOC.relative_to(ROOT)}: {text.count('### ')} sections")


if __name__ == "__main__":
    main()
