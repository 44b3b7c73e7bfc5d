"""Headless-Chromium harness: looks at a static HTML page as a person would.

Starts Debian's /usr/bin/chromium itself and drives it over the Chrome DevTools Protocol (CDP) with
`websocket-client`: no chromedriver, no Selenium Manager, nothing that downloads. Use it as

    with Browser() as b:
        b.open(path)                 # file path or file:// URL; waits for load and image decoding
        b.errors()                   # console.error, uncaught exceptions, Log errors
        b.plots()                    # figure.plot boxes, img naturalWidth
        b.recommendations()          # table#recommendations cells
        b.select_filter("filter-model", "resnet18")  # -> data-* elements with a visible flag
        b.screenshot(tmp_path / "page.png")

or the one-shot `inspect_page(path)`. The browser is always killed (whole process group), and every
wait has a deadline, so a broken page fails a test instead of hanging it.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import websocket

CHROMIUM = "/usr/bin/chromium"
APT_INSTALL = "apt-get update && apt-get install -y chromium"

# Flags: headless as root (no sandbox), and nothing that reaches for the network (closed here and on CI).
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--disable-breakpad",
    "--mute-audio",
    "--hide-scrollbars",  # screenshots without a scrollbar strip
)


def chromium_missing_reason(chromium: str = CHROMIUM) -> str | None:
    """None when Chromium can be started, else why not (for pytest.skip)."""
    if not os.access(chromium, os.X_OK):
        return f"{chromium} is absent: install it with `{APT_INSTALL}`"
    return None


class BrowserError(RuntimeError):
    """Chromium did not start, a CDP call failed, or a wait ran past its deadline."""


@dataclass(frozen=True)
class ConsoleMessage:
    """One console/log/exception message. source: 'console', 'exception' or 'log'."""

    source: str
    level: str
    text: str
    url: str = ""
    line: int | None = None  # 1-based

    def __str__(self) -> str:
        where = f" ({self.url}:{self.line})" if self.url else ""
        return f"[{self.source}:{self.level}] {self.text}{where}"


@dataclass(frozen=True)
class Plot:
    """One `figure.plot`: what it claims (kind, model) and what was rendered.

    tag is 'img', 'svg' or None (the figure holds neither); width/height are the rendered CSS box;
    natural_width/height are the decoded image's pixels (0 for a broken image, None for svg).
    """

    kind: str | None
    model: str | None
    tag: str | None
    width: float
    height: float
    natural_width: int | None
    natural_height: int | None
    src_prefix: str  # first 40 characters of img src ('' for svg): to check it is a data: URI
    visible: bool


@dataclass(frozen=True)
class Recommendation:
    """One `table#recommendations` row's technique cell."""

    model: str | None
    device: str | None
    technique: str  # the cell's rendered text (innerText, whitespace collapsed)
    data_technique: str | None  # the cell's (or row's) data-technique attribute, if any
    visible: bool


@dataclass(frozen=True)
class Element:
    """An element with data-model/data-device/data-family, after a filter choice."""

    tag: str
    data: dict[str, str]  # all its data-* attributes, without the 'data-' prefix
    visible: bool


@dataclass
class PageReport:
    """What `inspect_page` saw."""

    url: str
    messages: list[ConsoleMessage]
    errors: list[ConsoleMessage]
    plots: list[Plot]
    recommendations: list[Recommendation]
    title: str
    screenshot: Path | None = None


# Runs in the page: a plain object out, so returnByValue carries it back.
_PLOTS_JS = """
(() => [...document.querySelectorAll('figure.plot')].map(fig => {
  const el = fig.querySelector('img, svg');
  const box = el ? el.getBoundingClientRect() : {width: 0, height: 0};
  const isImg = el && el.tagName.toLowerCase() === 'img';
  return {
    kind: fig.getAttribute('data-plot'),
    model: fig.getAttribute('data-model'),
    tag: el ? el.tagName.toLowerCase() : null,
    width: box.width, height: box.height,
    natural_width: isImg ? el.naturalWidth : null,
    natural_height: isImg ? el.naturalHeight : null,
    src_prefix: isImg ? (el.getAttribute('src') || '').slice(0, 40) : '',
    visible: el ? el.getClientRects().length > 0 : fig.getClientRects().length > 0,
  };
}))()
"""

