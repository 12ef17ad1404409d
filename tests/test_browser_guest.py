"""A guest's first five minutes (issue 30), in a real browser: headless Chromium (the system's, nothing downloaded)
at 1280×720, 1024×768, the README's 760×1400 embed and a phone (390×844). Each test leaves a screenshot in
artifacts/guest-*.png for a person to look at.

- a bad combination is flagged as it is typed and Run is off, the reason beside it; the result on screen stays,
  marked stale, never under an "Error" pill;
- the bold text is drawn in one complete face (glyph widths of "SDPA GiB Run A vs B", bold against regular);
- what was measured (machine, recorded or live, workload and pass) is on every page opened here, at every size and in
  the embed (the present view's: test_browser.py's presentation test);
- the embed holds the answer, the A/B pickers and the presets within its frame, and never scrolls itself.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from conftest import CHROMIUM

playwright = pytest.importorskip("playwright.sync_api")

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "artifacts"
SIZES = {"1280x720": {"width": 1280, "height": 720}, "1024x768": {"width": 1024, "height": 768},
         "phone-390x844": {"width": 390, "height": 844}}
IFRAME = {"width": 760, "height": 1400}  # the README's embed, in a blog's 760 px column
LINK = "?source=h200-torch2.11&a=sdpa_flash&b=sdpa_cudnn"
HEADLINE = "() => !!document.querySelector('#verdict strong') && !!document.querySelector('#chart img')"

pytestmark = [pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no Chromium at {CHROMIUM}"),
              pytest.mark.xdist_group("browser")]


@pytest.fixture
def url(served) -> str:
    """The session's `python app.py`, as a host starts it (conftest.served)."""
    return served.url


@pytest.fixture
def tab(chromium):
    """The browser, each context a test opened closed after it (a page left open keeps polling the app)."""
    yield chromium
    for context in chromium.contexts:
        context.close()


def opened(tab, url: str, size: str, query: str = LINK):
    """(page, surface): the app at `size`; for "embed", a blog page holding it in the README's iframe. Every page a
    guest opens here says what was measured, once its answer is drawn (`says_what_was_measured`)."""
    if size == "embed":
        page = tab.new_context(viewport={"width": 800, "height": 1000}).new_page()
        page.set_content(f'<body style="margin:0"><iframe src="{url}{query}&view=embed" width="{IFRAME["width"]}" '
                         f'height="{IFRAME["height"]}" style="border:0"></iframe></body>')
        surface = page.wait_for_selector("iframe").content_frame()
    else:
        page = tab.new_context(viewport=SIZES[size]).new_page()
        page.goto(url + query)
        surface = page
    surface.wait_for_function(HEADLINE, timeout=60_000)
    says_what_was_measured(surface, size)
    return page, surface


def says_what_was_measured(surface, name: str) -> None:
    """The machine, recorded or live, the recording and the workload, on the page and in the embed (the present
    view's: test_browser.py's presentation test)."""
    shown = surface.locator("#measured-on").inner_text()
    assert "H200" in shown and "h200-torch2.11" in shown and "Recorded" in shown, (name, shown)
    assert "B=8, H=16, S=1024, D=64, bf16" in shown, (name, shown)


def chart_text_px(surface, selector: str) -> float:
    """The smallest chart text as drawn on screen: its size on the PNG (points at the figure's dpi) times the
    scale the page shows the PNG at."""
    from profiling.figures import DPI, SMALL_PT
    scale = surface.evaluate(f"(() => {{ const i = document.querySelector('{selector} img'); "
                             "return i.getBoundingClientRect().width / i.naturalWidth; })()")
    return SMALL_PT * DPI / 72 * scale


def type_into(surface, field: str, value: str) -> None:
    box = surface.locator(f"#field-{field} input")
    box.fill(value)
    box.press("Tab")


