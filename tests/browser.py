"""Headless Chromium for the report's browser checks, driven by Playwright.

Playwright's driver ships in its wheel and the browser is Debian's /usr/bin/chromium, so nothing is
downloaded (never `playwright install`). `with Browser() as b: b.open(path)`, then look with b.errors(),
b.plots(), b.recommendations(), b.select_filter(id, value) and b.screenshot(path). Every wait has a
deadline (Playwright's TimeoutError), so a broken page fails a test instead of hanging it.
"""

from __future__ import annotations

import atexit
import os
import re
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from playwright.sync_api import ConsoleMessage as PlaywrightConsoleMessage
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Playwright, sync_playwright

CHROMIUM = "/usr/bin/chromium"
APT_INSTALL = "apt-get update && apt-get install -y chromium"
# Headless as root (no sandbox), and nothing that reaches for the network (closed here and on CI).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip

# Each runs in the page on the elements found and returns plain objects (the fields are as in the JS).
_PLOTS_JS = """figs => figs.map(fig => {
  const el = fig.querySelector('img, svg'), img = el?.tagName === 'IMG';
  const box = el ? el.getBoundingClientRect() : {width: 0, height: 0};
  return {kind: fig.getAttribute('data-plot'), model: fig.getAttribute('data-model'),
    tag: el ? el.tagName.toLowerCase() : null, width: box.width, height: box.height,
    natural_width: img ? el.naturalWidth : null, natural_height: img ? el.naturalHeight : null,
    src_prefix: img ? (el.getAttribute('src') || '').slice(0, 40) : '',
    visible: (el || fig).getClientRects().length > 0};
})"""
_RECOMMENDATIONS_JS = """rows => rows.map(tr => {
  const td = tr.querySelector('td.technique');
  return {model: tr.getAttribute('data-model'), device: tr.getAttribute('data-device'),
    technique: (td.innerText || td.textContent).replace(/\\s+/g, ' ').trim(),
    data_technique: td.getAttribute('data-technique') ?? tr.getAttribute('data-technique'),
    visible: td.getClientRects().length > 0};
})"""
_FILTERABLE_JS = """els => els.map(el => ({tag: el.tagName.toLowerCase(), data: {...el.dataset},
  visible: el.getClientRects().length > 0 && getComputedStyle(el).visibility !== 'hidden'}))"""
# A failed decode must not reject: a broken image is something plots() reports, not an error here.
_SETTLE_JS = "Promise.all([...document.images].map(i => i.decode().catch(() => null)))"


_driver: Playwright | None = None


def _playwright() -> Playwright:
    # One driver per process, shared: the sync API refuses a second one in a thread while one runs
    # (a module's browser fixture and a test's own Browser at once); each Browser has its own Chromium.
    global _driver
    if _driver is None:
        _driver = sync_playwright().start()
        atexit.register(_driver.stop)
    return _driver


def chromium_missing_reason(chromium: str = CHROMIUM) -> str | None:
    """None when Chromium can be started, else why not (for pytest.skip)."""
    return None if os.access(chromium, os.X_OK) else f"{chromium} is absent: install it with `{APT_INSTALL}`"


class BrowserError(RuntimeError):
    """Chromium is missing, or the page lacks the filter or option asked for."""


@dataclass(frozen=True)
class ConsoleMessage:
    """source: 'console' (console.* and the browser's own log, e.g. a failed load) or 'exception'."""

    source: str
    level: str
    text: str
    url: str = ""
    line: int | None = None  # 1-based

    def __str__(self) -> str:
        return f"[{self.source}:{self.level}] {self.text} ({self.url}:{self.line})"


