"""`ssmprof report`: HTML with charts (self-contained, names escaped), markdown, CSV, and bad input."""

import re
import shutil
import subprocess
from pathlib import Path

import browser
import pandas as pd
import pytest
from known_work import kernels, run_info, unpadded
from typer.testing import CliRunner

from ssmprof import schema
from ssmprof.cli import app

runner = CliRunner()
NASTY = "gemm<script>alert(1)</script>"  # a kernel name that would break the page if not escaped


def write_run(folder, gemm_name="nvjet_hsh_256x128", counter_fraction=0.95):
    config = {"batch_size": 4, "seq_len": 2048, "d_model": 1024, "expand": 2, "headdim": 64, "d_state": 128,
              "ngroups": 1, "chunk_size": 256, "dtype": "bf16"}
    info = run_info(config=config, counter_fraction=counter_fraction)
    return schema.write_run(folder, schema.new_run_info(info), kernels(gemm_name))


def test_html_report_is_self_contained_with_charts(tmp_path):
    run = write_run(tmp_path / "run", gemm_name=NASTY)
    out = tmp_path / "report.html"
    result = runner.invoke(app, ["report", str(run), "-o", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert re.findall(r'<script src="([^"]+)"', page) == ["plotly.min.js"]  # nothing fetched: works offline
    assert (tmp_path / "plotly.min.js").stat().st_size > 1e6 and "plotly.js v" not in page  # the library beside it
    assert page.count("Plotly.newPlot(") == 5  # breakdown, roofline, caches, instruction bounds, tensor/vector
    assert "<script>alert(1)" not in page  # escaped in tables and in the chart data
    assert "gemm&lt;script&gt;" in page
    assert "Roofline by category" in page and "bundled device profile of the NVIDIA H100 80GB HBM3" in page


def test_markdown_and_csv(tmp_path):
    run = write_run(tmp_path / "run", counter_fraction=0.5)
    result = runner.invoke(app, ["report", str(run), "--format", "md", "--csv", str(tmp_path / "csv")])
    assert result.exit_code == 0, result.output
    assert "## mamba2-lm --preset small on NVIDIA H100 80GB HBM3" in result.output
    assert "| Category | Launches | Time | Share of kernel time |" in unpadded(result.output)  # human headers
    assert "### Findings" in result.output and "1. **" in result.output  # findings in words, first
    assert result.output.index("### Findings") < result.output.index("### Kernel time by category")
    assert "- source: run directory" in result.output  # provenance
    assert "counters cover 50.0 % of kernel time" in result.output
    tensor_vector = pd.read_csv(tmp_path / "csv" / "tensor_vector.csv")
    assert {"kernel_name", "phase", "class"} <= set(tensor_vector.columns)
    assert dict(zip(tensor_vector["kernel_name"], tensor_vector["class"], strict=True))[
        "_chunk_scan_fwd_kernel"] == "Tensor+Vector"
    assert (tmp_path / "csv" / "ssd_analytic_vs_measured.csv").exists()


def test_device_profile_of_another_gpu_is_not_applied(tmp_path):
    """An H200 profile given for an H100 run: the run keeps its own GPU's roof (the bundled H100 profile), and
    the report says why."""
    from ssmprof import bundled

    run = write_run(tmp_path / "run")
    result = runner.invoke(app, ["report", str(run), "--format", "md", "--csv", str(tmp_path / "csv"),
                                 "--device-profile", str(bundled.device_profile("h200"))])
    assert result.exit_code == 0, result.output
    assert "> the device profile given with --device-profile was measured on NVIDIA H200, this run on NVIDIA H100 " \
           "80GB HBM3: not applied" in result.output
    assert set(pd.read_csv(tmp_path / "csv" / "roofline.csv")["ceiling_source"]) == {
        "measured by ssmprof calibrate, bundled device profile of the NVIDIA H100 80GB HBM3"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["report", "{missing}"], "nope does not exist"),
        (["report", "{run}", "--format", "pdf"], "--format must be html or md"),
        (["report", "{run}", "--device-profile", "{missing}"], "cannot read device profile"),
    ],
)
def test_bad_input(tmp_path, args, message):
    run = write_run(tmp_path / "run")
    args = [a.format(run=run, missing=tmp_path / "nope") for a in args]
    result = runner.invoke(app, args)
    assert result.exit_code == 1 and message in result.output and "Traceback" not in result.output


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (installed by .ci/run)")
def test_report_draws_in_headless_chromium(tmp_path):
    """The page as a browser sees it: every chart drawn (plotly renders 3 svg layers per chart), no script error."""
    write_run(tmp_path / "run", gemm_name=NASTY)
    out = tmp_path / "report.html"
    assert runner.invoke(app, ["report", str(tmp_path / "run"), "-o", str(out)]).exit_code == 0
    browser = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--enable-logging=stderr", "--v=0",
         "--dump-dom", out.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert browser.stdout.count('class="main-svg"') == 5 * 3  # the five charts of the self-contained test
    assert "Uncaught" not in browser.stderr  # no script error on the page
    assert "<script>alert(1)" not in browser.stdout  # the hostile kernel name stayed text


