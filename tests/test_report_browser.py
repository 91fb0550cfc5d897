"""report.html in a real headless Chromium, driven over the DevTools protocol.

Chromium runs with ``--remote-debugging-pipe``: DevTools messages are
NUL-terminated JSON on file descriptors 3 (to the browser) and 4 (from it),
so no websocket client is needed.  The test collects every console message,
uncaught exception and browser log entry (CSP violations, failed loads) and
asserts that none is an error, that the page shows its title and the kernel
table's rows, that every figure decoded (naturalWidth > 0), and that a
``<script>`` in NVTX text stayed text.

Skipped only when no Chromium binary is installed (CI installs Debian's
``chromium``).
"""

from __future__ import annotations

import gzip
import json
import os
import select
import shutil
import signal
import tempfile
import time
from pathlib import Path

import pytest

from profkit.analysis.kernels.summaries import kernel_summary
from profkit.readers import open_trace
from profkit.report import write_report
from tests.conftest import DATA, nsys_fixture

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
TIMEOUT_S = 60.0


def find_browser() -> str | None:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


BROWSER = find_browser()
pytestmark = pytest.mark.skipif(BROWSER is None, reason=f"no Chromium binary found (looked for {', '.join(BROWSERS)})")


def _high_fd(fd: int) -> int:
    import fcntl

    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


class DevTools:
    """A minimal DevTools client over Chromium's --remote-debugging-pipe."""

    def __init__(self, browser: str, profile: Path) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # The browser's ends move above 9, so that putting them on 3 and 4 cannot clobber one another.
        to_browser_r, from_browser_w = _high_fd(to_browser_r), _high_fd(from_browser_w)
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the browser
        args = [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
                "--remote-debugging-pipe", f"--user-data-dir={profile}", "about:blank"]
        self.pid = os.posix_spawn(browser, args, os.environ, file_actions=[
            (os.POSIX_SPAWN_DUP2, to_browser_r, 3),
            (os.POSIX_SPAWN_DUP2, from_browser_w, 4),
            (os.POSIX_SPAWN_DUP2, self._stderr.fileno(), 2),
        ])
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []

    def stderr_tail(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-2000:]

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (OSError, TimeoutError, RuntimeError):
            pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if os.waitpid(self.pid, os.WNOHANG) != (0, 0):
                break
            time.sleep(0.05)
        else:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self._to_browser)
        os.close(self._from_browser)
        self._stderr.close()

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer from Chromium")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                chunk = os.read(self._from_browser, 1 << 16)
                if not chunk:
                    raise RuntimeError(f"Chromium closed the DevTools pipe: {self.stderr_tail()}")
                self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next_id += 1
        message: dict = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)



# Runs in the page: what a reader would see.
PAGE_STATE = """JSON.stringify({
  title: document.title,
  h1: (document.querySelector('h1') || {}).textContent || '',
  kernelRows: Array.from(document.querySelectorAll('#table-kernels tbody tr'))
                   .map(tr => Array.from(tr.cells).map(td => td.textContent)),
  images: Array.from(document.images).map(img => ({complete: img.complete, width: img.naturalWidth,
                                                    alt: img.alt})),
  scripts: Array.from(document.scripts).map(s => s.type || s.id || 'script'),
  text: document.body.innerText,
})"""