# -- 1. a bad combination flagged as it is typed -----------------------------------------------------------------
def test_a_bad_combination_turns_run_off_with_the_reason_and_the_old_result_stays_marked_stale(url, tab):
    """At each size in turn, one page resized (the flags are the page's state; what changes with the size is whether
    the reason is in view): typed, flagged, refused on a click, cleared."""
    page, surface = opened(tab, url, "1280x720")
    headline = surface.locator("#verdict strong").first.inner_text()
    for size in ("1280x720", "1024x768", "phone-390x844"):
        page.set_viewport_size(SIZES[size])
        type_into(surface, "kv_heads", "5")
        surface.wait_for_function("() => document.querySelector('#run').disabled", timeout=10_000)
        reason = surface.locator("#coverage").inner_text()
        assert "kv_heads=5 is not allowed" in reason and "divide heads=16" in reason, size
        assert surface.locator("#coverage").is_visible(), size
        assert "Controls changed since this result" in surface.locator("#stale").inner_text(), size
        page.screenshot(path=ARTIFACTS / f"guest-refused-{size}.png")
        if size == "1280x720":
            surface.locator("#run").click(force=True)  # a click on a disabled button: nothing runs, nothing covers
            time.sleep(1.0)
            assert surface.locator("#verdict strong").first.inner_text() == headline
            assert surface.locator("#verdict .error").count() == 0 or not surface.locator("#verdict .error").is_visible()
            assert "Controls changed since this result" in surface.locator("#stale").inner_text()
        type_into(surface, "kv_heads", "")  # empty: as many as the heads, the recorded workload again
        surface.wait_for_function("() => !document.querySelector('#run').disabled", timeout=10_000)
        assert surface.locator("#coverage").inner_text().strip() == "", size


# -- 3. a complete bold face -------------------------------------------------------------------------------------
BOLD_WIDTHS = """async () => {
    await document.fonts.ready;
    const family = getComputedStyle(document.body).fontFamily;
    await document.fonts.load(`600 20px ${family}`, 'SDPA GiB Run A vs B');
    await document.fonts.load(`400 20px ${family}`, 'SDPA GiB Run A vs B');
    const canvas = document.createElement('canvas').getContext('2d');
    const width = (weight, fallback, c) => { canvas.font = `${weight} 20px ${family.split(',')[0]}, ${fallback}`;
                                            return canvas.measureText(c).width; };
    return Array.from(new Set('SDPA GiB Run A vs B'.replace(/ /g, ''))).map(c => ({
        c, bold_mono: width(600, 'monospace', c), bold_serif: width(600, 'serif', c),
        regular: width(400, 'monospace', c)}));
}"""


def test_bold_text_is_drawn_in_one_complete_face(url, tab):
    """At 1280x720 (the embed's is checked on the embed's own page, below)."""
    page, surface = opened(tab, url, "1280x720")
    bold_face(page, surface, "1280x720")


def bold_face(page, surface, name: str) -> None:
    """Each letter of "SDPA GiB Run A vs B" at weight 600 measures the same whatever the fallback family (so the
    page's own face drew it, not a fallback), and at least as wide as the regular face's (a bold face, not the
    regular one again); the headline and the Run button use that weight."""
    for glyph in surface.evaluate(BOLD_WIDTHS):
        assert glyph["bold_mono"] == pytest.approx(glyph["bold_serif"], abs=0.01), glyph  # no letter falls back
        assert glyph["bold_mono"] >= glyph["regular"] - 0.01, glyph
    assert any(g["bold_mono"] > g["regular"] + 0.2 for g in surface.evaluate(BOLD_WIDTHS))
    weight = surface.evaluate("getComputedStyle(document.querySelector('#verdict strong')).fontWeight")
    assert int(weight) >= 600
    surface.locator("#verdict").screenshot(path=ARTIFACTS / f"guest-bold-{name}.png")


