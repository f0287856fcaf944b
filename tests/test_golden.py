"""Golden outputs: every table `ssmprof reference` shows, computed now, against its reviewed snapshot
(tests/data/golden-bundled-runs, written by `make golden`). A change of a finding's wording, of a number or of a
column fails here with its diff; if the change is meant, refresh the snapshots and commit them with it."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import golden  # noqa: E402 -- the one writer of the snapshots, shared with `make golden`

SETS = golden.page_sets()


def test_every_page_set_has_a_snapshot_and_no_snapshot_is_stale():
    assert sorted(path.name for path in golden.GOLDEN.iterdir()) == sorted(SETS)
    assert {"h100-sxm-suite", "h200-suite", "h100-sxm-parallel", "compare-mamba2-lm"} <= set(SETS)


@pytest.mark.parametrize("name", sorted(SETS))
def test_the_tables_are_as_their_snapshot(name):
    found = golden.differences(name, SETS[name])
    assert not found, "\n\n".join(found) + "\n\nmeant? run `make golden`, review the diff and commit it"


def test_a_changed_number_is_seen_as_a_diff(tmp_path):
    """Planted: one finding's number moved in a copy of the snapshot is reported as that line's diff."""
    import shutil

    shutil.copytree(golden.GOLDEN / "h100-sxm-suite", tmp_path / "h100-sxm-suite")
    findings = tmp_path / "h100-sxm-suite" / "suite-findings.csv"
    findings.write_text(findings.read_text().replace("7 workloads", "8 workloads", 1))
    found = golden.differences("h100-sxm-suite", SETS["h100-sxm-suite"], tmp_path)
    lines = found[0].splitlines() if len(found) == 1 else []
    assert [line[:1] for line in lines if "workloads" in line and line[:1] in "-+"] == ["-", "+"]
    assert "8 workloads" in next(line for line in lines if line.startswith("-w"))
