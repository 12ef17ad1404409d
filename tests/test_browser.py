"""The page in a real browser: headless Chromium (the system's, nothing downloaded) driven by Playwright.

The app runs as a host runs it, `python app.py` in a fresh process (one for this module), so the times printed
here include every first-request cost a visitor would pay. What the page shows is checked against what the core
answers for the request in the page's own link: the headline a visitor reads is the explainer's, word for word.
Screenshots go to artifacts/.
"""
from __future__ import annotations

import json
import re
import os
import time
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest

import app
import links
from background import OWN_LINES
from conftest import CHROMIUM
from profiling import session, text
from profiling.replay import find_recorded
from profiling.reports import kernel_summary
from profiling.request import LIVE, Request
from profiling.workload import Refusal

playwright = pytest.importorskip("playwright.sync_api")

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "artifacts"
RECORDING = "h200-torch2.11"
SIZES = {"1280x720": {"width": 1280, "height": 720}, "1024x768": {"width": 1024, "height": 768},
         "1920x1080": {"width": 1920, "height": 1080}, "phone-390x844": {"width": 390, "height": 844}}
LINK = "?source=h200-torch2.11&a=sdpa_flash&b=sdpa_cudnn"
LINK_BOX = "#link textarea, #link input"
ROWS = "rows => rows.map(r => Array.from(r.querySelectorAll('[role=gridcell]')).map(c => c.innerText.trim()))"
RENDERED = """() => {
    const rows = id => document.querySelectorAll(`#${id} .virtual-row`).length;  // gradio's rows (the tbody sizes)
    return rows('a-table') > 0 && rows('b-table') > 0 && document.querySelector('#chart img') !== null
        && document.querySelector('#verdict strong') !== null;
}"""
HEADLINE_IN_VIEW = """([a, b]) => {
    const link = document.querySelector('#link textarea, #link input')?.value || '';
    const headline = document.querySelector('#verdict strong');
    if (!link.includes(`a=${a}&b=${b}&`) || !headline) return false;
    const box = headline.getBoundingClientRect();
    return box.height > 0 && box.top >= 0 && box.bottom <= window.innerHeight;
}"""
NO_SIDEWAYS_SCROLL = "document.documentElement.scrollWidth <= window.innerWidth"

pytestmark = [pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no Chromium at {CHROMIUM}"),
              pytest.mark.xdist_group("browser")]


@pytest.fixture
def browser(chromium):
    """The browser, its pages closed after each test: a page left open keeps polling the app and takes the
    2-core machine's time from the next test's timings."""
    yield chromium
    for context in chromium.contexts:
        context.close()


def answer_to(link: str, sweep: bool = False) -> session.Answer:
    """What the core answers for the request a link names: what the page must show for it."""
    params = dict(parse_qsl(urlsplit(link).query, keep_blank_values=True))
    request, problems = Request.from_query(params, app.ENV.device, app.DEFAULT_SOURCE, links.PAGE_KEYS)
    assert not problems, problems
    return (session.sweep if sweep else session.compare)(request)


def is_join(request) -> bool:
    """An event the page queued (its URL carries the page's own query)."""
    return request.method == "POST" and urlsplit(request.url).path.endswith("/gradio_api/queue/join")


def headline(surface, selector: str = "#verdict strong") -> str:
    return " ".join(surface.inner_text(selector).split())


# -- the first impression --------------------------------------------------------------------------------------
def test_the_app_started_as_a_host_starts_it_removed_what_a_dead_process_left(served):
    assert not served.stale.exists()


