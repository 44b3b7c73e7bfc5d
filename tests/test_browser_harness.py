"""The headless-Chromium harness (tests/browser.py), against small fixture pages written here.

They prove the harness sees what a person would: plots that decoded (and ones that did not), JS errors,
the recommendation cells, filters that hide rows, a full-page screenshot; and that it never hangs or
leaves a browser behind.
"""

from __future__ import annotations

import base64
import io
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser import APT_INSTALL, Browser, BrowserError, chromium_missing_reason
from PIL import Image
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

pytestmark = pytest.mark.skipif(
    chromium_missing_reason() is not None,
    reason=f"headless Chromium is needed: {chromium_missing_reason()} (CI runs `{APT_INSTALL}`)",
)


def _png(width: int, height: int) -> bytes:
    """A valid solid-blue RGB PNG, made here so the fixture has no binary blob and a known size."""
    out = io.BytesIO()
    Image.new("RGB", (width, height), (0x20, 0x40, 0xC0)).save(out, format="PNG")
    return out.getvalue()


def _png_size(path: Path) -> tuple[int, int]:
    with Image.open(path) as image:
        assert image.format == "PNG", "not a PNG"
        return image.size


PNG_URI = "data:image/png;base64," + base64.b64encode(_png(40, 30)).decode()

# A page that follows the report contract: an img plot, an svg plot, the recommendations table
# (including the two special texts) and the three filters, with the kind of script the report uses.
CONTRACT_PAGE = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>optbench report</title>
<style>figure.plot img {{ width: 400px; }}</style></head>
<body>
<select id="filter-model"><option value="">all</option><option value="resnet18">resnet18</option>
  <option value="vit_tiny">vit_tiny</option></select>
<select id="filter-device"><option value="">all</option><option value="cpu">cpu</option>
  <option value="cuda">cuda</option></select>
<select id="filter-family"><option value="">all</option><option value="cnn">cnn</option>
  <option value="transformer">transformer</option></select>
<section data-model="resnet18" data-family="cnn">
  <figure class="plot" data-plot="pareto" data-model="resnet18"><img src="{PNG_URI}" alt="pareto"></figure>
</section>
<section data-model="vit_tiny" data-family="transformer">
  <figure class="plot" data-plot="latency" data-model="vit_tiny">
    <svg xmlns="http://www.w3.org/2000/svg" width="320" height="240" viewBox="0 0 320 240">
      <rect x="10" y="10" width="100" height="200" fill="steelblue"/></svg>
  </figure>
</section>
<table id="recommendations">
  <tr><th>model</th><th>device</th><th>technique</th></tr>
  <tr data-model="resnet18" data-device="cpu" data-family="cnn"><td>resnet18</td><td>cpu</td>
    <td class="technique">channels_last+bf16_autocast</td></tr>
  <tr data-model="resnet18" data-device="cuda" data-family="cnn"><td>resnet18</td><td>cuda</td>
    <td class="technique" data-technique="">no clear winner</td></tr>
  <tr data-model="vit_tiny" data-device="cpu" data-family="transformer"><td>vit_tiny</td><td>cpu</td>
    <td class="technique" data-technique="">none</td></tr>
</table>
<script>
  const filters = {{model: "filter-model", device: "filter-device", family: "filter-family"}};
  function apply() {{
    const chosen = Object.fromEntries(
      Object.entries(filters).map(([k, id]) => [k, document.getElementById(id).value]));
    document.querySelectorAll("[data-model], [data-device], [data-family]").forEach(el => {{
      if (el.tagName === "OPTION") return;
      const ok = Object.entries(chosen).every(([k, v]) => !v || el.dataset[k] === undefined || el.dataset[k] === v);
      el.style.display = ok ? "" : "none";
    }});
  }}
  Object.values(filters).forEach(id => document.getElementById(id).addEventListener("change", apply));
</script>
</body></html>
"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    # One browser for the module (open() resets the messages): starting one costs ~0.5 s.
    with Browser(timeout=20) as b:
        yield b


def _write(tmp_path: Path, html: str, name: str = "page.html") -> Path:
    page = tmp_path / name
    page.write_text(html, encoding="utf-8")
    return page


