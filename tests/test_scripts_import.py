"""Every script and benchmark imports without doing its work: its work sits under `if __name__ == "__main__":`,
so a test (or a tool) can import its functions, and importing one on a host without a GPU neither fails nor
launches anything."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted([*ROOT.joinpath("scripts").glob("*.py"), *ROOT.joinpath("benchmarks").glob("*.py")])


def test_the_scripts_and_benchmarks_are_found():
    assert {"gemm_loop.py", "l1_probe.py", "summarize_runs.py", "ncu_rules.py", "bench_report.py"} <= {
        path.name for path in MODULES}


@pytest.mark.parametrize("path", MODULES, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_a_script_imports_without_side_effects(path, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(path.parent))  # as `python scripts/x.py` runs it: its folder's modules import
    spec = importlib.util.spec_from_file_location(f"imported_{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert capsys.readouterr() == ("", ""), "printed on import"
    assert list(tmp_path.iterdir()) == [], "wrote files on import"
    assert module.__doc__, "a script says what it is for"