# Injected into a copy of a page: collects script errors from the start, then after the charts are drawn
# writes what a reader would notice into <pre id="page-check">: charts without data, tables wider than
# their box or than the window.
CHECK_HEAD = """<script>window.__errors = [];
window.addEventListener('error', function(e){ window.__errors.push(String(e.message)); });</script>"""
CHECK_TAIL = """<script>window.addEventListener('load', function(){ setTimeout(function(){
  var plots = Array.from(document.querySelectorAll('.plotly-graph-div'));
  var drawn = function(pt){ return (typeof pt.y === 'number' && isFinite(pt.y)) ||
                                   (typeof pt.s === 'number' && isFinite(pt.s)) ||
                                   (Array.isArray(pt.z) && pt.z.some(function(row){  // a heatmap's cells
                                     return row.some(function(v){ return typeof v === 'number' && isFinite(v); });
                                   })); };
  var shown = function(e){ return e.checkVisibility ? e.checkVisibility() : e.offsetParent !== null; };
  var empty = plots.filter(function(p){ return !(p.calcdata || []).some(function(trace){
    return trace.some(drawn); }); }).map(function(p){
    return (p.layout && p.layout.title && p.layout.title.text) || p.id; });
  var wide = Array.from(document.querySelectorAll('table.data')).filter(shown).filter(function(t){
    return t.getBoundingClientRect().right > window.innerWidth || t.scrollWidth > t.parentElement.clientWidth + 1;
  }).map(function(t){ return t.id; });
  var over = Array.from(document.body.querySelectorAll('*')).filter(shown).filter(function(e){
    return e.getBoundingClientRect().right > window.innerWidth + 1; }).slice(0, 5).map(function(e){
    return e.tagName + '.' + e.className + '#' + e.id; });
  var pre = document.createElement('pre'); pre.id = 'page-check';
  pre.textContent = JSON.stringify({errors: window.__errors, plots: plots.length, empty: empty, wide: wide, over: over,
                                    page: document.documentElement.scrollWidth, window: window.innerWidth,
                                    height: document.body.getBoundingClientRect().height});
  document.body.appendChild(pre); }, 500); });</script>"""


def browse(page, tmp_path, name, width=1600):
    """Open a copy of `page` (with the checks injected, beside it: it loads plotly.js from its folder) at `width`
    px, once: a screenshot, and the checks' verdict from the same page's DOM."""
    import json

    checked = page.parent / f"{name}.html"
    text = page.read_text()
    checked.write_text(text.replace("<head>", "<head>" + CHECK_HEAD, 1).replace("</body>", CHECK_TAIL + "</body>"))
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000", f"--window-size={width},3000"]
    shot = tmp_path / f"{name}.png"
    dom = subprocess.run([*flags, f"--screenshot={shot}", "--enable-logging=stderr", "--v=0", "--dump-dom",
                          checked.as_uri()], capture_output=True, text=True, timeout=180)
    found = re.search(r'<pre id="page-check">(.*?)</pre>', dom.stdout, re.S)
    assert found, dom.stderr[-2000:]
    return shot, json.loads(html_unescape(found.group(1))), dom.stderr


def html_unescape(text):
    import html

    return html.unescape(text)


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (installed by .ci/run)")
def test_suite_run_and_compare_pages_in_headless_chromium(tmp_path):
    """The bundled suite page, one run's report and a compare page as a reader sees them at 1600 px: a
    screenshot each, no script error, every chart has data, no table wider than the page."""
    from ssmprof import bundled
    from ssmprof.pipeline import reporting

    runs = bundled.runs("h100-sxm")
    profile = bundled.device_profile("h100-sxm")
    pages = {"suite": reporting.report(runs, "html", tmp_path / "suite.html", device_profile=profile),
             "run": reporting.report(runs[:1], "html", tmp_path / "run.html", device_profile=profile),
             "compare": reporting.compare(runs[0], bundled.runs("h200")[0], "html", tmp_path / "compare.html")}
    for name in pages:
        shot, check, log = browse(tmp_path / f"{name}.html", tmp_path, f"{name}-checked")
        assert shot.exists() and shot.stat().st_size > 50_000, name  # a page was drawn
        assert check["errors"] == [] and "Uncaught" not in log, (name, check["errors"])
        assert check["plots"] >= 2 and check["empty"] == [], (name, check)
        assert check["wide"] == [] and check["page"] <= check["window"], (name, check)


