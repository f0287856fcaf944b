"""Every bundled page and markdown report reads as words and numbers with their units (issue #55): each page set
`ssmprof reference` writes (a suite, the multi-GPU runs and the shipped models per GPU, each sweep, each H100-vs-H200
comparison) rendered as HTML and as markdown, every table on it read as a reader sees it.

The rules, one test each:
- a table's header is one `reports.style.HEADERS` gives, never a column's name with its underscores made spaces
  (`gpu idle low ms`, `busbw gb per s max`): a column a page shows is named in `HEADERS`;
- no cell, sentence or heading reads nan, NaN, None or inf;
- a number carries the unit its column is in (`reports.columns.COLUMN_MEANINGS` says which, in its last brackets):
  a duration s, ms or us, a % or a share %, a rate GB/s or FLOP/s, a size B, MiB or GiB, a clock MHz, unless the
  header says the unit, as "(us)"; a count, a ratio or a setting is a plain number (no stray %: a ratio read as a
  share showed 344.3 %).

All pages are analyzed once (the suites as the session has them, `bundled_suites`) and each is rendered in both
formats from one analysis: about 40 s alone on two cores, 25 s in a session that has the suites analyzed."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from ssmprof import bundled
from ssmprof.analysis.summaries.suite import same_config
from ssmprof.pipeline import regimes, reporting
from ssmprof.reports import columns, render, style
from ssmprof.reports.sweep import render_sweep
from ssmprof.schema import read_run_info

FORMATS = ("html", "md")
NAN = re.compile(r"\b(nan|NaN|None|inf)\b")
NUMBER = re.compile(r"^[-+]?\d")  # a cell that states a number (a text cell in a numeric column is words)
PLAIN = re.compile(r"^[-+]?[\d,]*\.?\d+x?$")  # a count, a ratio (a speedup: 1.20x) or a setting
DURATION = r" (s|ms|us)"
# The unit a column's meaning ends with (its last brackets) -> what a cell of it ends with.
SUFFIXES = {"ms": DURATION, "us": DURATION, "ns": DURATION, "s": DURATION, "%": " %", "share 0-1": " %",
            "GB/s": " GB/s", "FLOP/s": " [kMGTP]?FLOP/s", "1/s": " launches/s", "items/s": " (tokens|samples|graphs)/s",
            "TFLOP/s or GB/s": " (TFLOP|GB)/s",
            "bytes": " [kMGTP]?B", "FLOP": " [kMGTP]?FLOP", "MiB": " MiB", "GiB": " GiB", "MHz": " MHz"}
UNITLESS = {"count", "count from 0", "ratio", "tokens", "rank", "index", "blocks", "threads", "loss", "FLOP/byte",
            "score 0-1"}
# Units a cell cannot carry (a score, a list of gaps): the header says them.
IN_HEADER = {"score 0-1": "0-1", "text, %": "%"}


def page_sets() -> list[str]:
    """The page sets of `ssmprof reference`, by name: suite-, parallel- and models-<gpu>, sweep-<gpu>-<folder>,
    compare-<workload> (each workload measured on both GPUs with one configuration, `suite.same_config`)."""
    names = []
    for gpu in bundled.GPUS:
        names += [f"{page}-{gpu}" for page, runs in (("suite", bundled.runs), ("parallel", bundled.parallel_runs),
                                                      ("models", bundled.shipped_models)) if runs(gpu)]
        names += [f"sweep-{gpu}-{folder.name}" for folder in bundled.sweeps(gpu)]
    first, second = ({path.name: read_run_info(path) for path in bundled.runs(gpu)} for gpu in bundled.GPUS)
    return names + [f"compare-{workload}" for workload in same_config(first, second)]


SETS = page_sets()


def _runs_pages(analyzed, overview) -> dict[str, str]:
    return {"html": render.render_html(analyzed, overview), "md": render.render_markdown(analyzed, overview)}


def _sweep_pages(gpu: str, name: str) -> dict[str, str]:
    analysis = regimes.analyze([next(f for f in bundled.sweeps(gpu) if f.name == name)])
    return {fmt: render_sweep(name, analysis.tables, analysis.axes, fmt) for fmt in FORMATS}


def _compare_pages(workload: str) -> dict[str, str]:
    """`ssmprof compare` of the workload's H100 run against its H200 run, loaded once: the HTML page's frames
    rendered as markdown too."""
    first, second = (next(p for p in bundled.runs(gpu) if p.name == workload) for gpu in bundled.GPUS)
    calls = []
    real = reporting.render_compare

    def kept(*args, **kwargs):
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reporting, "render_compare", kept)
        page = reporting.compare(first, second, "html")
    (args, kwargs), = calls
    return {"html": page, "md": real(*args[:5], "md", *args[6:], **kwargs)}


@pytest.fixture(scope="module")
def pages(bundled_suites) -> dict[str, dict[str, str]]:
    """Every page set's text by format (html, md), rendered once."""
    return render_pages(bundled_suites)