_RECOMMENDATIONS_JS = """
(() => [...document.querySelectorAll('table#recommendations tr')].flatMap(tr => {
  const td = tr.querySelector('td.technique');
  if (!td) return [];
  const dt = td.hasAttribute('data-technique') ? td.getAttribute('data-technique')
           : tr.getAttribute('data-technique');
  return [{
    model: tr.getAttribute('data-model'), device: tr.getAttribute('data-device'),
    technique: (td.innerText || td.textContent || '').replace(/\\s+/g, ' ').trim(),
    data_technique: dt, visible: td.getClientRects().length > 0,
  }];
}))()
"""

# Elements that a filter may hide; <option>s are skipped (a closed select's options have no box).
_FILTERABLE_JS = """
(() => [...document.querySelectorAll('[data-model], [data-device], [data-family]')]
  .filter(el => el.tagName.toLowerCase() !== 'option')
  .map(el => ({
    tag: el.tagName.toLowerCase(),
    data: Object.fromEntries(Object.entries(el.dataset)),
    visible: el.getClientRects().length > 0 && getComputedStyle(el).visibility !== 'hidden',
  })))()
"""

# Set the select as a person would, fire the events the page's script may listen to, then let two
# frames (or 100 ms, whichever first: rAF may be throttled) pass so the page can re-render.
_SELECT_JS = """
(async (id, value) => {
  const sel = document.getElementById(id);
  if (!sel || sel.tagName.toLowerCase() !== 'select') return {error: 'no <select id="' + id + '">'};
  const values = [...sel.options].map(o => o.value);
  if (!values.includes(value)) return {error: 'no option ' + JSON.stringify(value), options: values};
  sel.focus();
  sel.value = value;
  sel.dispatchEvent(new Event('input', {bubbles: true}));
  sel.dispatchEvent(new Event('change', {bubbles: true}));
  await Promise.race([
    new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r))),
    new Promise(r => setTimeout(r, 100)),
  ]);
  return {ok: true};
})
"""

# After the load event: wait until every image has settled (decoded or failed) and fonts are ready.
_SETTLE_JS = """
(async () => {
  await Promise.all([...document.images].map(img => img.decode().catch(() => null)));
  if (document.fonts) await document.fonts.ready;
  return document.readyState;
})()
"""