SCREEN = 800  # px: the page heights below are in screens of a 1280 x 800 window


@pytest.fixture(scope="module")
def reference_pages(bundled_reference):
    """Every page `ssmprof reference` bundles (what `make profile` renders without a GPU), written once."""
    return [path for path in bundled_reference.written if path.suffix == ".html"]


def chart_data(page: str) -> list[tuple[str, list]]:
    """(title, traces) of every chart of a page, from the data and layout each `Plotly.newPlot` call draws."""
    import json

    decoder, charts = json.JSONDecoder(), []
    for call in re.finditer(r'Plotly\.newPlot\(\s*"[^"]+",\s*', page):
        traces, end = decoder.raw_decode(page, call.end())
        layout, _ = decoder.raw_decode(page, re.compile(r"\s*,\s*").match(page, end).end())
        charts.append((layout.get("title", {}).get("text", ""), traces))
    return charts


def blank(traces: list) -> bool:
    """A chart with nothing to draw: no trace has a single finite value (all NaN or empty). Plotly writes numeric
    arrays as typed binary (`{"dtype": "f8", "bdata": base64}`) or as lists."""
    import base64

    import numpy as np

    def finite(values) -> bool:
        if isinstance(values, dict) and "bdata" in values:
            values = np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"])
        numbers = np.array([v for v in np.ravel(np.array(values, dtype=object)) if isinstance(v, int | float)]
                           if values is not None and not isinstance(values, np.ndarray) else values, dtype=float)
        return bool(numbers is not None and numbers.size and np.isfinite(numbers).any())

    values = lambda trace: trace.get("x") if trace.get("orientation") == "h" else trace.get("y")  # noqa: E731
    return not any(finite(values(trace)) or finite(trace.get("z")) for trace in traces)


def test_bundled_pages_are_small_and_draw_no_blank_chart(reference_pages):
    """No bundled page above 1.5 MB (plotly.js is one file beside them, the rooflines one point per kernel and
    launch configuration), and no chart on any of them without data: a chart with nothing to draw is left out
    and its page says why."""
    assert len(reference_pages) == 15 and (reference_pages[0].parent / "plotly.min.js").exists()
    for path in reference_pages:
        page = path.read_text()
        assert path.stat().st_size < 1.5e6, (path.name, path.stat().st_size)
        charts = chart_data(page)
        assert charts and page.count("Plotly.newPlot(") == len(charts), path.name
        assert [title for title, traces in charts if blank(traces)] == [], path.name
    sweep = next(p for p in reference_pages if p.name == "sweep-h100-sxm-seq_len.html").read_text()
    assert "No DRAM chart for" in sweep  # what was left out, said
    assert "no counters at" not in sweep  # a gap in the counters is no finding


def test_parallel_page_tells_its_runs_apart(reference_pages):
    page = next(p for p in reference_pages if p.name == "parallel-h200.html").read_text()
    nav = re.search(r'<nav class="runs">(.*?)</nav>', page, re.S).group(1)
    assert "<b>Single GPU:</b>" in nav and "<b>TP=2 DP=1:</b>" in nav
    labels = re.findall(r'<a href="#run\d+">([^<]+)</a>', nav)
    assert len(labels) == len(set(labels)) == 8 and "mamba1-lm tp2x dp1 no-SP" in labels
    assert "TP=2 DP=1 (2 GPUs" in page  # the multi-GPU runs' headings say so
    assert "measured on a multi-GPU host" in page and "ms here" in page
    for stale in ("106 % busy", "in all 1 runs", "54-54 %"):
        assert stale not in page, stale


def test_the_shipped_hybrids_page_shows_their_fused_ssd_kernels(reference_pages):
    """hf:nemotron-h and hf:bamba (transformers' models from their published configs, small preset, H100, sampled
    counters): their page names each run and its fused SSD chain, and holds the SSM roofline and Table II."""
    page = next(p for p in reference_pages if p.name == "models-h100-sxm.html").read_text()
    for name in ("hf:nemotron-h", "hf:bamba"):
        assert name in page
    assert "mamba_split_conv1d_scan_combined" in page and "_chunk_scan_fwd_kernel" in page
    assert "Table II" in page


