"""Every file under tests/data reaches CI: a fixture the repository ignores passes here and fails on a fresh
checkout (a bare `*.ncu-rep` did once; reports are committed xz-packed)."""

import shutil
import subprocess
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


def test_no_fixture_is_ignored_by_git():
    if shutil.which("git") is None or not (DATA.parents[1] / ".git").exists():
        pytest.skip("not a git checkout")
    files = [str(path.relative_to(DATA.parents[1])) for path in DATA.rglob("*") if path.is_file()]
    ignored = subprocess.run(["git", "check-ignore", "--stdin"], input="\n".join(files), capture_output=True,
                             text=True, cwd=DATA.parents[1]).stdout.split()
    assert ignored == [], f"fixtures git ignores (pack them or stop ignoring them): {ignored}"
