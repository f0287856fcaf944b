"""docs/columns.md says what every column of every CSV section holds: it is what scripts/column_reference.py writes
now, every column the code writes for the bundled runs (their reviewed snapshots, tests/data/golden-bundled-runs) has
a meaning in `reports.columns` and no meaning is left for a column nothing writes, and every section the report
declares is in the reference or named here with the reason no bundled run has it."""

import sys
from dataclasses import fields
from pathlib import Path

import pytest

from ssmprof.analysis.common.sections import CHART_ONLY
from ssmprof.reports.columns import COLUMN_MEANINGS, PAGES, SECTION_MEANINGS, column_reference, meaning

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from column_reference import DOC, generate, read_headers  # noqa: E402 -- the script is the one reader of the snapshots

HEADERS = read_headers()
# Sections declared that no bundled run writes (their CSV file exists only for runs with that data): section -> why.
NOT_BUNDLED = {
    "suite-ssd_dataflow_by_cache": "needs one workload measured both with --ncu-cache flush and --ncu-cache keep; the "
                                   "bundled runs are all flushed",
}


def declared() -> list[str]:
    """Every section a CSV file can hold, by its file's name less a run's index, from the dataclasses themselves."""
    return [prefix + section.name for _, prefix, sections, _ in PAGES for section in fields(sections)
            if not CHART_ONLY.items() <= section.metadata.items()]


def test_the_doc_is_what_the_script_writes_now():
    assert DOC.read_text() == generate(), "docs/columns.md is out of date: python scripts/column_reference.py"


def test_the_snapshots_hold_sections_and_columns():
    assert {"breakdown", "findings", "roofline", "suite-step_times", "sweep-points"} <= set(HEADERS)
    assert HEADERS["findings"] == ["kind", "status", "value", "finding", "anchor", "impact_ms"]
    assert HEADERS["roofline"][:2] == ["launch_idx", "kernel_name"]  # a table kept as its digest gives its header


def test_every_column_written_has_a_meaning():
    missing = [f"{section}: {column}" for section, columns in HEADERS.items() for column in columns
               if not meaning(section, column)]
    assert missing == [], "say what these hold in ssmprof/reports/columns.py"


def test_no_meaning_for_a_column_nothing_writes():
    written = {(section, column) for section, columns in HEADERS.items() for column in columns}
    generic = {column for section, column in written if (section, column) not in SECTION_MEANINGS}
    assert sorted(set(COLUMN_MEANINGS) - generic) == []
    assert sorted(set(SECTION_MEANINGS) - written) == []


@pytest.mark.parametrize("section, column", sorted(SECTION_MEANINGS))
def test_an_exception_is_to_a_meaning_the_name_has_elsewhere(section, column):
    """A name means one thing everywhere but in the sections that mean another by it, each said apart."""
    assert column in COLUMN_MEANINGS
    assert SECTION_MEANINGS[(section, column)] != COLUMN_MEANINGS[column]


@pytest.mark.parametrize("section", declared())
def test_every_declared_section_is_in_the_reference_or_said_why_not(section):
    if section in NOT_BUNDLED:
        assert section not in HEADERS, f"{section} is bundled now: take it off NOT_BUNDLED"
        assert f"- `{section}`:" in DOC.read_text()
    else:
        assert section in HEADERS, f"no bundled run writes {section}: say why in NOT_BUNDLED"
        assert f"### {section}\n" in DOC.read_text()


def test_not_bundled_names_declared_sections():
    assert set(NOT_BUNDLED) <= set(declared())


def test_the_reference_refuses_what_it_cannot_say():
    with pytest.raises(ValueError, match="no dataclass declares: nowhere"):
        column_reference({"nowhere": ["x"]})
    with pytest.raises(ValueError, match="breakdown: no_such_column"):
        column_reference({"breakdown": ["category", "no_such_column"]})


def test_sections_follow_the_declaration_order():
    text = column_reference({"sweep-points": ["sweep"], "suite-step_times": ["workload"], "host": ["step_ms"],
                             "breakdown": ["category"]})
    order = [text.index(f"### {key}\n") for key in ("breakdown", "host", "suite-step_times", "sweep-points")]
    assert order == sorted(order)
    assert "| `workload` | The run's label on the page" in text  # a suite's workload column is the run's label