# -- 6. the embed: the answer first, short, never scrolling itself ------------------------------------------------
def test_the_embed_puts_the_answer_first_and_holds_it_the_pickers_and_the_presets_within_its_frame(url, tab):
    """The README's embed (a 760×1400 iframe in a blog's column): the answer above the controls, no header, nothing
    wider than the column, the chart's text 12 px or more on screen; the headline, the A/B pickers, Run and the presets
    within the frame, which does not scroll; the full page's details (timeline, kernel tables) left to a link to the
    full page; the bold face whole (test_bold_text_is_drawn_in_one_complete_face)."""
    page, surface = opened(tab, url, "embed")
    height = surface.evaluate("document.documentElement.scrollHeight")
    boxes = {name: surface.locator(selector).first.bounding_box() for name, selector in
             (("headline", "#verdict strong"), ("a", "#pick-a"), ("b", "#pick-b"), ("run", "#run"),
              ("presets", "#presets"))}
    page.screenshot(path=ARTIFACTS / "guest-embed-760x1400.png", full_page=True)
    assert boxes["headline"]["y"] < boxes["a"]["y"], boxes  # the answer first
    for name, box in boxes.items():
        assert box["y"] + box["height"] <= IFRAME["height"], (name, box, height)
    assert height <= IFRAME["height"] + 8, height
    assert surface.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert not surface.locator("#machine").is_visible()  # no header
    assert chart_text_px(surface, "#chart") >= 12
    assert not surface.locator("#timeline").is_visible() and not surface.locator("#a-table").is_visible()
    # the roofline folded under the chart, within the frame (opened, the page's figure with its caption)
    assert surface.locator("#embed-roofline").is_visible() and not surface.locator("#embed-roofline-plot").is_visible()
    assert "full page" in surface.locator("#full-page").inner_text()
    hrefs = surface.eval_on_selector_all("#full-page a", "links => links.map(a => a.href)")
    assert any("a=sdpa_flash&b=sdpa_cudnn" in h and "view=" not in h for h in hrefs)  # the details: the full page
    bold_face(page, surface, "embed")


def test_a_preset_in_the_embed_never_scrolls_the_frame_or_the_host(url, tab):
    """The reader scrolls the blog to the presets and clicks one: neither the frame nor the host page moves when
    the new result lands (the frame fits its content: it has nowhere to scroll)."""
    page, surface = opened(tab, url, "embed")
    page.evaluate("document.body.style.height = '4000px'")
    before = surface.locator("#verdict strong").first.inner_text()
    preset = surface.locator("#presets button", has_text="training step")
    preset.scroll_into_view_if_needed()  # as the reader would: the host page scrolls to it
    frame_at, host_at = surface.evaluate("window.scrollY"), page.evaluate("window.scrollY")
    assert frame_at == 0
    preset.click()
    surface.wait_for_function("(old) => { const h = document.querySelector('#verdict strong');"
                              " return h && h.innerText !== old; }", arg=before, timeout=60_000)
    time.sleep(1.0)  # the scroll a render would ask for comes after it
    assert surface.evaluate("window.scrollY") == 0
    assert page.evaluate("window.scrollY") == host_at
    page.screenshot(path=ARTIFACTS / "guest-embed-after-preset.png")


# -- 5. a training step, as the reader sees it ---------------------------------------------------------------------
def test_a_training_step_is_labelled_per_step(url, tab):
    """At 1280x720, then the same page narrowed to a phone's width (what is read does not change with the width)."""
    page, surface = opened(tab, url, "1280x720", LINK + "&pass=fwd%2Bbwd")
    assert "forward + backward" in surface.locator("#measured-on").inner_text()
    for size in ("1280x720", "phone-390x844"):
        page.set_viewport_size(SIZES[size])
        assert "per step" in surface.locator("#a-table").inner_text() or \
            "per step" in surface.locator("#a-table").evaluate("e => e.closest('.block')?.innerText || ''")
        surface.locator("#chart").screenshot(path=ARTIFACTS / f"guest-step-chart-{size}.png")
