"""Every page of the built book at a desktop (1280 px) and a phone (390 px) width: does it render as written,
offline, accessibly?

Each view (a page at a width) is opened once, by the module-scoped fixture :func:`view` (pytest runs every
test of one view before it opens the next; the fixture fails a view opened twice), with its requests and
console messages recorded from before it loads; it is settled (MathJax typeset, fonts, images and widgets
drawn) before the first test. The tests then check it, in this order (those that change the page last):

* :func:`test_layout`: **no Markdown left raw** in the prose (paragraphs, list items, table cells,
  definitions, headings; code and typeset math left out): no Markdown table row (a line ``| ... |``), no
  ``| --- |`` rule, no ``**bold**``, no backticked code and no ``$...$`` math left as text
  (:data:`RAW_MARKDOWN`); **no sideways scroll of the page** (``document.documentElement.scrollWidth`` at
  most the window's width, +1 px for rounding); **no display equation cut off** (each display
  ``mjx-container`` fits in the window or sits in a box that scrolls sideways: itself or an ancestor with
  ``overflow-x: auto`` or ``scroll`` that fits the window);
* :func:`test_math_and_images`: MathJax turned every math block into ``mjx-container`` elements, none
  typeset as a TeX error or an undefined macro (``mathjax.py``), and every ``<img>`` loaded;
* :func:`test_accessibility`: no critical or serious violation by axe-core, in light and dark mode
  (``axe.py`` says which rules run where, and why the colour rules check each style once a session);
* :func:`test_widgets_respond`: every widget view drawn from the stored widget state, and every control of
  each widget changes what that widget shows when moved (``widgets.py``);
* :func:`test_solutions_hidden`: exercise solutions hidden until their toggle is clicked;
* :func:`test_requests_and_console`: once every request is answered (those the controls caused too), no
  failed request, no request to a host other than the local server, and no console error beyond
  :data:`ALLOWED_CONSOLE_ERRORS`.

Pages are opened one after the other, and every wait is on an event or a DOM condition with a generous
timeout (a loaded CI machine once needed more than 30 s for MathJax), never a fixed sleep. The widths are
those of ``book/_static/layout.css``. Needs ``_build/html`` (``make book``), ``/usr/bin/chromium`` and, for
the accessibility test, axe-core (``make assets``); outside CI a missing one skips the tests, with
``CI=true`` it fails them. The number of views and the module's time are printed at the end (``-s``).
"""

from __future__ import annotations

import re
import time
from urllib.parse import urlparse

import pytest

from tests.browser.axe import AXE, FAILING, accessibility_problems, axe_available, colour_outcomes_by_style, set_mode
from tests.browser.common import PAGES, SITE, WIDTHS, need, opened
from tests.browser.mathjax import MATHJAX_MS, tex_errors
from tests.browser.widgets import WAIT_MS, widget_problems

pytestmark = pytest.mark.browser

#: What Markdown left unrendered looks like in a page's prose, with what to call it.
RAW_MARKDOWN: list[tuple[re.Pattern, str]] = [
    (re.compile(r"^\s*\|.*\|\s*$", re.M), "a Markdown table row"),
    (re.compile(r"\|\s*:?-{3,}:?\s*\|"), "a Markdown table rule"),
    (re.compile(r"\|\s*—\s*\|"), "a Markdown table rule (typographer dashes)"),
    (re.compile(r"\*\*[^*\s][^*]*\*\*"), "**bold** left as text"),
    (re.compile(r"`[^`\s][^`]*`"), "backticked code left as text"),
    (re.compile(r"\$[^$\s][^$]*\$"), "$math$ left as text"),
]

# Console messages that are not failures of the book. Keep this list short and explained.
ALLOWED_CONSOLE_ERRORS: list[re.Pattern] = []

#: The page whose colour rules read the most elements (code tokens): where the colour rules' one result
#: per style is proven.
HEAVIEST = "chapters/ch06_tiled_attention.html"