def open_in_chromium(html: Path, tmp_path: Path) -> tuple[dict, list[str]]:
    """The page state after load, and every error Chromium reported."""
    assert BROWSER is not None
    tools = DevTools(BROWSER, tmp_path / "profile")
    try:
        target = tools.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = tools.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            tools.send(f"{domain}.enable", session=session)
        url = html.resolve().as_uri()
        tools.send("Page.navigate", {"url": url}, session=session)
        # about:blank may fire a load event of its own: wait until the report itself has loaded.
        loaded = f"location.href === {json.dumps(url)} && document.readyState === 'complete'"
        deadline = time.monotonic() + TIMEOUT_S
        while not tools.send("Runtime.evaluate", {"expression": loaded, "returnByValue": True},
                             session=session)["result"].get("value"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not load")
            time.sleep(0.05)
        result = tools.send("Runtime.evaluate", {"expression": PAGE_STATE, "returnByValue": True},
                            session=session)
        state = json.loads(result["result"]["value"])
        # Anything logged until now, including what arrived with the answers.
        tools.send("Runtime.evaluate", {"expression": "1"}, session=session)
        errors = []
        for event in tools.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                errors.append(f"console.{params['type']}: {params.get('args')}")
            elif method == "Runtime.exceptionThrown":
                errors.append(f"exception: {params.get('exceptionDetails')}")
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                errors.append(f"log: {params['entry'].get('text')}")
            elif method == "Page.javascriptDialogOpening":
                errors.append(f"dialog: {params.get('message')}")
        return state, errors
    finally:
        tools.close()


@pytest.mark.parametrize("fixture", ["nsys2025_nvtx", pytest.param("nsys2023_nvtx", marks=pytest.mark.slow),
                                     pytest.param("nsys2025_train_print", marks=pytest.mark.slow)])
def test_report_renders_in_chromium_without_errors(fixture: str, tmp_path: Path) -> None:
    export = nsys_fixture(fixture)
    paths = write_report(export, tmp_path / "out")
    state, errors = open_in_chromium(paths.html, tmp_path)

    assert errors == []
    assert state["title"] == f"profkit report: {export.name}"
    assert state["h1"] == state["title"]
    with open_trace(export) as trace:
        kernels = kernel_summary(trace)
    shown = kernels[:20] if len(kernels) <= 21 else kernels[:20] + [{"name": f"(other {len(kernels) - 20})"}]
    assert len(state["kernelRows"]) == len(shown)
    for cells, row in zip(state["kernelRows"], shown):
        assert cells[-1] == row["name"]  # the name column, as text
    figures = [f for section in json.loads(paths.json.read_text())["sections"].values() for f in section["figures"]]
    assert len(state["images"]) == len(figures) >= 2  # timeline, utilization (+ zoom)
    for image in state["images"]:
        assert image["complete"] and image["width"] > 0, image
    # no script element but the interactive timeline's data block and code: NVTX text
    # like <script>alert(1)</script> is text (the CSP admits only the timeline's code, by hash)
    assert state["scripts"] == ["application/json", "script"]
    if fixture.endswith("_nvtx"):
        assert "<script>alert(1)</script>" in state["text"]


KINETO = sorted((DATA / "kineto").rglob("*.json.gz")) if (DATA / "kineto").is_dir() else []


@pytest.mark.slow  # a second Chromium run (~5 s); the nsys report renders by default
@pytest.mark.skipif(not KINETO, reason="no Kineto fixtures in tests/data/kineto yet")
def test_kineto_report_renders_in_chromium_without_errors(tmp_path: Path) -> None:
    """A PyTorch profiler trace's report: the same page, no console error, every figure drawn.
    The kernel table's rows are the trace's kernel names (from the raw JSON), busiest first."""
    trace = next((p for p in KINETO if p.name.startswith("gpt_eager")), KINETO[0])
    paths = write_report(trace, tmp_path / "out")
    state, errors = open_in_chromium(paths.html, tmp_path)

    assert errors == []
    assert state["title"] == f"profkit report: {trace.name}" == state["h1"]
    with gzip.open(trace, "rt") as fh:
        names = {e["name"] for e in json.load(fh)["traceEvents"] if e.get("cat") == "kernel"}
    assert len(state["kernelRows"]) == (len(names) if len(names) <= 21 else 21)
    assert {cells[-1] for cells in state["kernelRows"]} - {f"(other {len(names) - 20})"} <= names
    figures = [f for section in json.loads(paths.json.read_text())["sections"].values() for f in section["figures"]]
    assert len(state["images"]) == len(figures) >= 2
    for image in state["images"]:
        assert image["complete"] and image["width"] > 0, image


def test_devtools_client_sees_console_errors(tmp_path: Path) -> None:
    """The error collection itself works: a page that logs an error, throws, and breaks CSP is caught."""
    page = tmp_path / "bad.html"
    page.write_text(
        "<!DOCTYPE html><html><head><title>bad</title>"
        "<meta http-equiv=\"Content-Security-Policy\" content=\"img-src 'none'\"></head><body>"
        "<img src=\"data:image/png;base64,iVBORw0KGgo=\">"
        "<script>console.error('boom'); setTimeout(() => { throw new Error('thrown'); });</script>"
        "</body></html>")
    state, errors = open_in_chromium(page, tmp_path)
    assert state["title"] == "bad"
    assert any("boom" in e for e in errors), errors
    assert any("Content Security Policy" in e or "Refused" in e for e in errors), errors
    assert state["images"][0]["width"] == 0