def test_the_page_opens_on_the_recorded_h200_runs_and_a_preset_renders_both_sides(served, browser):
    page = browser.new_page(viewport=SIZES["1280x720"], accept_downloads=True)
    started = time.perf_counter()
    page.goto(served.url)
    if app.ENV.device == "cuda":
        playwright.expect(page.get_by_label("live on this machine", exact=False)).to_be_checked(timeout=20_000)
        return
    page.wait_for_function(HEADLINE_IN_VIEW, arg=["naive", "sdpa_flash"], timeout=30_000)
    print(f"\npage load to headline in view (fresh process): {time.perf_counter() - started:.2f} s")
    playwright.expect(page.get_by_label("H200 runs", exact=False)).to_be_checked()
    assert "live on this CPU" in page.inner_text("body")  # one click away, named as what it is
    expected = answer_to(page.input_value(LINK_BOX)).explanation.headline.title
    assert headline(page) == expected and "on the H200" in expected
    assert "here" not in page.inner_text("#verdict").split()
    page.screenshot(path=ARTIFACTS / "default-1280x720.png")

    joined = []  # the events the click queued: a preset on a recording replays, it never measures
    page.on("request", lambda r: joined.append(json.loads(r.post_data)["fn_index"]) if is_join(r) else None)
    started = time.perf_counter()
    page.click("#preset-0")  # naive vs in-place (the hidden Memcpy)
    page.wait_for_function("document.querySelector('#link textarea, #link input')?.value.includes('b=naive_inplace')"
                           f" && ({RENDERED})()", timeout=120_000)
    print(f"click to rendered (preset 'naive vs in-place'): {time.perf_counter() - started:.2f} s")
    # (a bound on that time held only on a quiet machine: what it stood for is that nothing was measured)
    assert served.events["run_compare_replay"] in joined and served.events["run_compare"] not in joined, joined
    link = page.input_value(LINK_BOX)
    answer = answer_to(link)
    assert headline(page) == answer.explanation.headline.title
    assert page.inner_text("#measured-on").startswith("Recorded on NVIDIA H200")
    assert f"workload {answer.result.a.workload.words()}" in page.inner_text("#measured-on")
    for side, run in (("a", answer.result.a), ("b", answer.result.b)):  # the kernel tables as recorded
        rows = page.eval_on_selector_all(f"#{side}-table .virtual-row", ROWS)
        table = kernel_summary(run)
        assert [r[0] for r in rows] == list(table.iloc[:, 0])  # label, µs, share, calls, category
        assert [float(r[1]) for r in rows] == list(table.iloc[:, 1])
    assert "naive_inplace" in page.inner_text("#b-card")
    assert page.locator("#json").is_visible()
    with page.expect_download() as download:  # the recorded trace, as recorded
        page.click("#a-trace")
    assert Path(download.value.path()).read_bytes() == Path(find_recorded(RECORDING, "naive", answer.result.a.workload)
                                                            .trace_path).read_bytes()
    page.screenshot(path=ARTIFACTS / "app.png", full_page=True)

    page.get_by_label("heads H").fill("8")  # an edit by hand: the result on screen is no longer the controls'
    page.wait_for_function("document.querySelector('#stale')?.innerText.includes('Controls changed')")
    assert page.input_value(LINK_BOX) == link  # the link is the result's, not the edited controls'


def test_a_live_link_waits_for_a_click_then_runs_live_on_this_cpu(served, browser):
    page = browser.new_page(viewport=SIZES["1024x768"])
    joined = []  # (when, event) of every event the page queued
    page.on("request", lambda r: joined.append((time.perf_counter(), json.loads(r.post_data)["fn_index"]))
            if is_join(r) else None)
    query = {"source": LIVE, "a": "naive", "b": "sdpa_math", "batch": 1, "heads": 2, "seq": 128, "head_dim": 32,
             "dtype": "fp32"}
    opening = served.events["open_link"]
    with page.expect_request(lambda r: is_join(r) and json.loads(r.post_data)["fn_index"] == opening):
        page.goto(served.url + "?" + urlencode(query))  # the page's opening ran (it waits for a click)
    page.wait_for_function("document.querySelector('#guess-b')?.innerText.includes('math')", timeout=20_000)
    assert "appears here after a run" in page.inner_text("#verdict")
    started = time.perf_counter()
    page.click("#run")
    page.wait_for_function("document.querySelector('#measured-on')?.innerText.includes('Measured live')"
                           f" && ({RENDERED})()", timeout=60_000)
    print(f"\nclick to rendered (a live run on this CPU): {time.perf_counter() - started:.2f} s")
    live_runs = [when for when, event in joined if event == served.events["run_compare"]]
    assert len(live_runs) == 1 and live_runs[0] > started  # one live run, the one asked for
    title = headline(page)
    assert "Naive (masked_fill) [A]" in title and "SDPA · math [B]" in title and "on the CPU" in title
    assert "bmm" in page.inner_text("#a-table") and page.locator("#a-trace").is_visible()
    assert "workload B=1, H=2, S=128, D=32, fp32, causal" in page.inner_text("#measured-on")
    page.screenshot(path=ARTIFACTS / "live-1024x768.png", full_page=True)


def test_switching_source_moves_the_workload_and_says_so_until_the_controls_change(served, browser):
    page = browser.new_page(viewport=SIZES["1280x720"])
    page.goto(served.url + "?source=h200-torch2.11&a=naive&b=sdpa_flash")
    # the link's replay on screen first: a click before the page has applied its link is undone by it
    page.wait_for_function(HEADLINE_IN_VIEW, arg=["naive", "sdpa_flash"], timeout=120_000)
    page.get_by_label("live on this", exact=False).check()
    page.wait_for_function("document.querySelector('#notice')?.innerText.includes('CPU-sized workload')",
                           timeout=20_000)
    assert page.input_value("#field-seq_len input") == "512"  # the CPU's workload, B=1, H=8, S=512
    page.get_by_label("heads H").fill("3")
    page.wait_for_function("document.querySelector('#notice')?.innerText.trim() === ''", timeout=10_000)


