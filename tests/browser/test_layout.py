"""Every page of the built book at a desktop (1280 px) and a phone (390 px) width: does it render as written?

Per page and width (one chromium, pages opened one after the other):

* **no Markdown left raw** in the prose (paragraphs, list items, table cells,
  definitions, headings; code and typeset math left out): no Markdown table row
  (a line ``| ... |``), no ``| --- |`` rule, no ``**bold**``, no backticked code
  and no ``$...$`` math left as text (:data:`RAW_MARKDOWN`);
* **no sideways scroll of the page**: ``document.documentElement.scrollWidth``
  is at most the window's width (+1 px for rounding);
* **no display equation cut off**: each display ``mjx-container`` either fits
  in the window or sits in a box that scrolls sideways (itself or an ancestor
  with ``overflow-x: auto`` or ``scroll`` that fits the window).

``test_accessibility.py`` runs axe-core on the same pages and widths.

The widths are those of ``book/_static/layout.css``; ``test_site.py`` checks
the rest of each page (math typeset, images, widgets, requests). Needs
``_build/html`` (``make book``) and ``/usr/bin/chromium``; outside CI a missing
browser or site skips these tests, with ``CI=true`` it fails them. The time
of the whole module is printed at the end (``-s``).
"""

from __future__ import annotations

import re
import time

import pytest

from tests.browser.common import every_page_and_width, opened

#: What Markdown left unrendered looks like in a page's prose, with what to call it.
RAW_MARKDOWN: list[tuple[re.Pattern, str]] = [
    (re.compile(r"^\s*\|.*\|\s*$", re.M), "a Markdown table row"),
    (re.compile(r"\|\s*:?-{3,}:?\s*\|"), "a Markdown table rule"),
    (re.compile(r"\|\s*—\s*\|"), "a Markdown table rule (typographer dashes)"),
    (re.compile(r"\*\*[^*\s][^*]*\*\*"), "**bold** left as text"),
    (re.compile(r"`[^`\s][^`]*`"), "backticked code left as text"),
    (re.compile(r"\$[^$\s][^$]*\$"), "$math$ left as text"),
]

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

_TIMES: list[float] = []


@pytest.fixture(scope="module")
def server(book_site):
    started = time.monotonic()
    yield book_site
    print(f"\ntest_layout: {len(_TIMES)} page views in {time.monotonic() - started:.1f} s")


def raw_markdown(texts: list[str]) -> list[str]:
    """Every piece of Markdown left as text in ``texts`` (the prose of a page): ``"<what>: <text>"``."""
    found = []
    for text in texts:
        for pattern, what in RAW_MARKDOWN:
            m = pattern.search(text)
            if m:
                found.append(f"{what}: {m.group(0).strip()[:80]!r}")
    return found


@pytest.mark.browser
@every_page_and_width
def test_page_layout(server, browser, page_path, width):
    started = time.monotonic()
    try:
        with opened(browser, f"{server}/{page_path}", width) as page:
            problems = raw_markdown(page.evaluate(_JS_PROSE))
            scroll_width, window = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
            if scroll_width > window + 1:
                problems.append(f"the page scrolls sideways by {scroll_width - window} px at {window} px")
            problems += page.evaluate(_JS_CUT_EQUATIONS)
    finally:
        _TIMES.append(time.monotonic() - started)
    assert not problems, f"{page_path} at {width} px: {problems}"


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


_FIXTURE = """<!doctype html><html><body style="margin:0">
<article class="bd-article">
<p>| item | what |</p><p>rendered <code>`code`</code> and <strong>bold</strong></p>
<div id="cut"><mjx-container display="true" style="display:block; width:2000px">wide</mjx-container></div>
<div id="boxed" style="overflow-x:auto; max-width:100%">
  <mjx-container display="true" style="display:block; width:2000px">wide</mjx-container></div>
<mjx-container display="true" style="display:block; width:100px">narrow</mjx-container>
</article></body></html>"""


@pytest.mark.browser
def test_the_checks_fail_a_page_that_scrolls_or_cuts_an_equation(browser):
    """On a fixture page: the raw table row is found (the code inside <code> is not), the page
    scrolls sideways, and only the wide equation outside a scrolling box is reported as cut off."""
    page = browser.new_page()
    try:
        page.set_viewport_size({"width": 390, "height": 600})
        page.set_content(_FIXTURE)
        assert raw_markdown(page.evaluate(_JS_PROSE)) == ["a Markdown table row: '| item | what |'"]
        assert page.evaluate("() => document.documentElement.scrollWidth") > 391
        cut = page.evaluate(_JS_CUT_EQUATIONS)
        assert len(cut) == 1 and cut[0].startswith("equation 0 ")
    finally:
        page.close()