def render_pages(suites) -> dict[str, dict[str, str]]:
    """Each of `SETS` rendered in both formats: the suites from `suites` ((analyzed runs, overview) by GPU), the
    rest analyzed here."""
    made = {}
    for name in SETS:
        kind, rest = name.split("-", 1)
        if kind == "suite":
            made[name] = _runs_pages(*suites[rest])
        elif kind in ("parallel", "models"):
            made[name] = _runs_pages(*reporting.analyze_runs(
                (bundled.parallel_runs if kind == "parallel" else bundled.shipped_models)(rest)))
        elif kind == "sweep":
            gpu = next(g for g in bundled.GPUS if rest.startswith(f"{g}-"))
            made[name] = _sweep_pages(gpu, rest[len(gpu) + 1:])
        else:
            made[name] = _compare_pages(rest)
    return made


class _Reader(HTMLParser):
    """An HTML page as a reader sees it: its text (no script or style) and its data tables (headers, rows)."""

    def __init__(self):
        super().__init__()
        self.text, self.tables, self._skip, self._cell, self._open = [], [], 0, None, []

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self._skip += 1
        elif tag == "table":  # a data table (headers and numbers), or a provenance's item: value lines
            self._open.append("data" in (dict(attrs).get("class") or "").split())
            if self._open[-1]:
                self.tables.append(([], []))
        elif self._open and self._open[-1] and tag == "tr":
            self.tables[-1][1].append([])
        elif self._open and self._open[-1] and tag in ("th", "td"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self._skip -= 1
        elif tag == "table" and self._open:
            self._open.pop()
        elif tag in ("th", "td") and self._cell is not None:
            head, rows = self.tables[-1]
            (head if tag == "th" else rows[-1]).append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if not self._skip:
            self.text.append(data)
            if self._cell is not None:
                self._cell.append(data)


def _markdown_tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Each GitHub table of a markdown page: (headers, rows), `\\|` kept inside its cell."""
    def split(line: str) -> list[str]:
        return [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]

    tables, lines = [], text.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("|") and index + 1 < len(lines) and re.fullmatch(r"\|[-:| ]+\|", lines[index + 1]):
            rows = []
            for row in lines[index + 2:]:
                if not row.startswith("|"):
                    break
                rows.append(split(row))
            tables.append((split(line), rows))
    return tables


def read(text: str, fmt: str) -> tuple[str, list[tuple[list[str], list[list[str]]]]]:
    """A page's visible text and its tables (headers, rows)."""
    if fmt == "md":
        return text, _markdown_tables(text)
    reader = _Reader()
    reader.feed(text)
    return "\n".join(reader.text), [(head, [row for row in rows if row]) for head, rows in reader.tables]


def unit_of(column: str) -> str | None:
    """The unit a column is in: its meaning's last brackets (`reports.columns`), a comparison's `_a`/`_b` column
    its base's, else its name's last unit word; None where nothing says."""
    for name in (column, re.sub(r"_[ab]$", "", column)):
        found = re.search(r"\(([^()]*)\)\s*$", columns.COLUMN_MEANINGS.get(name, ""))
        if found:
            return found.group(1)
    words = re.sub(r"_[ab]$", "", column).split("_")
    for word, unit in (("ns", "ns"), ("ms", "ms"), ("us", "us"), ("pct", "%"), ("share", "share 0-1"),
                       ("speedup", "ratio")):
        if word in words:
            return unit
    return None


HEADERS_SHOWN = {header: [c for c, h in style.HEADERS.items() if h == header] for header in style.HEADERS.values()}


def unit_faults(head: list[str], rows: list[list[str]]) -> list[str]:
    """Each cell whose number lacks its column's unit or carries a unit its column has none of, and each header
    that must say its unit and does not."""
    faults = []
    for index, header in enumerate(head):
        units = {unit_of(column) for column in HEADERS_SHOWN.get(header, [])} - {None}
        said = [unit for unit in units if unit in IN_HEADER and IN_HEADER[unit] not in header]
        faults += [f"{header!r}: its header does not say {unit}" for unit in said]
        suffixes = [SUFFIXES[unit] for unit in units if unit in SUFFIXES and f"({unit})" not in header]
        cells = [row[index] for row in rows if index < len(row) and NUMBER.match(row[index])]
        for text in cells:
            if suffixes and not any(re.search(f"\\d{suffix}$", text) for suffix in suffixes):
                faults.append(f"{header!r}: {text!r} lacks its unit ({', '.join(sorted(units))})")
            elif units and units <= UNITLESS and not PLAIN.match(text):
                faults.append(f"{header!r}: {text!r} carries a unit; the column is in {', '.join(sorted(units))}")
    return faults


CASES = [(name, fmt) for name in SETS for fmt in FORMATS]


def test_the_page_sets_are_the_references():
    assert len(SETS) == 15 and {"suite-h100-sxm", "models-h100-sxm", "parallel-h200", "compare-mamba2-lm"} <= set(SETS)


@pytest.mark.parametrize(("name", "fmt"), CASES)
def test_every_header_is_a_human_one(pages, name, fmt):
    """Every table header shown is one of `style.HEADERS`' (a column a page shows is named there)."""
    _, tables = read(pages[name][fmt], fmt)
    assert tables, name
    raw = sorted({header for head, _ in tables for header in head if header not in HEADERS_SHOWN})
    assert raw == [], f"{name}.{fmt}: name these columns in reports/style.py HEADERS"


@pytest.mark.parametrize(("name", "fmt"), CASES)
def test_nothing_reads_nan_or_none(pages, name, fmt):
    text, _ = read(pages[name][fmt], fmt)
    found = [text[max(0, m.start() - 60):m.end() + 20].replace("\n", " ") for m in NAN.finditer(text)]
    assert found == [], f"{name}.{fmt}"


@pytest.mark.parametrize(("name", "fmt"), CASES)
def test_every_number_carries_its_unit(pages, name, fmt):
    _, tables = read(pages[name][fmt], fmt)
    faults = sorted({fault for head, rows in tables for fault in unit_faults(head, rows)})
    assert faults == [], f"{name}.{fmt}"


@pytest.mark.parametrize(("head", "rows", "fault"), [
    (["GPU waits for host, 95 % low"], [["8.76"]], "lacks its unit"),  # was: 'gpu idle low ms', a bare number
    (["busbw, highest"], [["265.9"]], "lacks its unit"),
    (["Instructions per shared wavefront"], [["344.3 %"]], "carries a unit"),  # a ratio read as a share
    (["Margin over the runner-up (score 0-1)"], [["0.875"]], None),  # a score: its header says so
    (["Step time per token (us)"], [["12.3"]], None),  # the unit in the header
    (["Share of time"], [["0.45"]], "lacks its unit"),  # a share as a bare fraction
    (["Crossings"], [["2"]], None),
    (["Time"], [["n/a"], ["1.20 ms"]], None),  # words in a numeric column are no number
])
def test_the_unit_rule_catches_what_the_pages_showed(head, rows, fault):
    """The rule on the faults issue #55 reported (the headers as they read after the renames)."""
    found = unit_faults(head, rows)
    assert (found == []) if fault is None else (len(found) == 1 and fault in found[0]), found