def test_after_a_preset_on_a_phone_the_headline_is_in_view_and_is_the_explainers(served, browser):
    """At a phone's width after a preset (every preset at both desktop sizes is the first-screen test's, which checks
    the same there): the headline inside the viewport, the explainer's word for word, and nothing wider than the
    page; B below A; the click-to-headline time printed, a screenshot kept."""
    page = browser.new_page(viewport=SIZES["1024x768"])
    page.goto(served.url)
    page.wait_for_selector("#preset-0")
    if app.DEFAULT_SOURCE != LIVE:  # the page opens on a replay: a click lands after it, not under it
        page.wait_for_function(HEADLINE_IN_VIEW, arg=["naive", "sdpa_flash"], timeout=120_000)
    timings = []
    for size, presets in (("phone-390x844", list(app.PRESETS)[1:2]),):
        page.set_viewport_size(SIZES[size])
        for name in presets:
            i = list(app.PRESETS).index(name)
            a, b = app.apply_preset(name, app.DEFAULT_SOURCE)[1:3]
            page.evaluate("window.scrollTo(0, 0)")
            started = time.perf_counter()
            page.click(f"#preset-{i}")
            page.wait_for_function(HEADLINE_IN_VIEW, arg=[a, b], timeout=120_000)
            timings.append(f"{name} at {size}: {time.perf_counter() - started:.2f} s")
            assert headline(page) == answer_to(page.input_value(LINK_BOX)).explanation.headline.title
            assert page.evaluate(NO_SIDEWAYS_SCROLL), f"the page scrolls sideways at {size}"
            page.screenshot(path=ARTIFACTS / f"preset-{i}-{size}.png")
    print("\nclick to headline in view: " + "; ".join(timings))
    a, b = page.locator("#a-card").bounding_box(), page.locator("#b-card").bounding_box()
    assert b["y"] >= a["y"] + a["height"]  # on a phone, B below A, not beside it
    for picker in ("#pick-a", "#pick-b"):
        field = page.locator(f"{picker} input").first
        assert field.evaluate("e => e.scrollWidth <= e.clientWidth + 1"), f"{picker} cuts its choice on a phone"
    page.screenshot(path=ARTIFACTS / "app-phone.png", full_page=True)


# a chart is whole (its drawn width within its box) or swipeable (its box scrolls sideways and is narrower than it)
CHARTS_WHOLE_OR_SWIPEABLE = """() => [...document.querySelectorAll('#chart img, #sweep-chart img, #timeline img')]
    .filter(i => i.offsetParent !== null).map(i => {
        const id = i.closest('[id]').id, r = i.getBoundingClientRect();
        for (let box = i.parentElement; box; box = box.parentElement) {
            const style = getComputedStyle(box), b = box.getBoundingClientRect();
            if (['auto', 'scroll'].includes(style.overflowX) && box.scrollWidth > box.clientWidth + 1) return [id, true];
            if (style.overflowX !== 'visible' && (r.left < b.left - 1 || r.right > b.right + 1)) return [id, false];
        }
        return [id, r.left >= -1 && r.right <= innerWidth + 1]; })"""


def test_on_a_phone_every_chart_is_whole_and_the_verdict_is_in_the_first_two_screens(served, browser):
    """At 390x844 on a recorded link: each chart drawn whole within its box (or in a box that scrolls sideways), the
    verdict's top within the first two screens, and in the presentation view the headline broken only between
    words (the words of each line are whole words of the headline)."""
    page = browser.new_page(viewport=SIZES["phone-390x844"])
    page.goto(served.url + LINK)
    page.wait_for_function(RENDERED, timeout=60_000)
    charts = page.evaluate(CHARTS_WHOLE_OR_SWIPEABLE)
    assert charts and all(ok for _, ok in charts), charts
    top = page.evaluate("document.querySelector('#verdict').getBoundingClientRect().top + scrollY")
    print(f"\nverdict top at 390x844: {top:.0f} px")
    assert top < 2 * 844, top
    page.screenshot(path=ARTIFACTS / "phone-390x844.png", full_page=True)
    page.goto(served.url + LINK + "&view=present")
    page.wait_for_selector("#present h2")
    page.wait_for_selector("#present-chart img")  # shown: a column squeezed to no height once hid both
    page.wait_for_selector("#present-roofline img")  # a phone scrolls: the roofline comes under the chart
    assert page.locator("#present h2").bounding_box()["height"] > 0
    chart, roof = (page.locator(f"{f} img").bounding_box() for f in ("#present-chart", "#present-roofline"))
    assert roof["y"] >= chart["y"] + chart["height"] and roof["x"] >= 0 and roof["x"] + roof["width"] <= 390
    lines = page.evaluate("""() => { const h = document.querySelector('#present h2'), lines = [];
        const walker = document.createTreeWalker(h, NodeFilter.SHOW_TEXT); let node, last = null;
        while ((node = walker.nextNode())) for (let i = 0; i < node.length; i++) {
            const r = document.createRange(); r.setStart(node, i); r.setEnd(node, i + 1);
            const box = r.getClientRects()[0]; if (!box) continue;
            if (last === null || box.top > last + 4) { lines.push(''); last = box.top; }
            lines[lines.length - 1] += node.data[i]; }
        return lines; }""")
    words = set(headline(page, "#present h2").split())
    assert all(w in words for line in lines for w in line.split()), lines  # no line starts or ends mid-word
    page.screenshot(path=ARTIFACTS / "present-phone-390x844.png")