# The prose of the page: every paragraph, list item, table cell, definition and
# heading of the article, as text, with code, typeset math and scripts removed.
_JS_PROSE = """() => {
  const sel = 'p, li, td, th, dt, dd, h1, h2, h3, h4, h5, h6, caption, figcaption';
  return Array.from(document.querySelectorAll('article.bd-article')).flatMap(a =>
    Array.from(a.querySelectorAll(sel)).filter(e => !e.closest('pre, .highlight, .cell_input')).map(e => {
      const c = e.cloneNode(true);
      c.querySelectorAll('code, kbd, samp, pre, mjx-container, .math, script, style, ' + sel).forEach(x => x.remove());
      return c.textContent;
    }));
}"""

# Every display equation that is neither inside the window nor in a box that scrolls sideways.
_JS_CUT_EQUATIONS = """() => {
  const W = window.innerWidth;
  const scrolls = (e) => ['auto', 'scroll'].includes(getComputedStyle(e).overflowX);
  const bad = [];
  document.querySelectorAll('mjx-container[display="true"]').forEach((m, i) => {
    const r = m.getBoundingClientRect();
    if (r.width === 0) return;  // not shown (a collapsed cell)
    const fits = r.left >= -1 && r.right <= W + 1 && m.scrollWidth <= m.clientWidth + 1;
    if (fits) return;
    let box = m;
    while (box && !scrolls(box)) box = box.parentElement;
    if (box && box.getBoundingClientRect().right <= W + 1) return;
    bad.push(`equation ${i} (${Math.round(r.left)}..${Math.round(r.right)} px of ${W}): ` +
             (m.getAttribute('aria-label') || m.textContent).slice(0, 60));
  });
  return bad;
}"""

VIEWS = [(path, width) for width in WIDTHS.values() for path in PAGES]


@pytest.fixture(scope="module")
def opened_views():
    """The views this module has opened; prints how many, and the module's time, at the end."""
    started = time.monotonic()
    views: list[tuple[str, int]] = []
    yield views
    print(f"\ntest_pages: {len(views)} views opened in {time.monotonic() - started:.1f} s")


@pytest.fixture(scope="module")
def seen_styles() -> set[str]:
    """The styles the colour rules have checked in this module (``axe.py``)."""
    return set()


@pytest.fixture(scope="module", params=VIEWS, ids=[f"{path}-{width}" for path, width in VIEWS])
def view(request, book_site, browser, opened_views):
    """A page of the book at a width, opened once for every test of this module."""
    path, width = request.param
    assert (SITE / path).is_file(), f"{path} missing from the built site"
    assert (path, width) not in opened_views, f"{path} at {width} px opened a second time"
    opened_views.append((path, width))
    with opened(browser, f"{book_site}/{path}", width, path) as v:
        yield v


def _where(view) -> str:
    return f"{view.path} at {view.width} px"


def raw_markdown(texts: list[str]) -> list[str]:
    """Every piece of Markdown left as text in ``texts`` (the prose of a page): ``"<what>: <text>"``."""
    found = []
    for text in texts:
        for pattern, what in RAW_MARKDOWN:
            m = pattern.search(text)
            if m:
                found.append(f"{what}: {m.group(0).strip()[:80]!r}")
    return found


def layout_problems(page) -> list[str]:
    """Raw Markdown in the prose, a sideways scroll of the page, display equations cut off."""
    problems = raw_markdown(page.evaluate(_JS_PROSE))
    scroll_width, window = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    if scroll_width > window + 1:
        problems.append(f"the page scrolls sideways by {scroll_width - window} px at {window} px")
    return problems + page.evaluate(_JS_CUT_EQUATIONS)


def test_layout(view):
    problems = layout_problems(view.page)
    assert not problems, f"{_where(view)}: {problems}"