@pytest.mark.parametrize(("name", "scaling", "late"), [
    ("parallel-h100-sxm.html", "1.31-1.93x on 4 GPUs (33-48 % efficiency); 2.80x as one CUDA graph",
     "hosts pace, rank 1 last: 52 % of an iteration"),
    ("parallel-h200.html", "1.41-1.75x on 2 GPUs (70-88 % efficiency)", "rank 0 late: 30 % of an iteration"),
])
def test_parallel_page_leads_with_scaling_and_communication(reference_pages, name, scaling, late):
    """A multi-GPU page answers first how well its runs scale and where their communication time goes: its
    first findings are the speedup with its efficiency, transfer against waiting and the late rank, and its
    scaling and communication charts and tables come before the suite's category chart."""
    page = next(p for p in reference_pages if p.name == name).read_text()
    values = [finding.split(" \u00b7 ")[0] for finding in browser.first_findings(page)]
    assert values[0] == scaling and values[2] == late and "waiting" in values[1], values
    assert len(values) <= 5 and not any("workloads" in value for value in values), values
    order = [page.index(text) for text in ("Speedup over one GPU per run", 'id="suite-scaling"',
                                           'id="suite-parallel"', 'id="suite-late_ranks"',
                                           "Where the time goes: % of kernel time per category")]
    assert order == sorted(order), order


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (installed by .ci/run)")
@pytest.mark.parametrize("width", [1280, 800])
def test_bundled_pages_in_headless_chromium_at_two_widths(reference_pages, tmp_path, width):
    """The suite page (the file the README names first), the parallel page and a sweep page as a reader sees
    them: a screenshot each, no script error, every chart drawn with data, no table wider than the page, and the
    suite page's first answers within about ten screens."""
    for name in ("suite-h100-sxm.html", "parallel-h200.html", "sweep-h200-d_state-chunk_size.html"):
        page = next(p for p in reference_pages if p.name == name)
        shot, check, log = browse(page, tmp_path, f"{page.stem}-{width}", width)
        assert shot.exists() and shot.stat().st_size > 30_000, name
        assert check["errors"] == [] and "Uncaught" not in log, (name, check["errors"])
        assert check["plots"] >= 1 and check["empty"] == [], (name, check)
        assert check["page"] <= check["window"], (name, check)  # open tables scroll in their box, not the page
        if name.startswith("suite"):
            assert check["height"] < 10 * SCREEN, check["height"]


@pytest.mark.skipif(not browser.READY, reason="needs Debian's chromium (installed by .ci/run) and aiohttp")
def test_every_bundled_page_reads_cleanly_in_chromium(reference_pages, tmp_path):
    """Every page `ssmprof reference` writes, every section open, in one headless Chromium at 1280 x 800: no
    script error, every chart with data, no text clipped by its chart or over other text or a marker (measured
    from the SVG boxes), a tab title of its own, and a screenshot of its first screen."""
    found = browser.visit(reference_pages, tmp_path / "shots")
    assert sorted(found) == sorted(page.name for page in reference_pages)
    for name, seen in found.items():
        assert seen["errors"] == [], (name, seen["errors"])
        assert seen["plots"] >= 1 and seen["empty"] == [], (name, seen["empty"])
        assert seen["clipped"] == [], (name, seen["clipped"][:5])
        assert seen["overlapping"] == [], (name, seen["overlapping"][:5])
        assert seen["covered"] == [], (name, seen["covered"][:5])  # a roof's label over a kernel (issue #55)
        assert not seen["no_plotly_said"], name
        assert (tmp_path / "shots" / f"{Path(name).stem}.png").stat().st_size > 20_000, name
    titles = [seen["title"] for seen in found.values()]
    assert len(set(titles)) == len(titles) and not any(title.startswith("ssmprof ") for title in titles), titles


@pytest.mark.skipif(not browser.READY, reason="needs Debian's chromium (installed by .ci/run) and aiohttp")
def test_a_page_moved_without_plotly_says_why_it_has_no_chart(reference_pages, tmp_path):
    page = next(p for p in reference_pages if p.name.startswith("compare-"))
    (tmp_path / "alone").mkdir()
    moved = Path(shutil.copy(page, tmp_path / "alone" / page.name))
    seen = browser.visit([moved], tmp_path / "shots")[page.name]
    assert not seen["plotly"] and seen["no_plotly_said"]


def test_the_readme_pictures_show_their_pages_as_rendered_now(reference_pages):
    """docs/img/pictures.json records what each picture shows (scripts/page_pictures.py writes both): a page
    whose first findings changed since needs its picture taken again (run that script)."""
    import json

    record = json.loads((Path(__file__).parent.parent / "docs" / "img" / "pictures.json").read_text())
    pages = {page.name: page for page in reference_pages}
    assert "suite-h100-sxm.png" in record  # the README's picture
    for picture, seen in record.items():
        assert (Path(__file__).parent.parent / "docs" / "img" / picture).stat().st_size > 20_000, picture
        assert browser.first_findings(pages[seen["page"]].read_text()) == seen["findings"], \
            f"{picture} shows an older {seen['page']}: run python scripts/page_pictures.py"