def test_contract_page_plots_decode_and_have_size(browser: Browser, tmp_path: Path) -> None:
    browser.open(_write(tmp_path, CONTRACT_PAGE))
    assert browser.errors() == []
    plots = {(p.kind, p.model): p for p in browser.plots()}
    assert set(plots) == {("pareto", "resnet18"), ("latency", "vit_tiny")}
    img = plots["pareto", "resnet18"]
    assert img.tag == "img" and img.src_prefix.startswith("data:image/png;base64,")
    assert (img.natural_width, img.natural_height) == (40, 30)  # decoded, not just present
    assert (img.width, img.height) == (400, 300) and img.visible  # CSS width, aspect kept
    svg = plots["latency", "vit_tiny"]
    assert svg.tag == "svg" and svg.natural_width is None
    assert (svg.width, svg.height) == (320, 240) and svg.visible


def test_contract_page_recommendation_cells(browser: Browser, tmp_path: Path) -> None:
    browser.open(_write(tmp_path, CONTRACT_PAGE))
    recs = [(r.model, r.device, r.technique, r.data_technique) for r in browser.recommendations()]
    assert recs == [
        ("resnet18", "cpu", "channels_last+bf16_autocast", None),
        ("resnet18", "cuda", "no clear winner", ""),
        ("vit_tiny", "cpu", "none", ""),
    ]


def test_filter_selection_hides_non_matching_elements(browser: Browser, tmp_path: Path) -> None:
    browser.open(_write(tmp_path, CONTRACT_PAGE))
    assert all(e.visible for e in browser.filterable())

    def visible(elements: list) -> set[tuple[str, str | None, str | None]]:
        return {(e.tag, e.data.get("model"), e.data.get("device")) for e in elements if e.visible}

    after = browser.select_filter("filter-model", "resnet18")
    assert visible(after) == {
        ("section", "resnet18", None),
        ("figure", "resnet18", None),
        ("tr", "resnet18", "cpu"),
        ("tr", "resnet18", "cuda"),
    }
    # The hidden plot and row read as hidden through the other views too.
    assert {p.model: p.visible for p in browser.plots()} == {"resnet18": True, "vit_tiny": False}
    assert [r.model for r in browser.recommendations() if r.visible] == ["resnet18", "resnet18"]

    after = browser.select_filter("filter-device", "cuda")
    assert {(e.data.get("model"), e.data.get("device")) for e in after if e.visible and e.tag == "tr"} == {
        ("resnet18", "cuda")
    }
    browser.select_filter("filter-model", "")
    browser.select_filter("filter-device", "")
    after = browser.select_filter("filter-family", "transformer")
    assert {e.data.get("model") for e in after if e.visible} == {"vit_tiny"}
    assert browser.errors() == []


def test_filter_with_unknown_option_or_select_raises(browser: Browser, tmp_path: Path) -> None:
    browser.open(_write(tmp_path, CONTRACT_PAGE))
    with pytest.raises(BrowserError, match=r"no option .*'resnet18', 'vit_tiny'"):
        browser.select_filter("filter-model", "alexnet")
    with pytest.raises(BrowserError, match="no <select"):
        browser.select_filter("filter-nothing", "x")


def test_js_errors_and_console_error_are_reported(browser: Browser, tmp_path: Path) -> None:
    page = _write(
        tmp_path,
        """<!doctype html><html><body><p>hello</p>
<script>console.log("just info"); console.error("plot failed:", 42);</script>
<script>setTimeout(() => { throw new TypeError("late failure"); }, 0);</script>
<script>throw new Error("report script broke");</script>
</body></html>""",
    )
    browser.open(page)
    errors = browser.errors()
    texts = [str(e) for e in errors]
    assert any(e.source == "console" and e.text == "plot failed: 42" for e in errors), texts
    assert any(e.source == "exception" and "Error: report script broke" in e.text for e in errors), texts
    assert any(e.source == "exception" and "TypeError: late failure" in e.text for e in errors), texts
    thrown = next(e for e in errors if "report script broke" in e.text)
    assert thrown.url == page.as_uri() and thrown.line == 4  # 1-based line of the throw
    assert not any("just info" in t for t in texts)  # console.log is not an error...
    assert any(m.level == "log" and m.text == "just info" for m in browser.messages)  # ...but is kept