def test_math_and_images(view):
    page = view.page
    # Math: MathJax replaced every \( \) / \[ \] block with mjx-container elements,
    # none of them an error or an undefined macro (drawn in red, inside a container too).
    n_math = page.locator(".math").count()
    if n_math:
        assert page.locator("mjx-container").count() >= n_math, f"{_where(view)}: math not typeset"
        raw = page.evaluate(
            "() => Array.from(document.querySelectorAll('.math')).filter(e => !e.querySelector('mjx-container')).length"
        )
        assert raw == 0, f"{_where(view)}: {raw} math blocks left as raw TeX"
        bad = tex_errors(page)
        assert not bad, f"{_where(view)}: TeX that MathJax could not typeset: {bad}"
    # Images: every <img> finished loading with a real size.
    broken = page.evaluate(
        "() => Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)"
    )
    assert not broken, f"{_where(view)}: images not loaded: {broken}"


def test_accessibility(view, seen_styles):
    need(axe_available(), f"no axe-core at {AXE} (run `make assets`)")
    problems = accessibility_problems(view.page, seen_styles)
    assert not problems, f"{_where(view)}: {problems}"


def test_widgets_respond(view):
    """Every widget view on the page was drawn (a page whose notebook was saved without widget state
    fails), and each of its own controls changes what it shows."""
    problems = widget_problems(view.page, WAIT_MS)
    assert not problems, f"{_where(view)}: widgets: {problems}"


def test_solutions_hidden(view):
    """Cells tagged hide-input (exercise solutions) show their code only after the toggle."""
    cells = view.page.locator(".cell.tag_hide-input")
    for i in range(cells.count()):
        cell = cells.nth(i)
        code = cell.locator(".cell_input")
        assert not code.is_visible(), f"{_where(view)}: solution cell {i} is visible before its toggle is clicked"
        cell.locator("summary, button.toggle-button").first.click()
        code.wait_for(state="visible", timeout=WAIT_MS)


def test_requests_and_console(view, book_site):
    """Every request the page made (fonts MathJax fetched, those the controls caused) was answered, from the
    local server; nothing was logged as an error."""
    view.requests.wait_until_none_in_flight(view.page, MATHJAX_MS)
    host = urlparse(book_site).netloc
    urls = view.requests.urls
    foreign = [u for u in urls if urlparse(u).scheme in {"http", "https"} and urlparse(u).netloc != host]
    assert not foreign, f"{_where(view)}: requests to other hosts: {foreign}"
    assert not view.requests.failed, f"{_where(view)}: failed requests: {view.requests.failed}"
    unexpected = [e for e in view.console_errors if not any(p.search(e) for p in ALLOWED_CONSOLE_ERRORS)]
    assert not unexpected, f"{_where(view)}: console errors: {unexpected}"


def test_raw_markdown_patterns_find_what_they_should():
    """The patterns catch the raw forms the book once showed and pass rendered prose."""
    raw = [
        "| item | what | implemented by | tested by |\n| --- | --- | --- | --- |",
        "| — | — |",
        "this is **important**",
        "math as `e_l` in backticks",
        "an unrendered $e_l$ here",
    ]
    assert len(raw_markdown(raw)) >= len(raw)
    assert not raw_markdown(["Costs 5 dollars; a | b is a pipe; 2 * 3 * 4; it's fine", "a — b"])


_LAYOUT_FIXTURE = """<!doctype html><html><body style="margin:0">
<article class="bd-article">
<p>| item | what |</p><p>rendered <code>`code`</code> and <strong>bold</strong></p>
<div id="cut"><mjx-container display="true" style="display:block; width:2000px">wide</mjx-container></div>
<div id="boxed" style="overflow-x:auto; max-width:100%">
  <mjx-container display="true" style="display:block; width:2000px">wide</mjx-container></div>
<mjx-container display="true" style="display:block; width:100px">narrow</mjx-container>
</article></body></html>"""


