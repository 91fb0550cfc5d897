"""The report's interactive timeline in a real headless Chromium (DevTools pipe, as
tests/test_report_browser.py): real mouse events, not calls into the page's code.

- hovering a kernel shows its tooltip: the name (one of `nsys stats`'s kernel
  names), its duration, its stream;
- the mouse wheel zooms: the visible time range shrinks around the cursor;
  dragging pans it; the Reset button brings the whole window back;
- no console error, exception or CSP violation while doing so.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from profkit.report import write_report
from tests.conftest import nsys_fixture
from tests.test_report_browser import BROWSER, TIMEOUT_S, DevTools
from tests.test_summaries import read_oracle

pytestmark = pytest.mark.skipif(BROWSER is None, reason="no Chromium binary found")

# Where the longest operation of the window is drawn, in viewport pixels, from the
# page's data and the layout the timeline publishes on its root element.
TARGET = """(() => {
  const root = document.getElementById('tl');
  root.scrollIntoView();
  const d = JSON.parse(document.getElementById('tl-data').textContent);
  const box = root.querySelector('canvas.tl-main').getBoundingClientRect();
  const n = d.duration.length;
  let at = 0, best = -1, bestStart = 0;
  for (let i = 0; i < n; i++) {
    at += d.start_delta[i];  // the longest kernel of the middle half (by order), not one at an edge
    if (d.kind[i] === 0 && i >= n / 4 && i <= 3 * n / 4 && (best < 0 || d.duration[i] > d.duration[best])) {
      best = i; bestStart = at;
    }
  }
  const t0 = +root.dataset.viewStart, t1 = +root.dataset.viewEnd, label = +root.dataset.labelWidth;
  const rowH = +root.dataset.rowHeight, mid = bestStart + d.duration[best] / 2;
  // whole pixels: a mouse event's clientX is an integer, and the zoom keeps the time under it
  const x = Math.round(box.left + label + (mid - t0) / (t1 - t0) * (box.width - label));
  return JSON.stringify({
    x: x, y: Math.round(box.top + (+root.dataset.rowTop) + d.row[best] * rowH + rowH / 2),
    name: d.names[d.name[best]], duration: d.duration[best], row: d.rows[d.row[best]],
    mid: t0 + (x - box.left - label) / (box.width - label) * (t1 - t0),
    start: bestStart, end: bestStart + d.duration[best], left: box.left, width: box.width, label: label});
})()"""
TIP = """JSON.stringify({hidden: document.querySelector('#tl .tl-tip').hidden,
                     lines: Array.from(document.querySelector('#tl .tl-tip').children).map(e => e.textContent)})"""
VIEW = "JSON.stringify([+document.getElementById('tl').dataset.viewStart, +document.getElementById('tl').dataset.viewEnd])"


class Page:
    def __init__(self, tools: DevTools, session: str) -> None:
        self.tools, self.session = tools, session

    def eval(self, expression: str):  # noqa: ANN201
        result = self.tools.send("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                                 session=self.session)
        assert "exceptionDetails" not in result, result
        value = result["result"].get("value")
        return json.loads(value) if isinstance(value, str) and value[:1] in "[{" else value

    def mouse(self, kind: str, x: float, y: float, **extra) -> None:  # noqa: ANN003
        self.tools.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, **extra}, session=self.session)

    def errors(self) -> list[str]:
        self.eval("1")  # flush what arrived with the answers
        found = []
        for event in self.tools.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(f"console.{params['type']}: {params.get('args')}")
            elif method == "Runtime.exceptionThrown":
                found.append(f"exception: {params.get('exceptionDetails')}")
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") in ("error", "warning"):
                found.append(f"log: {params['entry'].get('text')}")
        return found


def open_page(tools: DevTools, html: Path) -> Page:
    target = tools.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = tools.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Runtime", "Log", "Page"):
        tools.send(f"{domain}.enable", session=session)
    tools.send("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": 900, "deviceScaleFactor": 1,
                                                       "mobile": False}, session=session)
    page = Page(tools, session)
    url = html.resolve().as_uri()
    tools.send("Page.navigate", {"url": url}, session=session)
    ready = (f"location.href === {json.dumps(url)} && document.readyState === 'complete' && "
             "!!document.getElementById('tl') && !!document.getElementById('tl').dataset.viewStart")
    deadline = time.monotonic() + TIMEOUT_S
    while not page.eval(ready):
        assert time.monotonic() < deadline, f"{url}: the timeline never drew; errors: {page.errors()}"
        time.sleep(0.05)
    return page


@pytest.mark.parametrize("fixture", ["nsys2025_train_print", pytest.param("nsys2023_nvtx", marks=pytest.mark.slow)])
def test_timeline_hover_zoom_pan_without_errors(fixture: str, tmp_path: Path) -> None:
    assert BROWSER is not None
    paths = write_report(nsys_fixture(fixture), tmp_path / "out")
    kernel_names = {r["Name"] for r in read_oracle(fixture, "cuda_gpu_kern_sum")}
    tools = DevTools(BROWSER, tmp_path / "profile")
    try:
        page = open_page(tools, paths.html)
        target = page.eval(TARGET)
        assert target["name"] in kernel_names

        # zoom in with the wheel, at the kernel: each step a narrower range that still holds it,
        # until the kernel is wide enough to point at
        t0, t1 = page.eval(VIEW)
        for _ in range(40):
            before = page.eval(VIEW)
            page.mouse("mouseWheel", target["x"], target["y"], deltaX=0, deltaY=-400)
            z0, z1 = page.eval(VIEW)
            assert z1 - z0 < 0.8 * (before[1] - before[0]), (before, (z0, z1))
            assert z0 <= target["mid"] <= z1  # the time under the cursor stays in view
            target = page.eval(TARGET)
            if target["duration"] / (z1 - z0) * (target["width"] - target["label"]) >= 12:
                break
        else:
            pytest.fail("zooming never made the kernel 12 pixels wide")

        # hover: the tooltip names the kernel, its stream, its duration
        page.mouse("mouseMoved", target["x"], target["y"])
        tip = page.eval(TIP)
        assert not tip["hidden"], tip
        assert tip["lines"][0] == target["name"]
        assert target["row"] in tip["lines"]
        assert any(line.startswith("kernel, ") for line in tip["lines"])
        page.mouse("mouseMoved", target["left"] + 2, target["y"])  # over the row labels: no tooltip
        assert page.eval(TIP)["hidden"]

        # drag to the left: later times come into view, the span stays
        page.mouse("mousePressed", target["x"], target["y"], button="left", clickCount=1)
        page.mouse("mouseMoved", target["x"] - 300, target["y"], button="left")
        page.mouse("mouseReleased", target["x"] - 300, target["y"], button="left", clickCount=1)
        p0, p1 = page.eval(VIEW)
        assert p0 > z0 and abs((p1 - p0) - (z1 - z0)) <= 1e-6 * (z1 - z0) + 1, ((z0, z1), (p0, p1))

        # the Reset button: the whole detailed window again
        page.eval("document.querySelector('#tl button[data-zoom=reset]').click()")
        assert page.eval(VIEW) == [t0, t1]
        assert page.errors() == []
    finally:
        tools.close()