def test_lengths_have_a_control_on_the_first_screen_and_set_b_and_s(served, browser):
    """At 1024x768 the document lengths' control is on the first screen beside the other fields; typing lengths
    puts their count in B and the longest in S."""
    page = browser.new_page(viewport=SIZES["1024x768"])
    page.goto(served.url)
    page.wait_for_selector("#field-lengths textarea, #field-lengths input")
    assert page.evaluate(IN_VIEW, ["#field-lengths", "#run", "#preset-0"])
    page.fill("#field-lengths textarea, #field-lengths input", "512, 1536, 1024, 1024")
    page.wait_for_function("document.querySelector('#field-batch input')?.value === '4' && "
                           "document.querySelector('#field-seq_len input')?.value === '1536'", timeout=10_000)
    page.screenshot(path=ARTIFACTS / "lengths-1024x768.png")


def test_a_crafted_link_shows_its_text_as_text_and_fetches_nothing(served, browser):
    """Backticks, an <img>, a Markdown link, a dtype in capitals and a 5,000-digit number in a shared link: the
    page loads, the notice quotes each as plain text, and the browser never requests the image."""
    marker = f"{served.url}gradio_api/file=/injected-marker"
    query = urlencode({"seq": f"`<img src={marker}1>`", f"x`<img src={marker}2>": "1",
                       "dtype": "[click](http://127.0.0.1:9/)", "heads": "9" * 5000, "causal": "True"})
    page = browser.new_page(viewport=SIZES["1280x720"])
    requested = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(f"{served.url}?{query}")
    page.wait_for_function("document.querySelector('#notice')?.innerText.includes('Ignored from the link')",
                           timeout=20_000)
    notice = page.locator("#notice")
    assert notice.locator("img").count() == 0 and notice.locator("a").count() == 0
    text = notice.inner_text()
    assert f"seq=`<img src={marker}1>`" in text and "dtype=[click](http://127.0.0.1:9/)" in text
    assert "heads=9999" in text and "causal=True" in text
    assert not any(url.startswith(marker) for url in requested)  # (the page's own URL quotes it)
    page.wait_for_function(f"document.querySelector('{LINK_BOX}')?.value.startsWith('{served.url}')",
                           timeout=30_000)  # the page works on: the default replay renders


# -- the views: a talk, a blog -----------------------------------------------------------------------------------
def test_the_presentation_view_fits_one_screen_in_large_type(served, browser):
    """At 1280x720, the size a projector gets: the stage view's checks (test_the_stage_view_fits_one_screen...: no
    scroll, every text at 18 px or more, the chart's own text too), the explainer's headline word for word in large
    type, what was measured said on the stage, the full page's parts hidden, and the presets at work in the view."""
    page = browser.new_page(viewport=SIZES["1280x720"])
    started = time.perf_counter()
    page.goto(served.url + LINK + "&view=present")
    page.wait_for_function("document.querySelector('#present h2')?.innerText.includes('cuDNN')", timeout=30_000)
    page.wait_for_selector("#present-chart img")
    print(f"\npage load to headline, presentation view at 1280x720: {time.perf_counter() - started:.2f} s")
    on_stage(page, "1280x720", "compare")
    expected = answer_to(page.url.split("&view=")[0])
    assert headline(page, "#present h2") == expected.explanation.headline.title
    shown = page.inner_text("#present")  # what was measured: the machine, recorded or live, the workload and pass
    assert "H200" in shown and "h200-torch2.11" in shown and "Recorded" in shown, shown
    assert "B=8, H=16, S=1024, D=64, bf16" in shown and "forward" in shown, shown
    page.evaluate("window.scrollTo(0, 0)")
    for selector in ("#present h2", "#present-chart img", "#pick-a", "#preset-0", "#run"):
        box = page.locator(selector).first.bounding_box()
        assert box and box["y"] >= 0 and box["y"] + box["height"] <= 720, f"{selector} is off the 1280x720 screen"
    assert page.evaluate("parseFloat(getComputedStyle(document.querySelector('#present h2')).fontSize)") >= 28
    for hidden in ("#machine", "#verdict", "#chart", "#guess-a", "#a-card", "#link"):
        assert not page.locator(hidden).is_visible(), f"{hidden} shows in the presentation view"
    page.screenshot(path=ARTIFACTS / "view-present-1280x720.png")
    page.click("#preset-1")  # math vs flash: the presets work in the view
    page.wait_for_function("document.querySelector('#present h2')?.innerText.includes('SDPA · math [A]')",
                           timeout=30_000)