def test_the_checks_fail_a_page_that_scrolls_or_cuts_an_equation(browser):
    """On a fixture page: the raw table row is found (the code inside <code> is not), the page
    scrolls sideways, and only the wide equation outside a scrolling box is reported as cut off."""
    page = browser.new_page()
    try:
        page.set_viewport_size({"width": 390, "height": 600})
        page.set_content(_LAYOUT_FIXTURE)
        problems = layout_problems(page)
        assert problems[0] == "a Markdown table row: '| item | what |'", problems
        assert problems[1].startswith("the page scrolls sideways by "), problems
        assert len(problems) == 3 and problems[2].startswith("equation 0 "), problems
    finally:
        page.close()


_A11Y_FIXTURE = """<!doctype html><html lang="en"><head><title>fixture</title><style>
html[data-theme="dark"] body, html[data-theme="dark"] p {background: #222; color: #333}
html[data-theme="dark"] h1 {color: #eee}
.faint {color: #aaa}
</style></head><body><main><h1>Fixture</h1>
<p>Readable in light mode, not in dark mode.</p>
<img src="data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==">
<div role="slider" tabindex="0" aria-valuemin="0" aria-valuemax="5" aria-valuenow="1"></div>
FAINT
</main></body></html>"""


def test_the_accessibility_check_fails_a_page_with_violations(browser):
    """On a fixture page: an image without alternative text and an unlabelled slider are found in
    light mode; a faint style repeated many times is found once, naming how many elements share it,
    in light mode and, for text that loses its contrast only in dark mode, in dark mode. A second page
    of the same session is not blamed again for a style the first was blamed for, but is for a new one."""
    need(axe_available(), f"no axe-core at {AXE} (run `make assets`)")
    faint = "".join(f'<p class="faint">faint line {i}</p>' for i in range(40))
    page = browser.new_page()
    try:
        seen: set[str] = set()
        page.set_content(_A11Y_FIXTURE.replace("FAINT", faint))
        found = accessibility_problems(page, seen)
        assert any(p.startswith("light: image-alt (critical") for p in found), found
        assert any(p.startswith("light: aria-input-field-name (serious") for p in found), found
        light = [p for p in found if p.startswith("light: color-contrast (serious")]
        assert len(light) == 1 and "1 elements checked, standing for 40 of the same styles" in light[0], found
        # in dark mode the faint lines and the readable one share one style that exists only there
        dark = [p for p in found if p.startswith("dark: color-contrast (serious")]
        assert len(dark) == 1 and "1 elements checked, standing for 41 of the same styles" in dark[0], found
        assert seen, "the styles checked were not recorded"
        # the next page: the faint style again (not blamed twice), and a new one with too little contrast
        page.set_content(_A11Y_FIXTURE.replace("FAINT", faint + '<p style="color: #bbb">fainter</p>'))
        again = [p for p in accessibility_problems(page, seen) if "color-contrast" in p]
        assert len(again) == 1 and "1 elements checked, standing for 1 of the same styles" in again[0], again
        page.set_content(
            _A11Y_FIXTURE.replace("FAINT", "")
            .replace("<img ", '<img alt="one pixel" ')
            .replace('role="slider"', 'role="slider" aria-label="d_k"')
            .replace("color: #333", "color: #ddd")
        )
        assert not accessibility_problems(page), "the mended fixture still fails"
    finally:
        page.close()


# The three rules of axe 4.11 rated minor or moderate that hold a check rated higher (a user-scalable=no
# viewport, an empty heading, a scope attribute on a data cell): the violations they report.
_LOW_RULES_FIXTURE = """<!doctype html><html lang="en"><head><title>fixture</title>
<meta name="viewport" content="width=device-width, user-scalable=no, maximum-scale=1"></head>
<body><main><h1>Fixture</h1><h2></h2><table><tr><th scope="col">a</th></tr><tr><td scope="row">b</td></tr></table>
</main></body></html>"""