def test_broken_images_have_natural_width_zero(browser: Browser, tmp_path: Path) -> None:
    # A real PNG cut short: the signature and header are there, the pixels are not.
    corrupt = "data:image/png;base64," + base64.b64encode(_png(40, 30)[:40]).decode()
    page = _write(
        tmp_path,
        f"""<!doctype html><html><body>
<figure class="plot" data-plot="size_speed" data-model="a"><img src="{corrupt}" width="200" height="100"></figure>
<figure class="plot" data-plot="pct_of_peak" data-model="b"><img src="missing.png"></figure>
<figure class="plot" data-plot="pareto" data-model="c"><p>no picture</p></figure>
</body></html>""",
    )
    browser.open(page)
    plots = {p.model: p for p in browser.plots()}
    assert plots["a"].natural_width == 0 and plots["a"].tag == "img"
    assert plots["a"].width == 200  # the box is there, so only naturalWidth shows it is broken
    assert plots["b"].natural_width == 0
    assert plots["c"].tag is None and plots["c"].width == 0
    # A file that failed to load is also an error in the browser's log.
    assert any(e.source == "console" and "missing.png" in e.url for e in browser.errors())


def test_full_page_screenshot_covers_the_whole_page(browser: Browser, tmp_path: Path) -> None:
    page = _write(
        tmp_path,
        """<!doctype html><html><body style="margin:0">
<div style="height:2500px;background:linear-gradient(red,blue)">tall</div></body></html>""",
    )
    browser.open(page)
    full = browser.screenshot(tmp_path / "full.png")
    assert _png_size(full) == (browser.window[0], 2500)
    view = browser.screenshot(tmp_path / "view.png", full_page=False)
    assert _png_size(view) == browser.window


def test_one_shot_browser_reports_and_screenshots_the_page(tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    with Browser(timeout=20) as b:
        b.open(_write(tmp_path, CONTRACT_PAGE))
        assert b.screenshot(shot) == shot
        assert b.page.title() == "optbench report" and b.errors() == []
        assert [p.kind for p in b.plots()] == ["pareto", "latency"]
        assert [r.technique for r in b.recommendations()][0] == "channels_last+bf16_autocast"
    width, height = _png_size(shot)
    assert width == 1280 and height > 500


def _live_parent(pid: int) -> int | None:
    """The parent pid of a live process; None when it is gone or a zombie (dead, only not yet reaped)."""
    try:
        state, ppid = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[:2]
    except OSError:
        return None
    return None if state == "Z" else int(ppid)


def _our_chromiums() -> dict[int, str]:
    """Live Chromium processes below this test process (under Playwright's driver): pid -> command line."""
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    parent = {pid: ppid for pid in pids if (ppid := _live_parent(pid)) is not None}

    def ours(pid: int) -> bool:
        while pid > 1:
            pid = parent.get(pid, 0)
            if pid == os.getpid():
                return True
        return False

    found = {}
    for pid in filter(ours, parent):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile
        if "chromium" in cmd.split(" ")[0]:
            found[pid] = cmd
    return found


def _gone(pids: set[int], within: float = 10.0) -> bool:
    # Each pid by itself, not by ancestry: a child that outlived its parent is reparented, yet alive.
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if all(_live_parent(pid) is None for pid in pids):
            return True
        time.sleep(0.1)
    return False


def test_a_hanging_page_times_out_and_the_browser_is_killed(tmp_path: Path) -> None:
    page = _write(tmp_path, "<!doctype html><html><body><script>while (true) {}</script></body></html>")
    before = set(_our_chromiums())  # the module's browser fixture may be running: not this test's
    start = time.monotonic()
    with pytest.raises(PlaywrightTimeoutError, match="Timeout 2000ms exceeded"), Browser(timeout=2) as b:
        started = {pid: cmd for pid, cmd in _our_chromiums().items() if pid not in before}
        assert started, "no chromium process found for this Browser"
        b.open(page)
    assert time.monotonic() - start < 20
    assert _gone(set(started)), "chromium outlived its Browser"
    profiles = {m[1] for cmd in started.values() if (m := re.search(r"--user-data-dir=(\S+)", cmd))}
    assert profiles and not any(Path(p).exists() for p in profiles), profiles


def test_missing_chromium_is_a_clear_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-chromium")
    assert "apt-get install -y chromium" in (chromium_missing_reason(missing) or "")
    with pytest.raises(BrowserError, match="is absent"), Browser(chromium=missing):
        pass