# -- the sweep tab ---------------------------------------------------------------------------------------------------
def test_a_sweep_link_renders_its_chart_and_every_point_and_a_missing_length_is_refused(served, browser):
    page = browser.new_page(viewport=SIZES["1280x720"])
    started = time.perf_counter()
    page.goto(served.url + LINK + "&mode=sweep&seqs=1024,4096,16384")
    page.wait_for_function("document.querySelector('#sweep-verdict strong')?.innerText.includes('S=16,384')",
                           timeout=30_000)
    page.wait_for_selector("#sweep-chart img")
    print(f"\npage load to sweep headline at 1280x720: {time.perf_counter() - started:.2f} s")
    link = page.input_value("#sweep-link textarea, #sweep-link input")
    assert "mode=sweep" in link and "seqs=1024%2C4096%2C16384" in link
    answer = answer_to(link, sweep=True)
    assert headline(page, "#sweep-verdict strong") == answer.explanation.headline.title
    page.wait_for_function("document.querySelectorAll('#sweep-table .virtual-row').length >= 6",
                           timeout=30_000)  # the table draws its rows after the chart, on a loaded machine seconds after
    rows = page.eval_on_selector_all("#sweep-table .virtual-row", ROWS)
    assert [(int(r[0].replace(",", "")), r[1], r[2]) for r in rows] == [
        (s, v, "ok") for s in (1024, 4096, 16384) for v in ("sdpa_flash", "sdpa_cudnn")]
    assert [float(r[3]) for r in rows] == [round(answer.result.at(v, s).gpu_ms, 4) for s in (1024, 4096, 16384)
                                           for v in ("sdpa_flash", "sdpa_cudnn")]
    assert page.evaluate(NO_SIDEWAYS_SCROLL)
    page.screenshot(path=ARTIFACTS / "sweep-1280x720.png", full_page=True)
    page.fill("#seqs textarea, #seqs input", "1024, 2000")
    page.click("#sweep-run")
    playwright.expect(page.get_by_text("The recorded sweep has no S=2,000", exact=False)).to_be_visible(
        timeout=20_000)  # said on the page, in one line


# -- a guest that behaves (the first screen, embeds, progress, the stage) -------------------------------------------
IN_VIEW = """(selectors) => selectors.every(s => { const e = document.querySelector(s); if (!e) return false;
    const b = e.getBoundingClientRect(); return b.height > 0 && b.top >= 0 && b.bottom <= window.innerHeight; })"""
SMALLEST_TEXT = """() => { let smallest = [1e9, ''];
    for (const e of document.querySelectorAll('body *')) {
        if (![...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim())) continue;
        const b = e.getBoundingClientRect(), style = getComputedStyle(e);
        if (b.width === 0 || b.height === 0 || style.visibility === 'hidden' || b.bottom < 0 || b.top > innerHeight)
            continue;
        const px = parseFloat(style.fontSize);
        if (px < smallest[0]) smallest = [px, e.textContent.trim().slice(0, 40)];
    }
    return smallest; }"""


# every scroll of the page's own document from its first script on, as the scroll position it left
COUNT_SCROLLS = "window.__scrolls = []; addEventListener('scroll', () => window.__scrolls.push(scrollY));"
SETTLED = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => done(true))))"
# what a click on a preset brings into view, the verdict (where its progress is drawn), is out of view: its first
# lines (64 px at most) not inside the viewport. Only then may the click scroll the page (`app.scroll_to`)
VERDICT_OUT_OF_VIEW = """() => { const v = document.querySelector('#verdict'); if (!v || v.offsetParent === null
    || !v.innerText.trim()) return false; const b = v.getBoundingClientRect();
    return b.top < 0 || b.top + Math.min(b.height, 64) > innerHeight; }"""
REFUSED = """(said) => [...document.querySelectorAll('.toast-body')].some(t => t.innerText.includes(said))
    && (document.querySelector('#coverage')?.innerText || '').includes(said)"""


def preset_refusal(name: str) -> str | None:
    """What the core refuses for a preset on the page's default source (a workload the recording lacks), or None."""
    source, a, b, *fields = app.apply_preset(name, app.DEFAULT_SOURCE)
    try:
        session.plan(Request.build(source, a, b, dict(zip((f.name for f in app.FIELDS), fields)), app.ENV.device))
    except Refusal as refusal:
        return str(refusal)
    return None