class Browser:
    """A headless Chromium with one page, driven over CDP. Use as a context manager."""

    def __init__(
        self,
        *,
        timeout: float = 30.0,
        window: tuple[int, int] = (1280, 1024),
        chromium: str = CHROMIUM,
    ) -> None:
        self.timeout = timeout
        self.window = window
        self.chromium = chromium
        self.messages: list[ConsoleMessage] = []
        self.url = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._profile: str | None = None
        self._ws: websocket.WebSocket | None = None
        self._ids = itertools.count(1)
        self._events: list[dict[str, Any]] = []

    # --- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> Browser:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self) -> None:
        reason = chromium_missing_reason(self.chromium)
        if reason:
            raise BrowserError(reason)
        # A fresh empty profile each time: no state between tests, parallel runs do not collide.
        self._profile = tempfile.mkdtemp(prefix="optbench-chromium-")
        log_path = Path(self._profile) / "chromium-stderr.log"
        args = [
            self.chromium,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={self._profile}",
            f"--window-size={self.window[0]},{self.window[1]}",
            "--remote-debugging-port=0",  # any free port; Chromium writes it to DevToolsActivePort
            "about:blank",
        ]
        # stderr to a file, not a pipe: a pipe nobody drains can fill up and stall Chromium.
        with open(log_path, "wb") as log:
            self._proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # own process group, so close() can kill every child
            )
        port_file = Path(self._profile) / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout
        while True:
            if self._proc.poll() is not None:
                raise BrowserError(f"chromium exited with {self._proc.returncode}: {self._stderr_tail()}")
            lines = port_file.read_text().split("\n") if port_file.exists() else []
            if len(lines) >= 2 and lines[0].strip().isdigit() and lines[1].strip():
                port, browser_path = int(lines[0]), lines[1].strip()
                break
            if time.monotonic() > deadline:
                raise BrowserError(f"no DevToolsActivePort after {self.timeout}s: {self._stderr_tail()}")
            time.sleep(0.05)
        # Ask the browser endpoint for a fresh page target, then talk to that page directly.
        browser_ws = self._connect(f"ws://127.0.0.1:{port}{browser_path}")
        try:
            target = self._call(browser_ws, "Target.createTarget", {"url": "about:blank"})["targetId"]
        finally:
            browser_ws.close()
        self._ws = self._connect(f"ws://127.0.0.1:{port}/devtools/page/{target}")
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": self.window[0], "height": self.window[1], "deviceScaleFactor": 1, "mobile": False},
        )

    def close(self) -> None:
        """Kill Chromium and remove its profile; safe to call twice or after a failed start."""
        if self._ws is not None:
            try:
                self._ws.close(timeout=1)
            except Exception:
                pass  # the browser may already be gone; killing it below is what matters
            self._ws = None
        if self._proc is not None:
            if self._proc.poll() is None:
                try:
                    os.killpg(self._proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
            self._proc = None
        if self._profile is not None:
            shutil.rmtree(self._profile, ignore_errors=True)
            self._profile = None

    # --- CDP -------------------------------------------------------------------------------------

    def _connect(self, url: str) -> websocket.WebSocket:
        # suppress_origin: Chromium refuses websocket clients that send an Origin it was not told to
        # allow; no_proxy: never route loopback through an http_proxy from the environment.
        return websocket.create_connection(
            url, timeout=self.timeout, suppress_origin=True, http_no_proxy=["127.0.0.1"]
        )

    def _call(self, ws: websocket.WebSocket, method: str, params: dict[str, Any] | None = None) -> Any:
        msg_id = next(self._ids)
        ws.send(json.dumps({"id": msg_id, "method": method, "params": params or {}}))
        deadline = time.monotonic() + self.timeout
        while True:
            msg = self._recv(ws, deadline, method)
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise BrowserError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self._on_event(msg)

    def _recv(self, ws: websocket.WebSocket, deadline: float, waiting_for: str) -> dict[str, Any]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise BrowserError(f"timed out after {self.timeout}s waiting for {waiting_for}")
        ws.settimeout(left)
        try:
            return json.loads(ws.recv())
        except websocket.WebSocketTimeoutException as e:
            raise BrowserError(f"timed out after {self.timeout}s waiting for {waiting_for}") from e
        except (websocket.WebSocketConnectionClosedException, ConnectionError) as e:
            raise BrowserError(f"lost chromium waiting for {waiting_for}: {self._stderr_tail()}") from e

    def send(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """One CDP command on the page; returns its result. Events seen meanwhile are recorded."""
        if self._ws is None:
            raise BrowserError("browser not started")
        return self._call(self._ws, method, params)

    def _on_event(self, msg: dict[str, Any]) -> None:
        method, params = msg["method"], msg.get("params", {})
        if method == "Runtime.consoleAPICalled":
            text = " ".join(_remote_text(a) for a in params.get("args", []))
            frame = ((params.get("stackTrace") or {}).get("callFrames") or [{}])[0]
            self.messages.append(
                ConsoleMessage("console", params.get("type", ""), text, frame.get("url", ""), _line(frame))
            )
        elif method == "Runtime.exceptionThrown":
            d = params.get("exceptionDetails", {})
            exc = d.get("exception") or {}
            text = exc.get("description") or d.get("text", "")
            self.messages.append(ConsoleMessage("exception", "error", text, d.get("url", ""), _line(d)))
        elif method == "Log.entryAdded":
            e = params.get("entry", {})
            self.messages.append(
                ConsoleMessage("log", e.get("level", ""), e.get("text", ""), e.get("url", ""), _line(e))
            )
        self._events.append(msg)

    def _wait_event(self, method: str) -> dict[str, Any]:
        for i, ev in enumerate(self._events):
            if ev["method"] == method:
                return self._events.pop(i)
        if self._ws is None:
            raise BrowserError("browser not started")
        deadline = time.monotonic() + self.timeout
        while True:
            msg = self._recv(self._ws, deadline, method)
            if "method" in msg:
                self._on_event(msg)
                if msg["method"] == method:
                    self._events.remove(msg)
                    return msg

    def evaluate(self, expression: str, *, await_promise: bool = True) -> Any:
        """Evaluate JS in the page and return its value (JSON-able). A thrown error raises BrowserError."""
        res = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": await_promise},
        )
        if "exceptionDetails" in res:
            d = res["exceptionDetails"]
            raise BrowserError(f"JS error: {(d.get('exception') or {}).get('description') or d.get('text')}")
        return res.get("result", {}).get("value")

    # --- looking at the page ---------------------------------------------------------------------

    def open(self, page: str | os.PathLike[str]) -> None:
        """Load a file path or URL, wait for the load event and for every image to settle.

        Messages from a previous page are dropped, so errors() is about this page only.
        """
        url = str(page)
        if "://" not in url:
            url = Path(url).resolve().as_uri()
        self.messages.clear()
        self._events.clear()
        res = self.send("Page.navigate", {"url": url})
        if res.get("errorText"):
            raise BrowserError(f"cannot load {url}: {res['errorText']}")
        self._wait_event("Page.loadEventFired")
        self.evaluate(_SETTLE_JS)
        self.url = url

    def errors(self) -> list[ConsoleMessage]:
        """console.error/assert, uncaught exceptions, and Log errors (e.g. a resource that failed)."""
        self._drain()
        return [
            m
            for m in self.messages
            if m.source == "exception"
            or (m.source == "console" and m.level in ("error", "assert"))
            or (m.source == "log" and m.level == "error")
        ]

    def _drain(self) -> None:
        # Events arrive asynchronously; a no-op round trip collects those already sent.
        self.evaluate("0", await_promise=False)

    def plots(self) -> list[Plot]:
        return [Plot(**p) for p in self.evaluate(_PLOTS_JS)]

    def recommendations(self) -> list[Recommendation]:
        return [Recommendation(**r) for r in self.evaluate(_RECOMMENDATIONS_JS)]

    def filterable(self) -> list[Element]:
        """Every non-<option> element with data-model/data-device/data-family, with its visibility."""
        return [Element(**e) for e in self.evaluate(_FILTERABLE_JS)]

    def select_filter(self, select_id: str, value: str) -> list[Element]:
        """Choose `value` in `<select id=select_id>` (firing input+change), then return filterable().

        Raises BrowserError when the select or the option is missing (lists the options).
        """
        res = self.evaluate(f"({_SELECT_JS})({json.dumps(select_id)}, {json.dumps(value)})")
        if res.get("error"):
            raise BrowserError(f"{res['error']} (options: {res.get('options')})")
        return self.filterable()

    def title(self) -> str:
        return str(self.evaluate("document.title"))

    def screenshot(self, path: str | os.PathLike[str], *, full_page: bool = True) -> Path:
        """Save a PNG of the whole page (or just the viewport) to path; returns the path."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            m = self.send("Page.getLayoutMetrics")
            size = m.get("cssContentSize") or m["contentSize"]
            # Capped: a runaway page must not make a gigapixel PNG.
            width = min(max(int(size["width"]), 1), 4096)
            height = min(max(int(size["height"]), 1), 16384)
            params.update(
                captureBeyondViewport=True,
                clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
            )
        data = self.send("Page.captureScreenshot", params)["data"]
        out = Path(path)
        out.write_bytes(base64.b64decode(data))
        return out

    def _stderr_tail(self) -> str:
        if self._profile is None:
            return ""
        log = Path(self._profile) / "chromium-stderr.log"
        try:
            return log.read_text(errors="replace")[-2000:]
        except OSError:
            return ""


def _remote_text(arg: dict[str, Any]) -> str:
    """A console argument as a person would read it in DevTools."""
    if "value" in arg:
        return str(arg["value"])
    return str(arg.get("description") or arg.get("unserializableValue") or arg.get("type", ""))


def _line(d: dict[str, Any]) -> int | None:
    """CDP line numbers are 0-based; people (and editors) count from 1."""
    n = d.get("lineNumber")
    return n + 1 if isinstance(n, int) else None


def inspect_page(
    page: str | os.PathLike[str],
    *,
    screenshot: str | os.PathLike[str] | None = None,
    timeout: float = 30.0,
    window: tuple[int, int] = (1280, 1024),
) -> PageReport:
    """Open one page in a fresh browser and report what it shows; the browser is gone on return."""
    with Browser(timeout=timeout, window=window) as b:
        b.open(page)
        shot = b.screenshot(screenshot) if screenshot is not None else None
        errors = b.errors()
        return PageReport(
            url=b.url,
            messages=list(b.messages),
            errors=errors,
            plots=b.plots(),
            recommendations=b.recommendations(),
            title=b.title(),
            screenshot=shot,
        )
