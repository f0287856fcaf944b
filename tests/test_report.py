"""`ssmprof report`: HTML with charts (self-contained, names escaped), markdown, CSV, and bad input."""

import re
import shutil
import subprocess

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
    return schema.write_run(folder, info, kernels(gemm_name))


def test_html_report_is_self_contained_with_charts(tmp_path):
    run = write_run(tmp_path / "run", gemm_name=NASTY)
    out = tmp_path / "report.html"
    result = runner.invoke(app, ["report", str(run), "-o", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert "<script src=" not in page  # nothing fetched: works offline
    assert page.count("Plotly.newPlot(") == 5  # breakdown, roofline, caches, instruction bounds, tensor/vector
    assert len(re.findall(r"plotly\.js v\d", page)) == 1  # the library embedded once
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
    assert "counters cover 50% of kernel time" in result.output
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
        (["report", "{missing}"], "is not a run directory"),
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
                                   (typeof pt.s === 'number' && isFinite(pt.s)); };
  var empty = plots.filter(function(p){ return !(p.calcdata || []).some(function(trace){
    return trace.some(drawn); }); }).map(function(p){
    return (p.layout && p.layout.title && p.layout.title.text) || p.id; });
  var wide = Array.from(document.querySelectorAll('table.data')).filter(function(t){
    return t.getBoundingClientRect().right > window.innerWidth || t.scrollWidth > t.parentElement.clientWidth + 1;
  }).map(function(t){ return t.id; });
  var over = Array.from(document.body.querySelectorAll('*')).filter(function(e){
    return e.getBoundingClientRect().right > window.innerWidth + 1; }).slice(0, 5).map(function(e){
    return e.tagName + '.' + e.className + '#' + e.id; });
  var pre = document.createElement('pre'); pre.id = 'page-check';
  pre.textContent = JSON.stringify({errors: window.__errors, plots: plots.length, empty: empty, wide: wide, over: over,
                                    page: document.documentElement.scrollWidth, window: window.innerWidth});
  document.body.appendChild(pre); }, 500); });</script>"""


def browse(page, tmp_path, name):
    """Open a copy of `page` (with the checks injected) at 1600 px: a screenshot, and the checks' verdict."""
    import json

    checked = tmp_path / f"{name}.html"
    text = page.read_text()
    checked.write_text(text.replace("<head>", "<head>" + CHECK_HEAD, 1).replace("</body>", CHECK_TAIL + "</body>"))
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000", "--window-size=1600,3000"]
    shot = tmp_path / f"{name}.png"
    subprocess.run([*flags, f"--screenshot={shot}", checked.as_uri()], capture_output=True, timeout=180)
    dom = subprocess.run([*flags, "--enable-logging=stderr", "--v=0", "--dump-dom", checked.as_uri()],
                         capture_output=True, text=True, timeout=180)
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