def test_the_first_screen_holds_run_the_presets_and_the_headline_and_never_moves(served, browser):
    """No scroll on load; after each preset the Run button, the presets and the headline all in the viewport, and
    the page where the visitor left it: it scrolls only when what a click asked for (the verdict, where the progress
    is drawn) is out of view. A preset the recording lacks (the decode presets until their H200 runs are recorded)
    says the core's refusal, in view. The headline is the explainer's word for word, and nothing is wider than the
    page. Every scroll of the page from its first script on is counted, not sampled.
    The two sizes are two visitors clicking at once (each page its own session), so that one's render overlaps the
    other's wait: the presets in turn, each clicked once, every other one at each size. Each wait is on the event itself (the headline of the clicked pair, or the
    refusal), then two drawn frames (the click's own scroll runs right after the render); the timeouts are a loaded
    machine's."""
    if app.DEFAULT_SOURCE == LIVE:
        pytest.skip("a GPU machine opens live: nothing renders on load")
    pages = {size: browser.new_page(viewport=SIZES[size]) for size in ("1280x720", "1024x768")}
    for page in pages.values():
        page.add_init_script(COUNT_SCROLLS)
        page.goto(served.url)
    for size, page in pages.items():
        page.wait_for_function(HEADLINE_IN_VIEW, arg=["naive", "sdpa_flash"], timeout=120_000)
        page.evaluate(SETTLED)
        assert page.evaluate("window.__scrolls") == [] and page.evaluate("window.scrollY") == 0, size
        assert page.evaluate(IN_VIEW, ["#run", "#preset-0", f"#preset-{len(app.PRESETS) - 1}", "#verdict strong"])
    names = list(app.PRESETS)
    for turn in range(0, len(names), 2):  # each visitor a preset a turn: every preset once, each size on half of them
        clicked = {size: turn + j for j, size in enumerate(pages) if turn + j < len(names)}
        before = {}
        for size, i in clicked.items():
            page = pages[size]
            before[size] = page.evaluate("window.__scrolls.length"), page.evaluate(VERDICT_OUT_OF_VIEW)
            page.click(f"#preset-{i}")
        for size, i in clicked.items():
            page, name = pages[size], names[i]
            a, b = app.apply_preset(name, app.DEFAULT_SOURCE)[1:3]
            refused = preset_refusal(name)
            if refused:
                page.wait_for_function(REFUSED, arg=refused, timeout=120_000)
            else:
                page.wait_for_function(HEADLINE_IN_VIEW, arg=[a, b], timeout=120_000)
            page.evaluate(SETTLED)
            scrolls, due = before[size]
            if not due:
                assert page.evaluate("window.__scrolls.length") == scrolls, f"{name}: the page moved at {size}"
            assert page.evaluate(IN_VIEW, ["#run", f"#preset-{i}", "#coverage" if refused else "#verdict strong"]), \
                (name, size)
            if not refused:  # the explainer's headline, word for word
                expected = answer_to(page.input_value(LINK_BOX)).explanation.headline.title
                assert headline(page) == expected, (name, size)
            assert page.evaluate(NO_SIDEWAYS_SCROLL), f"{name}: the page scrolls sideways at {size}"
    for size, page in pages.items():
        page.screenshot(path=ARTIFACTS / f"first-screen-{size}.png")


def test_two_embeds_on_a_blog_page_never_scroll_it(served, browser):
    """A blog page with two `view=embed` iframes, the second below the fold: the host page stays at the top while
    both load and after a preset in each (clicked by script: a real click would scroll the page to the button)."""
    page = browser.new_page(viewport=SIZES["1280x720"])
    src = f"{served.url}{LINK}&view=embed"
    page.set_content(f'<body style="margin:0"><p style="height:400px">A blog post.</p>'
                     f'<iframe id="one" src="{src}" width="760" height="900"></iframe><p style="height:900px">More.</p>'
                     f'<iframe id="two" src="{src}" width="760" height="900"></iframe><p style="height:900px">End.</p>'
                     f'<script>{COUNT_SCROLLS}</script></body>')  # every scroll of the host page, counted
    frames = [page.wait_for_selector(f"#{i}").content_frame() for i in ("one", "two")]
    for frame in frames:  # polled: a frame out of view gets no animation frames to poll on
        frame.wait_for_function("document.querySelector('#verdict strong')?.innerText.includes('cuDNN')",
                                timeout=120_000, polling=250)
    page.evaluate(SETTLED)
    assert page.evaluate("window.__scrolls") == [] and page.evaluate("window.scrollY") == 0
    for frame in frames:
        frame.dispatch_event("#preset-1", "click")  # math vs flash
        frame.wait_for_function("document.querySelector('#verdict strong')?.innerText.includes('SDPA · math')",
                                timeout=120_000, polling=250)
        frame.evaluate("() => new Promise(done => setTimeout(() => done(true), 0))")  # the click's scroll has run
        page.evaluate(SETTLED)
        assert page.evaluate("window.__scrolls") == [] and page.evaluate("window.scrollY") == 0
    page.screenshot(path=ARTIFACTS / "two-embeds-1280x720.png")


