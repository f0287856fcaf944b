"""Regenerate the pictures of docs/img from the pages they show: `ssmprof reference` renders the bundled pages,
headless Chromium takes the first screen (1280 x 800) of each, and docs/img/pictures.json records beside them
what each picture shows: its page, the window, the page's size and the findings of its first screen.
tests/test_report.py compares those findings with a fresh render, so a picture that no longer matches its page
fails the tests until this script is run again.

    python scripts/page_pictures.py        (needs Debian's chromium; about a minute)
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the DevTools driver the browser tests use

import browser  # noqa: E402

from ssmprof.pipeline import reporting  # noqa: E402

IMAGES = ROOT / "docs" / "img"
SIDECAR = IMAGES / "pictures.json"
WINDOW = (1280, 800)
# picture -> the bundled page it shows (suite-h100-sxm.png is the README's)
PICTURES = {
    "suite-h100-sxm.png": "suite-h100-sxm.html",
    "compare-h100-vs-h200.png": "compare-mamba2-lm-h100-sxm-vs-h200.html",
    "sweep-h200.png": "sweep-h200-d_state-chunk_size.html",
    "parallel-h200.png": "parallel-h200.html",
    "parallel-h100-sxm.png": "parallel-h100-sxm.html",
}


def main() -> None:
    if browser.CHROMIUM is None:
        raise SystemExit("page_pictures: needs Debian's chromium (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "pages"
        pages = {path.name: path for path in reporting.reference(out)}
        shots = Path(scratch) / "shots"
        browser.visit([pages[name] for name in PICTURES.values()], shots, *WINDOW)
        record = {}
        for picture, name in PICTURES.items():
            shutil.copy(shots / f"{Path(name).stem}.png", IMAGES / picture)
            record[picture] = {"page": name, "window": list(WINDOW), "page_bytes": pages[name].stat().st_size,
                               "findings": browser.first_findings(pages[name].read_text())}
    SIDECAR.write_text(json.dumps(record, indent=1) + "\n")
    for picture, seen in record.items():
        print(f"{IMAGES / picture}: first screen of {seen['page']} ({seen['page_bytes'] / 1e3:,.0f} KB)")


if __name__ == "__main__":
    main()
