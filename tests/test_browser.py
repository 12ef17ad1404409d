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
def chromium():
    with playwright.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def browser(chromium):
    """The browser, its pages closed after each test: a page left open keeps polling the app and takes the
    2-core machine's time from the next test's timings."""
    yield chromium
    for context in chromium.contexts:
        context.close()


def test_a_preset_renders_both_sides_with_chart_and_notes(served, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(served)
    page.wait_for_selector("#preset-0")
    page.wait_for_function("document.querySelector('#link textarea, #link input')?.value.includes('seq=')")

    started = time.perf_counter()
    page.click("#preset-0")  # naive vs in-place (the hidden Memcpy)
    page.wait_for_function("document.querySelector('#link textarea, #link input')?.value.includes('b=naive_inplace')"
                           f" && ({RENDERED})()", timeout=30_000)  # a recorded page opened on another result
    elapsed = time.perf_counter() - started
    print(f"\nclick to rendered (preset 'naive vs in-place', fresh process): {elapsed:.2f} s")

    assert "naive_inplace" in page.inner_text("#b-card")
    gemm = "nvjet" if "Recorded" in page.inner_text("#measured-on") else "bmm"  # a replay without a GPU
    assert gemm in page.inner_text("#a-table") and gemm in page.inner_text("#b-table")
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


# -- the first impression: the right source, the answer in view, links that render ---------------------------
SIZES = {"1280x720": {"width": 1280, "height": 720}, "1024x768": {"width": 1024, "height": 768},
         "iframe-760x1400": {"width": 800, "height": 1000}, "phone-390x844": PHONE}
IFRAME = {"width": 760, "height": 1400}  # the README's embed, in a blog's 760 px column
HEADLINE_IN_VIEW = """([a, b]) => {
    const link = document.querySelector('#link textarea, #link input')?.value || '';
    const headline = document.querySelector('#verdict strong');
    if (!link.includes(`a=${a}&b=${b}`) || !headline) return false;
    const box = headline.getBoundingClientRect();
    return box.height > 0 && box.top >= 0 && box.bottom <= window.innerHeight;
}"""
NO_SIDEWAYS_SCROLL = "document.documentElement.scrollWidth <= window.innerWidth"


def open_page(browser, served: str, size: str, query: str = ""):
    """The page at `size`: a browser tab of that viewport, or, for the iframe size, a blog page holding the app
    in a 760×1400 iframe. Returns (page, surface): the surface is where the app's own document is."""
    page = browser.new_page(viewport=SIZES[size])
    if size.startswith("iframe"):
        page.set_content(f'<body style="margin:0"><iframe src="{served}{query}" width="{IFRAME["width"]}" '
                         f'height="{IFRAME["height"]}" style="border:0"></iframe></body>')
        surface = page.wait_for_selector("iframe").content_frame()
    else:
        page.goto(served + query)
        surface = page
    return page, surface


def headline(page) -> str:
    return page.inner_text("#verdict strong")


def test_without_a_gpu_the_page_opens_on_the_recorded_h200_runs(served, browser):
    import app
    page = browser.new_page(viewport=SIZES["1280x720"])
    page.goto(served)
    if app.ENV.device == "cuda":
        playwright.expect(page.get_by_label("live on this machine", exact=False)).to_be_checked(timeout=20_000)
        return
    page.wait_for_function("document.querySelector('#measured-on')?.innerText.includes('Recorded')", timeout=30_000)
    playwright.expect(page.get_by_label("recorded: NVIDIA H200", exact=False)).to_be_checked()
    assert "live on this CPU" in page.inner_text("body")  # one click away, named as what it is
    assert "on the H200" in headline(page) and "here" not in page.inner_text("#verdict").split("\n")[1]
    page.screenshot(path=ARTIFACTS / "default-1280x720.png")


@pytest.mark.parametrize("size", SIZES)
def test_after_each_preset_the_headline_is_in_view(served, browser, size):
    """At each size, after each preset: the headline inside the viewport, nothing wider than the page; the
    click-to-headline time printed for the closing note, a screenshot of each kept."""
    import app
    page, surface = open_page(browser, served, size)
    surface.wait_for_selector("#preset-0")
    surface.wait_for_function("document.querySelector('#link textarea, #link input')?.value.includes('seq=')")
    if app.DEFAULT_SOURCE != "live":  # the page opens on a replay: a click lands after it, not under it
        surface.wait_for_function("document.querySelector('#measured-on')?.innerText.trim()", timeout=30_000)
    timings = []
    for i, name in enumerate(app.PRESETS):
        a, b, _ = app.PRESETS[name]
        surface.evaluate("window.scrollTo(0, 0)")
        started = time.perf_counter()
        surface.click(f"#preset-{i}")
        surface.wait_for_function(HEADLINE_IN_VIEW, arg=[a, b], timeout=60_000)
        timings.append((name, time.perf_counter() - started))
        assert surface.evaluate(NO_SIDEWAYS_SCROLL), f"the page scrolls sideways at {size}"
        page.screenshot(path=ARTIFACTS / f"preset-{i}-{size}.png")
    print(f"\nclick to headline in view at {size}: "
          + "; ".join(f"{name}: {seconds:.2f} s" for name, seconds in timings))


@pytest.mark.parametrize("size", SIZES)
def test_a_recorded_link_renders_on_load_and_edits_mark_it_stale(served, browser, size):
    started = time.perf_counter()
    page, surface = open_page(browser, served, size, "?source=h200-torch2.11&a=sdpa_flash&b=sdpa_cudnn")
    surface.wait_for_function(HEADLINE_IN_VIEW, arg=["sdpa_flash", "sdpa_cudnn"], timeout=30_000)
    print(f"\npage load to headline in view at {size}: {time.perf_counter() - started:.2f} s")
    assert "faster" in headline(surface) and "on the H200" in headline(surface)
    assert surface.evaluate(NO_SIDEWAYS_SCROLL)
    page.screenshot(path=ARTIFACTS / f"link-{size}.png")
    if size.startswith(("iframe", "phone")):
        return  # the edit below is the same at every size
    page = surface

    assert page.inner_text("#stale").strip() == ""
    page.locator("#component-0").page.get_by_label("heads H").fill("8")  # an edit by hand
    page.wait_for_function("document.querySelector('#stale')?.innerText.includes('Controls changed')")
    link = page.input_value("#link textarea, #link input")
    assert "heads=16" in link and "heads=8" not in link  # the link is the result's, not the edited controls'


def test_a_live_link_shows_the_guess_and_waits_for_a_click(served, browser):
    page = browser.new_page(viewport=SIZES["1024x768"])
    page.goto(served + "?source=live&a=naive&b=sdpa_math")
    page.wait_for_function("document.querySelector('#guess-b')?.innerText.includes('math')", timeout=20_000)
    time.sleep(2)
    assert "appears here after a run" in page.inner_text("#verdict")


def test_notices_are_cleared_when_the_controls_change(served, browser):
    page = browser.new_page(viewport=SIZES["1280x720"])
    page.goto(served + "?source=h200-torch2.11&a=naive&b=sdpa_flash")
    page.wait_for_selector("#preset-0")
    page.get_by_label("live on this", exact=False).check()
    page.wait_for_function("document.querySelector('#notice')?.innerText.length > 0", timeout=20_000)
    page.get_by_label("heads H").fill("3")
    page.wait_for_function("document.querySelector('#notice')?.innerText.trim() === ''", timeout=10_000)


# -- the views: a talk, a blog ---------------------------------------------------------------------------------
LINK = "?source=h200-torch2.11&a=sdpa_flash&b=sdpa_cudnn"


def chart_text_px(surface, selector: str) -> float:
    """The smallest chart text as drawn on screen: its size on the PNG (points at the figure's dpi) times the
    scale the page shows the PNG at."""
    from profiling.reports import DPI, SMALL_PT
    scale = surface.evaluate(f"(() => {{ const i = document.querySelector('{selector} img'); "
                             "return i.getBoundingClientRect().width / i.naturalWidth; })()")
    return SMALL_PT * DPI / 72 * scale


def test_the_presentation_view_fits_one_screen_in_large_type(served, browser):
    page = browser.new_page(viewport=SIZES["1280x720"])
    started = time.perf_counter()
    page.goto(served + LINK + "&view=present")
    page.wait_for_function("document.querySelector('#present h2')?.innerText.includes('faster')", timeout=30_000)
    page.wait_for_selector("#chart img")
    print(f"\npage load to headline, presentation view at 1280x720: {time.perf_counter() - started:.2f} s")
    page.evaluate("window.scrollTo(0, 0)")
    for selector in ("#present h2", "#chart img", "#pick-a", "#preset-0", "#run"):
        box = page.locator(selector).first.bounding_box()
        assert box and box["y"] >= 0 and box["y"] + box["height"] <= 720, f"{selector} is off the 1280x720 screen"
    assert page.evaluate("parseFloat(getComputedStyle(document.querySelector('#present h2')).fontSize)") >= 28
    for hidden in ("#machine", "#verdict", "#guess-a", "#a-card", "#link"):
        assert not page.locator(hidden).is_visible(), f"{hidden} shows in the presentation view"
    assert page.get_by_label("Source").count() == 0 or not page.get_by_label("Source").first.is_visible()
    page.screenshot(path=ARTIFACTS / "view-present-1280x720.png")
    page.click("#preset-1")  # math vs flash: the presets work in the view
    page.wait_for_function("document.querySelector('#present h2')?.innerText.includes('FlashAttention')"
                           " && document.querySelector('#present h2').innerText.includes('math')", timeout=30_000)


def test_the_embed_view_puts_the_answer_first_in_a_760_px_column(served, browser):
    page, surface = open_page(browser, served, "iframe-760x1400", LINK + "&view=embed")
    surface.wait_for_function(HEADLINE_IN_VIEW, arg=["sdpa_flash", "sdpa_cudnn"], timeout=30_000)
    surface.wait_for_selector("#chart img")
    assert surface.evaluate(NO_SIDEWAYS_SCROLL)
    assert not surface.locator("#machine").is_visible()  # no header
    answer, controls = surface.locator("#verdict").bounding_box(), surface.locator("#pick-a").bounding_box()
    assert answer["y"] < controls["y"], "the answer comes after the controls in the embed view"
    assert chart_text_px(surface, "#chart") >= 12
    page.screenshot(path=ARTIFACTS / "view-embed-iframe-760.png", full_page=True)


def test_the_link_box_offers_both_views_of_the_result_on_screen(served, browser):
    page = browser.new_page(viewport=SIZES["1280x720"])
    page.goto(served + LINK)
    page.wait_for_function("document.querySelector('#views')?.innerText.includes('presentation')", timeout=30_000)
    hrefs = page.eval_on_selector_all("#views a", "links => links.map(a => a.href)")
    assert any(h.endswith("view=present") and "a=sdpa_flash&b=sdpa_cudnn" in h for h in hrefs)
    assert any(h.endswith("view=embed") for h in hrefs)


def test_dropdowns_fit_their_choices_on_a_phone(served, browser):
    page = browser.new_page(viewport=PHONE)
    page.goto(served + "?source=h200-torch2.11&a=naive_inplace&b=sdpa_efficient")
    page.wait_for_function("document.querySelector('#guess-a')?.innerText.length > 0", timeout=20_000)
    for picker in ("#pick-a", "#pick-b"):
        field = page.locator(f"{picker} input").first
        assert field.evaluate("e => e.scrollWidth <= e.clientWidth + 1"), f"{picker} cuts its choice on a phone"
    assert page.evaluate(NO_SIDEWAYS_SCROLL)


# -- the sweep tab and the timeline --------------------------------------------------------------------------
@pytest.mark.parametrize("size", ["1280x720", "iframe-760x1400"])
def test_a_sweep_link_renders_its_chart_and_notes(served, browser, size):
    started = time.perf_counter()
    page, surface = open_page(browser, served, size, LINK + "&mode=sweep&seqs=1024,4096,16384,65536")
    surface.wait_for_function("document.querySelector('#sweep-verdict strong')?.innerText.includes('S=65536')",
                              timeout=30_000)
    surface.wait_for_selector("#sweep-chart img")
    print(f"\npage load to sweep headline at {size}: {time.perf_counter() - started:.2f} s")
    table = surface.inner_text("#sweep-table")
    assert all(str(s) in table for s in (1024, 4096, 65536)) and "sdpa_flash" in table and "sdpa_cudnn" in table
    assert surface.evaluate(NO_SIDEWAYS_SCROLL)
    if size.startswith("iframe"):
        assert chart_text_px(surface, "#sweep-chart") >= 12
    link = surface.input_value("#sweep-link textarea, #sweep-link input")
    assert "mode=sweep" in link and "seqs=1024%2C4096%2C16384%2C65536" in link
    page.screenshot(path=ARTIFACTS / f"sweep-{size}.png", full_page=True)


@pytest.mark.parametrize("size", ["1280x720", "iframe-760x1400"])
def test_the_timeline_of_a_recorded_comparison_renders(served, browser, size):
    page, surface = open_page(browser, served, size, "?source=h200-torch2.11&a=naive&b=naive_inplace")
    surface.wait_for_function(HEADLINE_IN_VIEW, arg=["naive", "naive_inplace"], timeout=30_000)
    surface.get_by_text("One forward on a timeline").click()
    surface.wait_for_selector("#timeline img", state="visible")
    assert surface.locator("#timeline-png").is_visible()
    if size.startswith("iframe"):
        assert chart_text_px(surface, "#timeline") >= 12
    surface.locator("#timeline").scroll_into_view_if_needed()
    page.screenshot(path=ARTIFACTS / f"timeline-{size}.png")
