"""The page in a real browser: headless Chromium (the system's, nothing downloaded) driven by Playwright.

The app runs as a newcomer runs it, `python app.py` in a fresh process, so the click-to-rendered
time printed here includes every first-request cost a visitor would pay.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import free_port

playwright = pytest.importorskip("playwright.sync_api")

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
PHONE = {"width": 390, "height": 844}
RENDERED = """() => {
    const rows = id => document.querySelectorAll(`#${id} tbody tr`).length;
    const verdict = document.querySelector('#verdict');
    return rows('a-table') > 0 && rows('b-table') > 0 && document.querySelector('#chart img') !== null
        && verdict !== null && verdict.querySelectorAll('ol strong').length > 0;
}"""

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no Chromium at {CHROMIUM}")


@pytest.fixture(scope="module")
def served():
    """`python app.py` on a free port given through $PORT, as a host would start it."""
    port = free_port()
    ARTIFACTS.mkdir(exist_ok=True)
    log = open(ARTIFACTS / "app.log", "w")
    process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env={**os.environ, "PORT": str(port)},
                               stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(url, timeout=1)
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"app.py did not start: see {log.name}")
            time.sleep(0.2)
    yield url
    process.terminate()
    process.wait(timeout=10)
    log.close()


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def test_a_preset_renders_both_sides_with_chart_and_notes(served, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(served)
    page.wait_for_selector("#preset-0")
    page.wait_for_function("document.querySelector('#link textarea, #link input')?.value.includes('seq=')")

    started = time.perf_counter()
    page.click("#preset-0")  # naive vs in-place (the hidden Memcpy)
    page.wait_for_function(RENDERED, timeout=30_000)
    elapsed = time.perf_counter() - started
    print(f"\nclick to rendered (preset 'naive vs in-place', fresh process): {elapsed:.2f} s")

    assert "naive_inplace" in page.inner_text("#b-card")
    assert "bmm" in page.inner_text("#a-table") and "bmm" in page.inner_text("#b-table")
    assert "Verdict" in page.inner_text("#verdict")
    assert page.locator("#json").is_visible() and page.locator("#a-trace").is_visible()
    assert "a=naive&b=naive_inplace" in page.input_value("#link textarea, #link input")
    page.screenshot(path=ARTIFACTS / "app.png", full_page=True)
    assert elapsed < 10, f"click to rendered took {elapsed:.1f} s"


def test_phone_width_stacks_the_columns_and_scrolls_the_tables(served, browser):
    page = browser.new_page(viewport=PHONE)
    page.goto(served + "?source=h200-torch2.11&a=sdpa_math&b=sdpa_flash")
    page.wait_for_function("document.querySelector('#guess-a')?.innerText.includes('SDPA')")
    page.click("#run")
    page.wait_for_function("document.querySelectorAll('#b-table tbody tr').length > 0", timeout=30_000)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]  # nothing overflows the page
    a, b = page.locator("#a-card").bounding_box(), page.locator("#b-card").bounding_box()
    assert b["y"] >= a["y"] + a["height"]  # B below A, not beside it
    page.screenshot(path=ARTIFACTS / "app-phone.png", full_page=True)


def test_the_app_works_inside_an_iframe(served, browser):
    page = browser.new_page(viewport={"width": 1000, "height": 900})
    page.set_content(f'<iframe src="{served}?a=sdpa_math&b=sdpa_flash" width="980" height="880"></iframe>')
    guess = page.frame_locator("iframe").locator("#guess-a")
    playwright.expect(guess).to_contain_text("SDPA · math", timeout=20_000)  # prefilled from the iframe's URL


def test_a_crafted_link_shows_its_text_as_text_and_fetches_nothing(served, browser):
    """Backticks, an <img>, a Markdown link and a 5,000-digit number in a shared link: the page loads, the
    notice quotes each as plain text, and the browser never requests the image."""
    from urllib.parse import urlencode

    marker = f"{served}gradio_api/file=/injected-marker"
    query = urlencode({"seq": f"`<img src={marker}1>`", f"x`<img src={marker}2>": "1",
                       "dtype": "[click](http://127.0.0.1:9/)", "heads": "9" * 5000})
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    requested = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(f"{served}?{query}")
    page.wait_for_function("document.querySelector('#notice')?.innerText.includes('Ignored from the link')",
                           timeout=20_000)
    notice = page.locator("#notice")
    assert notice.locator("img").count() == 0 and notice.locator("a").count() == 0
    text = notice.inner_text()
    assert f"seq=`<img src={marker}1>`" in text and "dtype=[click](http://127.0.0.1:9/)" in text
    assert "heads='99999" in text or "heads=9999" in text
    assert not any(url.startswith(marker) for url in requested)  # (the page's own URL quotes it)
    assert page.input_value("#link textarea, #link input").startswith(served)  # the page works on
