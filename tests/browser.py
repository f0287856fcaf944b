"""Pages as a reader sees them: one headless Chromium driven over the DevTools protocol (aiohttp's websocket
client, no browser package), each page opened in turn at a window size, its first screen saved as PNG and what a
reader would notice measured in the page: script errors, charts without data, text clipped by its chart or
overlapping other text (from the SVG boxes of titles, tick labels, annotations and legends), and a label (a roof's)
over a marker's centre."""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Debian's chromium (.ci/run installs it) and aiohttp's websocket client (torch-geometric's dependency)
READY = CHROMIUM is not None and importlib.util.find_spec("aiohttp") is not None

# Run in the page once it has loaded: open every collapsed section, redraw the charts at their width, then
# measure. A rotated label's box is not its glyphs, so slanted tick labels are checked for clipping only.
CHECK = """new Promise(function(done){
  document.querySelectorAll('details').forEach(function(d){ d.open = true; });
  var plots = Array.from(document.querySelectorAll('.plotly-graph-div'));
  if (window.Plotly) plots.forEach(function(p){ Plotly.Plots.resize(p); });
  setTimeout(function(){
    var said = document.getElementById('no-plotly');
    var found = {plots: plots.length, clipped: [], overlapping: [], covered: [], empty: [], plotly: !!window.Plotly,
                 no_plotly_said: !!(said && said.offsetParent), title: document.title};
    var drawn = function(pt){ return (typeof pt.y === 'number' && isFinite(pt.y)) ||
      (typeof pt.s === 'number' && isFinite(pt.s)) || (Array.isArray(pt.z) && pt.z.some(function(row){
        return row.some(function(v){ return typeof v === 'number' && isFinite(v); }); })); };
    plots.forEach(function(p){
      var box = p.getBoundingClientRect();
      var title = (p.layout && p.layout.title && p.layout.title.text) || p.id;
      if (!(p.calcdata || []).some(function(trace){ return trace.some(drawn); })) found.empty.push(title);
      var texts = Array.from(p.querySelectorAll('svg text')).filter(function(t){
        var r = t.getBoundingClientRect();
        return t.textContent.trim() && r.width > 0 && r.height > 0 && !t.closest('.hoverlayer');
      }).map(function(t){ return {t: t.textContent.trim(), r: t.getBoundingClientRect(),
                                  turned: /rotate\\((?!0)/.test(t.getAttribute('transform') || '')}; });
      texts.forEach(function(a){
        if (a.r.left < box.left - 1 || a.r.right > box.right + 1 || a.r.top < box.top - 1 ||
            a.r.bottom > box.bottom + 1) found.clipped.push(title + ' :: ' + a.t);
      });
      var centres = Array.from(p.querySelectorAll('.scatterlayer .point')).map(function(e){
        var r = e.getBoundingClientRect(); return {x: (r.left + r.right) / 2, y: (r.top + r.bottom) / 2}; });
      p.querySelectorAll('.annotation-text').forEach(function(t){
        var r = t.getBoundingClientRect();
        if (centres.some(function(c){ return c.x > r.left && c.x < r.right && c.y > r.top && c.y < r.bottom; }))
          found.covered.push(title + ' :: ' + t.textContent.trim());
      });
      for (var i = 0; i < texts.length; i++) for (var j = i + 1; j < texts.length; j++) {
        if (texts[i].turned || texts[j].turned) continue;
        var a = texts[i].r, b = texts[j].r;
        var w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
        var h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
        if (w > 2 && h > 2 && w * h > 0.2 * Math.min(a.width * a.height, b.width * b.height))
          found.overlapping.push(title + ' :: ' + texts[i].t + ' / ' + texts[j].t);
      }
    });
    done(JSON.stringify(found));
  }, 400);
})"""


def first_findings(page: str) -> list[str]:
    """The findings a page shows first (its first findings block), as text: what its picture in docs/img shows."""
    import html

    block = re.search(r'<div class="findings">(.*?)</div>', page, re.S)
    items = re.findall(r"<li>(.*?)</li>", block.group(1), re.S) if block else []
    return [" ".join(html.unescape(re.sub(r"<[^>]+>", "", item)).replace(" evidence", "").split()) for item in items]


class DevTools:
    """One page target of a running Chromium: commands by id, events collected (script errors)."""

    def __init__(self, socket):
        self.socket, self.next_id, self.errors = socket, 0, []

    async def call(self, method: str, **params) -> dict:
        self.next_id += 1
        await self.socket.send_json({"id": self.next_id, "method": method, "params": params})
        async for message in self.socket:
            data = json.loads(message.data)
            if data.get("method") == "Runtime.exceptionThrown":
                self.errors.append(data["params"]["exceptionDetails"].get("exception", {}).get("description", "?"))
            elif data.get("method") == "Runtime.consoleAPICalled" and data["params"]["type"] == "error":
                self.errors.append(" ".join(str(a.get("value", "")) for a in data["params"]["args"]))
            if data.get("id") == self.next_id:
                return data.get("result", {})
        raise RuntimeError("Chromium closed the DevTools connection")


async def _visit(pages: list[Path], shots: Path, width: int, height: int, port: str) -> dict[str, dict]:
    import aiohttp

    url = f"http://127.0.0.1:{port}/json/new?about:blank"
    found = {}
    async with aiohttp.ClientSession() as session:
        for page in pages:
            async with session.put(url) as response:
                target = await response.json()
            async with session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as socket:
                tools = DevTools(socket)
                await tools.call("Runtime.enable")
                await tools.call("Page.enable")
                await tools.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                                 deviceScaleFactor=1, mobile=False)
                await tools.call("Page.navigate", url=page.as_uri())
                await _loaded(tools)
                shot = await tools.call("Page.captureScreenshot", format="png")
                (shots / f"{page.stem}.png").write_bytes(base64.b64decode(shot["data"]))
                result = await tools.call("Runtime.evaluate", expression=CHECK, awaitPromise=True)
                found[page.name] = {**json.loads(result["result"]["value"]), "errors": tools.errors}
            async with session.get(f"http://127.0.0.1:{port}/json/close/{target['id']}"):
                pass
    return found


async def _loaded(tools: DevTools) -> None:
    """Until the page's load event and its charts' drawing (plotly draws after the scripts run)."""
    for _ in range(200):
        state = await tools.call("Runtime.evaluate", expression="document.readyState")
        if state["result"]["value"] == "complete":
            await asyncio.sleep(0.3)
            return
        await asyncio.sleep(0.05)


def visit(pages: list[Path], shots: Path, width: int = 1280, height: int = 800) -> dict[str, dict]:
    """Open each page in one headless Chromium at `width` x `height`: a PNG of its first screen in `shots`
    (named for the page) and, per page name, what `CHECK` measured plus the script errors."""
    shots.mkdir(parents=True, exist_ok=True)
    # Chromium's helper processes may still write the profile as the browser ends: a leftover is no failure
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        browser = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            for line in browser.stderr:  # "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/..."
                port = re.search(r"ws://127\.0\.0\.1:(\d+)/", line)
                if port:
                    break
            else:
                raise RuntimeError("Chromium did not open its DevTools port")
            return asyncio.run(_visit(pages, shots, width, height, port.group(1)))
        finally:
            browser.terminate()
            browser.wait(timeout=30)