def test_a_live_runs_progress_is_drawn_where_the_eye_is(served, browser):
    page = browser.new_page(viewport=SIZES["1280x720"])
    page.goto(served.url + "?" + urlencode({"source": LIVE, "a": "naive", "b": "sdpa_math", "batch": 1, "heads": 4,
                                            "seq": 512, "head_dim": 64, "dtype": "fp32"}))
    page.wait_for_function("document.querySelector('#guess-b')?.innerText.includes('math')", timeout=20_000)
    # every moment the progress is on the page, as the browser lays it out (a short CPU run can end before a box read
    # after the wait comes back, which found it gone): where it is, and whether a stale banner stood beside it
    page.evaluate("""() => { window.__progress = [];
        new MutationObserver(() => {
            const el = document.querySelector('.progress-level');
            const r = el && el.getBoundingClientRect();
            if (r && r.height > 0) window.__progress.push({y: r.y, height: r.height,
                                                           stale: document.querySelector('#stale')?.innerText || ''});
        }).observe(document.body, {childList: true, subtree: true, attributes: true, characterData: true}); }""")
    page.click("#run")
    page.wait_for_function("window.__progress.length > 0", timeout=20_000)  # the stage and its share, on the verdict
    page.screenshot(path=ARTIFACTS / "progress-1280x720.png")
    page.wait_for_function("document.querySelector('#measured-on')?.innerText.includes('Measured live')",
                           timeout=60_000)
    seen = page.evaluate("window.__progress")
    assert all(0 <= box["y"] and box["y"] + box["height"] <= 720 for box in seen), seen
    assert not any("Controls changed" in box["stale"] for box in seen)  # no stale banner over a run in progress


@pytest.mark.parametrize("mode, sizes", [("compare", ["1024x768", "1920x1080"]),
                                         ("sweep", ["1280x720", "1024x768", "1920x1080"])])
def test_the_stage_view_fits_one_screen_with_every_text_at_18_px(served, browser, mode, sizes):
    """(The compare view at 1280x720 is the presentation view's test, on its page.) One page per mode, resized."""
    page = browser.new_page(viewport=SIZES[sizes[0]])
    page.goto(served.url + LINK + f"&view=present&mode={mode}")
    for size in sizes:
        page.set_viewport_size(SIZES[size])
        on_stage(page, size, mode)


def on_stage(page, size: str, mode: str) -> None:
    """The stage view at `size` once its chart and heading are drawn: it does not scroll; every text on screen,
    the chart's own included, is 18 px or more; the heading, the chart, both pickers, Run and the presets in view; on a
    screen 1,800 px wide or more the roofline beside the chart (its text 18 px or more too), on a narrower one not."""
    from profiling.figures import DPI, PRESENT_PT
    chart = "#present-chart" if mode == "compare" else "#sweep-present-chart"
    roof = "#present-roofline" if mode == "compare" else "#sweep-present-roofline"
    heading = "#present h2" if mode == "compare" else "#sweep-present h2"
    page.wait_for_selector(f"{chart} img", timeout=40_000)
    beside = SIZES[size]["width"] >= 1800
    if beside:
        page.wait_for_selector(f"{roof} img", timeout=40_000)
    assert page.locator(roof).is_visible() == beside, (size, roof)
    page.wait_for_function(f"document.querySelector('{heading}')?.innerText.includes('cuDNN')", timeout=10_000)
    height = SIZES[size]["height"]
    assert page.evaluate("document.documentElement.scrollHeight") <= height, "the stage view scrolls"
    smallest, where = page.evaluate(SMALLEST_TEXT)
    assert smallest >= 18, (smallest, where)
    for figure in (chart, roof) if beside else (chart,):
        assert PRESENT_PT * DPI / 72 * page.evaluate(
            f"(() => {{ const i = document.querySelector('{figure} img'); "
            "return i.getBoundingClientRect().width / i.naturalWidth; })()") >= 18  # the figure's own text
    figures = f"{chart} img" + (f", {roof} img" if beside else "")
    assert page.evaluate(IN_VIEW, [heading, *figures.split(", "), "#pick-a", "#pick-b", "#run", "#preset-0"])
    # the headline, the chart and the one reason fill the screen: the box around them is 80% of it or more
    words = "#present" if mode == "compare" else "#sweep-present"
    filled = page.evaluate(f"""() => {{ const boxes = [...document.querySelectorAll('{heading}, {figures}, {words} p')]
        .map(e => e.getBoundingClientRect()).filter(b => b.height > 0);
        const x0 = Math.min(...boxes.map(b => b.left)), x1 = Math.max(...boxes.map(b => b.right));
        const y0 = Math.min(...boxes.map(b => b.top)), y1 = Math.max(...boxes.map(b => b.bottom));
        return (x1 - x0) * (y1 - y0) / (innerWidth * innerHeight); }}""")
    print(f"\nstage {mode} at {size}: headline, chart and reason fill {filled:.0%} of the screen")
    assert filled >= 0.8, filled
    page.screenshot(path=ARTIFACTS / f"stage-{mode}-{size}.png")


