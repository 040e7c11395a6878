"""The chapter slide decks (``make slides``, ``scripts/slides.py``) open offline in chromium.

The decks are built afresh from the chapter notebooks into a temporary folder and served from
127.0.0.1. For every deck: reveal.js has initialised with a title, objectives and summary slide;
MathJax has typeset every formula (no raw ``$$``, no MathJax error, no MyST role left over); every
image has loaded; and no request went to any other host (every request is routed: anything not
from the local server is aborted and fails the test).
"""

from __future__ import annotations

import pytest

from tests.browser.common import ROOT, need, serve
from tests.helpers import load_script

TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def decks(tmp_path_factory):
    slides = load_script("slides")
    need(slides.REVEAL.is_dir() and slides.MATHJAX.is_dir(), "no reveal.js/MathJax in book/_vendor: run make assets")
    pytest.importorskip("nbconvert")
    out = tmp_path_factory.mktemp("slides")
    written = slides.build(slides.chapters(), out)
    return out, written


def test_one_deck_per_chapter(decks):
    _, written = decks
    names = {p.stem for p in written}
    chapters = {p.stem for p in (ROOT / "chapters").glob("*.ipynb")}
    assert names == chapters


# Every text node of the slides outside typeset math: nothing of the source may be left raw.
RAW_TEXT_JS = """() => {
  const walker = document.createTreeWalker(document.querySelector('.reveal .slides'), NodeFilter.SHOW_TEXT);
  const raw = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (n.parentElement.closest('mjx-container, script, style')) continue;
    const t = n.textContent;
    if (/\\$\\$|\\\\begin\\{|\\\\frac|\\{(cite|term|eq|doc|ref)[:}]/.test(t)) raw.push(t.trim().slice(0, 80));
  }
  return raw;
}"""

STATE_JS = """() => ({
  ready: typeof Reveal !== 'undefined' && Reveal.isReady(),
  total: typeof Reveal !== 'undefined' ? Reveal.getTotalSlides() : 0,
  headings: Array.from(document.querySelectorAll('.reveal .slides h2')).map(h => h.textContent.trim()),
  math: document.querySelectorAll('.reveal .slides mjx-container').length,
  displayMath: document.querySelectorAll('.reveal .slides mjx-container[display="true"]').length,
  errors: document.querySelectorAll('mjx-merror').length,
  images: Array.from(document.querySelectorAll('.reveal .slides img'))
    .map(i => [i.complete && i.naturalWidth > 0, i.src.slice(0, 40)]),
})"""


def _offline_page(browser, url: str):
    """A page on which every request off ``url`` is aborted and recorded in the returned list."""
    page = browser.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    foreign: list[str] = []

    def route(r):
        if r.request.url.startswith(url + "/"):
            r.continue_()
        else:
            foreign.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    return page, foreign


def test_the_offline_check_sees_a_request_to_another_host(browser, tmp_path):
    (tmp_path / "deck.html").write_text(
        "<html><head><script src='https://cdn.jsdelivr.net/npm/reveal.js/dist/reveal.js'></script></head>"
        "<body><img src='http://198.51.100.7/figure.png'></body></html>"
    )
    with serve(tmp_path) as url:
        page, foreign = _offline_page(browser, url)
        page.goto(f"{url}/deck.html", wait_until="load")
        page.close()
    assert len(foreign) == 2, foreign


def test_every_deck_is_offline_typeset_and_complete(decks, browser):
    out, written = decks
    problems = []
    with serve(out) as url:
        page, foreign = _offline_page(browser, url)
        for deck in written:
            page.goto(f"{url}/{deck.name}", wait_until="load")
            page.wait_for_function("() => typeof Reveal !== 'undefined' && Reveal.isReady()")
            page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
            page.evaluate("() => MathJax.startup.promise")
            page.wait_for_function("() => Array.from(document.images).every(i => i.complete)")
            state = page.evaluate(STATE_JS)
            raw = page.evaluate(RAW_TEXT_JS)
            name = deck.stem
            if not state["ready"] or state["total"] < 4:
                problems.append(f"{name}: reveal.js not initialised ({state['total']} slides)")
            for needed in ("Learning objectives", "Summary"):
                if needed not in state["headings"]:
                    problems.append(f"{name}: no '{needed}' slide")
            if state["displayMath"] == 0 or state["errors"]:
                problems.append(f"{name}: {state['displayMath']} display formulas, {state['errors']} MathJax errors")
            if not state["images"] or not all(ok for ok, _ in state["images"]):
                problems.append(f"{name}: images not loaded {state['images']}")
            if raw:
                problems.append(f"{name}: raw source in the slides {raw[:3]}")
        page.close()
    assert not foreign, f"requests to other hosts: {foreign[:5]}"
    assert not problems, "\n".join(problems)
