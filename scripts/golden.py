"""Golden outputs: what `ssmprof reference` shows, kept as reviewed snapshots under tests/data/golden-bundled-runs/.

Each page set of the bundled runs (a suite per GPU, its multi-GPU runs, the shipped models, each sweep, each
H100-vs-H200 comparison), and the runs of tests/data/host-time-h100 and tests/data/counter-plan-h100 (recorded with
the host sampler and the counter plan of families, which the bundled reference predates: their sections and columns
are reviewed and documented too), is analyzed as the page
analyzes it, and every table is written as `--csv` writes it (the comparisons as their markdown page). A table larger
than INLINE_BYTES (the per-launch frames: roofline, tensor/vector classes) is kept as its digest, rows, size and
header line in `digests.json`; every other file is kept whole, so that a change of a finding's wording or of a
number is reviewed as a diff. tests/test_golden.py fails on any change; `make golden` (this script) writes them
anew, to be reviewed and committed with the change that moved them.

    python scripts/golden.py [--check]
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

from ssmprof import bundled
from ssmprof.pipeline import regimes, reporting

GOLDEN = Path(__file__).resolve().parents[1] / "tests" / "data" / "golden-bundled-runs"
FIXTURES = ("host-time-h100", "counter-plan-h100")  # tests/data folders of runs newer than the bundled reference
INLINE_BYTES = 16_000  # a CSV kept whole up to this size, as its digest beyond
DIGESTS = "digests.json"


def _runs(paths: list[Path], out: Path) -> None:
    reporting.analyze_runs(paths, csv=out)


def _fixture_runs(fixture: Path, out: Path) -> None:
    """A fixture's runs, named from the repository's root (their pages say the path they were given, which must not
    be this checkout's)."""
    root, here, out = fixture.parents[2], Path.cwd(), out.resolve()
    os.chdir(root)
    try:
        _runs(sorted(path.parent.relative_to(root) for path in fixture.glob("*/run.json")), out)
    finally:
        os.chdir(here)


def _sweep(folder: Path, out: Path) -> None:
    regimes.report(folder, "md", csv=out)


def _compare(run_a: Path, run_b: Path, out: Path) -> None:
    reporting.compare(run_a, run_b, "md", out / "compare.md")


def page_sets() -> dict[str, Callable[[Path], None]]:
    """Each page set of `ssmprof reference`, and each fixture's of FIXTURES, by folder name -> what writes its
    tables into a folder."""
    sets: dict[str, Callable[[Path], None]] = {}
    for gpu in bundled.GPUS:
        for name, paths in (("suite", bundled.runs(gpu)), ("parallel", bundled.parallel_runs(gpu)),
                            ("models", bundled.shipped_models(gpu))):
            if paths:
                sets[f"{gpu}-{name}"] = partial(_runs, paths)
        for folder in bundled.sweeps(gpu):
            sets[f"{gpu}-sweep-{folder.name}"] = partial(_sweep, folder)
    first, second = bundled.GPUS
    on_second = {path.name: path for path in bundled.runs(second)}
    for path in bundled.runs(first):
        if path.name in on_second:
            sets[f"compare-{path.name}"] = partial(_compare, path, on_second[path.name])
    for fixture in FIXTURES:
        sets[f"fixture-{fixture}"] = partial(_fixture_runs, GOLDEN.parent / fixture)
    return sets


def snapshot(write: Callable[[Path], None], folder: Path) -> None:
    """The set's tables written into `folder`, those over INLINE_BYTES replaced by their digests."""
    folder.mkdir(parents=True)
    write(folder)
    digests = {}
    for path in sorted(folder.iterdir()):
        if path.stat().st_size > INLINE_BYTES:
            data = path.read_bytes()
            digests[path.name] = {"sha256": hashlib.sha256(data).hexdigest(), "rows": data.count(b"\n") - 1,
                                  "bytes": len(data), "header": data.split(b"\n", 1)[0].decode()}
            path.unlink()
    if digests:
        (folder / DIGESTS).write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")


def differences(name: str, write: Callable[[Path], None], golden: Path = GOLDEN) -> list[str]:
    """What differs between the set's tables now and its snapshot: one unified diff (or a line) a file."""
    with tempfile.TemporaryDirectory() as scratch:
        now = Path(scratch) / name
        snapshot(write, now)
        kept = golden / name
        files = sorted({p.name for p in now.iterdir()} | {p.name for p in kept.glob("*")})
        found = []
        for file in files:
            old, new = kept / file, now / file
            if not old.exists() or not new.exists():
                found.append(f"{name}/{file}: {'new' if new.exists() else 'gone'}")
            elif old.read_bytes() != new.read_bytes():
                diff = difflib.unified_diff(old.read_text().splitlines(), new.read_text().splitlines(),
                                            f"snapshot/{name}/{file}", f"now/{name}/{file}", lineterm="", n=1)
                found.append("\n".join(list(diff)[:40]))
        return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say what differs; exit 1 if anything does")
    check = parser.parse_args().check
    sets = page_sets()
    if check:
        found = [line for name, write in sets.items() for line in differences(name, write)]
        print("\n".join(found) or f"{len(sets)} page sets as their snapshots")
        sys.exit(1 if found else 0)
    shutil.rmtree(GOLDEN, ignore_errors=True)
    for name, write in sets.items():
        snapshot(write, GOLDEN / name)
    print(f"wrote {len(sets)} page sets into {GOLDEN}")


if __name__ == "__main__":
    main()