class Browser:
    """One headless Chromium page; a context manager that always closes the browser."""

    def __init__(
        self, *, timeout: float = 30.0, window: tuple[int, int] = (1280, 1024), chromium: str = CHROMIUM
    ) -> None:
        self.timeout, self.window, self.chromium = timeout, window, chromium
        self.messages: list[ConsoleMessage] = []

    def __enter__(self) -> Browser:
        if reason := chromium_missing_reason(self.chromium):
            raise BrowserError(reason)
        self._browser = _playwright().chromium.launch(
            executable_path=self.chromium, args=CHROMIUM_ARGS, timeout=self.timeout * 1000
        )
        try:
            self.page = self._browser.new_page(viewport={"width": self.window[0], "height": self.window[1]})
        except BaseException:
            self._browser.close()
            raise
        self.page.set_default_timeout(self.timeout * 1000)
        self.page.on("console", self._on_console)
        self.page.on("pageerror", self._on_exception)
        return self

    def __exit__(self, *exc: object) -> None:
        self._browser.close()  # ends Chromium and removes its temporary profile

    def _on_console(self, msg: PlaywrightConsoleMessage) -> None:
        where = msg.location  # lineNumber is 0-based; people (and editors) count from 1
        self.messages.append(
            ConsoleMessage("console", msg.type, msg.text, where["url"], where["lineNumber"] + 1)
        )

    def _on_exception(self, err: PlaywrightError) -> None:
        # The stack's first frame is where it was thrown; its line numbers are already 1-based.
        at = re.search(r"^\s*at (?:.*\()?(.+?):(\d+):\d+\)?$", err.stack or "", re.M)
        url, line = (at[1], int(at[2])) if at else ("", None)
        text = f"{err.name}: {err.message}" if err.name else err.message
        self.messages.append(ConsoleMessage("exception", "error", text, url, line))

    def open(self, page: str | os.PathLike[str]) -> None:
        """Load a file path or URL; wait for load and every image. Drops the previous page's messages."""
        url = str(page) if "://" in str(page) else Path(page).resolve().as_uri()
        self.messages.clear()
        self.page.goto(url, wait_until="load")
        self.page.evaluate(_SETTLE_JS)

    def errors(self) -> list[ConsoleMessage]:
        """Uncaught exceptions, console.error/assert and the browser's errors (a load that failed)."""
        self.page.evaluate("0")  # a round trip, so events already sent by the page are delivered
        return [m for m in self.messages if m.source == "exception" or m.level in ("error", "assert")]

    def plots(self) -> list[SimpleNamespace]:
        """Each figure.plot: kind, model, tag (img/svg/None), rendered width/height, natural_width/
        height (0 for a broken img, None for svg), src_prefix (40 chars of img src), visible."""
        return [SimpleNamespace(**p) for p in self.page.locator("figure.plot").evaluate_all(_PLOTS_JS)]

    def recommendations(self) -> list[SimpleNamespace]:
        """Each recommendation row: model, device, technique (cell text), data_technique, visible."""
        rows = self.page.locator("table#recommendations tr:has(td.technique)")
        return [SimpleNamespace(**r) for r in rows.evaluate_all(_RECOMMENDATIONS_JS)]

    def filterable(self) -> list[SimpleNamespace]:
        """Elements a filter may hide (tag, data: their data-* attributes, visible); not <option>s."""
        found = self.page.locator(",".join(f"[data-{k}]:not(option)" for k in ("model", "device", "family")))
        return [SimpleNamespace(**e) for e in found.evaluate_all(_FILTERABLE_JS)]

    def select_filter(self, select_id: str, value: str) -> list[SimpleNamespace]:
        """Choose `value` in <select id=select_id> as a person would (input+change), then filterable()."""
        select = self.page.locator(f'select[id="{select_id}"]')
        if not select.count():
            raise BrowserError(f'no <select id="{select_id}">')
        options = select.locator("option").evaluate_all("os => os.map(o => o.value)")
        if value not in options:
            raise BrowserError(f"no option {value!r} (options: {options})")
        select.select_option(index=options.index(value))  # by index: a value may also match a label
        return self.filterable()

    def screenshot(self, path: str | os.PathLike[str], *, full_page: bool = True) -> Path:
        """Save a PNG of the whole page (or just the viewport) to path; returns the path."""
        self.page.screenshot(path=path, full_page=full_page)
        return Path(path)