def test_a_rule_rated_below_serious_reports_its_own_impact(browser):
    """What leaving out the rules rated minor or moderate relies on: a violation carries its rule's impact, not
    its failing check's. Every rule whose checks' highest impact is above the rule's own is planted on a fixture
    page; each reports the rule's impact. A new axe with another such rule fails here until it is planted too."""
    need(axe_available(), f"no axe-core at {AXE} (run `make assets`)")
    order = ["minor", "moderate", "serious", "critical"]
    page = browser.new_page()
    try:
        page.set_content(_LOW_RULES_FIXTURE)
        page.add_script_tag(path=str(AXE))
        rules = page.evaluate(
            """(order) => axe._audit.rules.map(r => [r.id, r.impact,
                 [...r.any, ...r.all, ...r.none].map(c => (axe._audit.data.checks[c.id || c] || {}).impact)
                   .filter(Boolean).sort((a, b) => order.indexOf(a) - order.indexOf(b)).pop()])""",
            order,
        )
        higher = sorted(rid for rid, impact, top in rules if impact not in FAILING and top in FAILING)
        assert higher == ["empty-heading", "meta-viewport", "scope-attr-valid"], higher
        reported = page.evaluate(
            """async (ids) => (await axe.run(document, {runOnly: {type: 'rule', values: ids}})).violations
                 .map(v => [v.id, v.impact, v.nodes.map(n => n.impact)])""",
            higher,
        )
        assert sorted(r[0] for r in reported) == higher, reported
        impact = {rid: rule_impact for rid, rule_impact, _ in rules}
        for rid, said, nodes in reported:
            assert said == impact[rid] and set(nodes) == {impact[rid]}, (rid, said, nodes)
    finally:
        page.close()


_UNDECIDED_FIXTURE = """<!doctype html><html lang="en"><head><title>fixture</title><style>
.faint {color: #bbb; margin: 0; line-height: 20px}
.cover {position: absolute; top: 0; left: 0; right: 0; height: 14px; background: #fff}
</style></head><body><main><h1>Fixture</h1>
<div style="position: relative"><p class="faint">half covered by a box axe sees over it</p><div class="cover"></div></div>
<p class="faint">faint and in the open</p><p class="faint">faint and in the open too</p>
</main></body></html>"""


def test_a_style_axe_cannot_judge_on_its_first_element_is_checked_on_the_others(browser):
    """The first element of a faint style lies half under another element's box, so axe leaves it
    undecided (incomplete); the other elements of that style are checked, and the faint ones reported.
    The style is then known: a later page with it is not checked again."""
    need(axe_available(), f"no axe-core at {AXE} (run `make assets`)")
    page = browser.new_page()
    try:
        seen: set[str] = set()
        page.set_content(_UNDECIDED_FIXTURE)
        found = [p for p in accessibility_problems(page, seen) if p.startswith("light: color-contrast")]
        assert len(found) == 1 and found[0].startswith("light: color-contrast (serious, 2 elements checked"), found
        page.set_content(_UNDECIDED_FIXTURE)
        assert not accessibility_problems(page, seen)
    finally:
        page.close()


def test_the_colour_rules_give_one_result_per_style(browser, book_site):
    """What ``axe.py``'s colour check relies on, on the heaviest page, in light and in dark mode: the
    elements of one style that axe judges (a pass or a violation, with the colours it computed) or that
    the rules do not apply to all have the same outcome. Some may be undecided (incomplete): another
    element's box lies over them in axe's grid of the page, which the style does not describe;
    ``axe.py`` then checks the other elements of that style."""
    need(axe_available(), f"no axe-core at {AXE} (run `make assets`)")
    with opened(browser, f"{book_site}/{HEAVIEST}", WIDTHS["desktop"], HEAVIEST) as v:
        for mode in ["light", "dark"]:
            set_mode(v.page, mode)
            groups = colour_outcomes_by_style(v.page)
            assert len(groups) > 50, f"{mode}: only {len(groups)} styles"
            mixed = {style: found for style, found in groups.items() if len(set(found) - {"incomplete"}) > 1}
            assert not mixed, f"{mode}: styles whose elements the colour rules judge differently: {mixed}"