def test_a_sweep_embed_fits_its_frame_and_an_unrecorded_sweep_says_so_in_two_lines(served, browser):
    """The README's 760x1400 iframe holding `mode=sweep`: the whole embed within the frame (it was 1,670 px); a sweep
    the recording lacks refused in two lines at most (it took twelve)."""
    page = browser.new_page(viewport={"width": 800, "height": 1000})
    for query, recorded in ((LINK + "&mode=sweep", True), (LINK + "&mode=sweep&heads=8", False)):
        page.set_content(f'<body style="margin:0"><iframe src="{served.url}{query}&view=embed" width="760" '
                         'height="1400" style="border:0"></iframe></body>')
        frame = page.wait_for_selector("iframe").content_frame()
        if recorded:
            frame.wait_for_selector("#sweep-chart img", timeout=60_000)
        else:
            frame.wait_for_function("(document.querySelector('#coverage')?.innerText || '').includes('has no')",
                                    timeout=60_000)
            lines = frame.evaluate("""() => { const p = document.querySelector('#coverage p');
                return Math.round(p.getBoundingClientRect().height / parseFloat(getComputedStyle(p).lineHeight)); }""")
            assert lines <= 2, lines
        height = frame.evaluate("document.documentElement.scrollHeight")
        print(f"\nsweep embed ({'recorded' if recorded else 'unrecorded'}): {height} px in a 1,400 px frame")
        assert height <= 1400 + 8, height
        page.screenshot(path=ARTIFACTS / f"embed-sweep-{'recorded' if recorded else 'unrecorded'}.png", full_page=True)


def test_the_timeline_says_in_words_what_it_shows(served, browser):
    from profiling.timeline import run_timeline
    page = browser.new_page(viewport=SIZES["1280x720"])
    page.goto(served.url + LINK)
    page.wait_for_selector("#timeline img", timeout=40_000)
    caption = page.inner_text("#timeline-caption")
    answer = answer_to(page.input_value(LINK_BOX))
    for side, run in (("A", answer.result.a), ("B", answer.result.b)):
        t = run_timeline(run)
        assert (f"{side} ({run.variant}): the CPU finished issuing at {text.us(t.range_us)}, the GPU finished at "
                f"{text.us(max(s.end_us for s in t.gpu))}") in caption
    assert "Thin lines join each launch to the GPU work it started." in caption


# -- last: the server at rest, and what it logged while every test above used it ---------------------------------------
def test_a_server_with_no_page_open_uses_under_4_percent_of_a_core(served):
    """gradio's queue polls for work: every 1 ms it took 5.5–6.3% of a core here with nobody on the page, in the
    process a live CPU measurement runs in; the app slows it to 10 ms (serving.QUEUE_POLL_S), ~2%. The process's own
    CPU time (Linux's /proc), the lower of two 3 s spells (a closed page's last event may still be rendering): a
    loaded machine gives a polling loop fewer turns, never more."""
    pid = served.pid
    if not Path(f"/proc/{pid}/stat").exists():
        pytest.skip("no /proc here")

    def cpu_s() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    shares = []
    for _ in range(2):
        cpu, wall = cpu_s(), time.monotonic()
        time.sleep(3)
        shares.append((cpu_s() - cpu) / (time.monotonic() - wall))
    assert min(shares) < 0.04, shares


def test_the_server_log_holds_only_the_apps_own_lines(served):
    """After live runs, replays, sweeps, crafted links and refusals from the tests above: every line of the log is
    gradio's start-up or the app's own one-line refusal; no traceback, no library's warning, no profiler error (on a
    GPU, Kineto's "External init callback must run in same thread as registerClient" once was one)."""
    log = (ARTIFACTS / "app.log").read_text()
    foreign = [line for line in log.splitlines() if line.strip()
               and not any(re.fullmatch(pattern, line) for pattern in OWN_LINES)]
    assert not foreign, "\n".join(foreign[:20])
