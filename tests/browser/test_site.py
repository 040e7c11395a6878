"""Open every page of the built book in a real browser (Debian chromium via playwright).

Checks per page: no raw TeX left (MathJax turned every math block into
``mjx-container`` elements) and none typeset as a TeX error or an undefined
macro (``mathjax.py``), every ``<img>`` loaded, every widget view drawn from
the stored widget state and every control of each widget changes what that
widget shows when moved (``widgets.py``), exercise solutions hidden
until their toggle is clicked, no failed request, no request to a host other
than the local server, no console error beyond ALLOWED_CONSOLE_ERRORS.

Pages are opened one after the other, and every wait is on an event or a DOM
condition with a generous timeout (a loaded CI machine once needed more than
30 s for MathJax), never a fixed sleep. Nor on playwright's
``networkidle`` (no request for 500 ms, a timing heuristic): on a loaded machine
it never came for three pages whose every request had been answered, each
failing after 120 s. Requests are counted from their own events instead
(:class:`Requests`), and the page is done when none is in flight.

Needs ``_build/html`` (``make book``) and ``/usr/bin/chromium``. Outside CI a
missing browser or site skips these tests; with ``CI=true`` it fails them.
"""

from __future__ import annotations

import re
import time
from urllib.parse import urlparse

import pytest

from tests.browser.common import PAGES, SITE, need, serve
from tests.browser.mathjax import MATHJAX_MS, tex_errors, wait_typeset
from tests.browser.widgets import WAIT_MS, widget_problems

# Console messages that are not failures of the book. Keep this list short and explained.
ALLOWED_CONSOLE_ERRORS: list[re.Pattern] = []


@pytest.fixture(scope="module")
def server():
    need(SITE.joinpath("index.html").is_file(), f"no built site at {SITE} (run `make book`)")
    with serve(SITE) as url:
        yield url


class Requests:
    """Every request of a page, from its events: started, failed (no answer, or HTTP >= 400), in flight."""

    def __init__(self, page):
        self.urls: list[str] = []
        self.failed: list[str] = []
        self.in_flight: dict[object, str] = {}
        page.on("request", self._started)
        page.on("requestfinished", lambda r: self.in_flight.pop(r, None))
        page.on("requestfailed", self._failed)
        page.on("response", lambda r: self.failed.append(f"{r.url} (HTTP {r.status})") if r.status >= 400 else None)

    def _started(self, request) -> None:
        self.urls.append(request.url)
        self.in_flight[request] = request.url

    def _failed(self, request) -> None:
        self.in_flight.pop(request, None)
        self.failed.append(f"{request.url} ({request.failure})")

    def wait_until_none_in_flight(self, page, timeout_ms: int) -> None:
        """Return once every request started so far has finished or failed (each wait is on a
        ``requestfinished`` event; a failure ends the wait at the timeout, and the test reports it)."""
        deadline = time.monotonic() + timeout_ms / 1000
        while self.in_flight and not self.failed and time.monotonic() < deadline:
            try:
                page.wait_for_event("requestfinished", timeout=max(1.0, (deadline - time.monotonic()) * 1000))
            except Exception:  # playwright TimeoutError: reported below
                break
        if self.failed:
            return  # the test reports the failed requests
        assert (
            not self.in_flight
        ), f"requests unanswered after {timeout_ms / 1000:.0f} s: {list(self.in_flight.values())}"


def _check_solutions_hidden(page) -> None:
    """Cells tagged hide-input (exercise solutions) show their code only after the toggle."""
    cells = page.locator(".cell.tag_hide-input")
    for i in range(cells.count()):
        cell = cells.nth(i)
        code = cell.locator(".cell_input")
        assert not code.is_visible(), f"solution cell {i} is visible before its toggle is clicked"
        cell.locator("summary, button.toggle-button").first.click()
        code.wait_for(state="visible", timeout=WAIT_MS)


@pytest.mark.browser
@pytest.mark.parametrize("page_path", PAGES)
def test_page_renders_offline(server, browser, page_path):
    assert (SITE / page_path).is_file(), f"{page_path} missing from the built site"
    page = browser.new_page()
    page.set_default_timeout(WAIT_MS)
    requests = Requests(page)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{server}/{page_path}", wait_until="load", timeout=MATHJAX_MS)

    # Math: MathJax replaced every \( \) / \[ \] block with mjx-container elements,
    # none of them an error or an undefined macro (drawn in red, inside a container too).
    n_math = page.locator(".math").count()
    if n_math:
        wait_typeset(page)
        assert page.locator("mjx-container").count() >= n_math, "math not typeset"
        raw = page.evaluate(
            "() => Array.from(document.querySelectorAll('.math')).filter(e => !e.querySelector('mjx-container')).length"
        )
        assert raw == 0, f"{raw} math blocks left as raw TeX"
        bad = tex_errors(page)
        assert not bad, f"TeX that MathJax could not typeset: {bad}"

    # Images: every <img> finished loading with a real size.
    page.wait_for_function("() => Array.from(document.images).every(i => i.complete)", timeout=MATHJAX_MS)
    broken = page.evaluate(
        "() => Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)"
    )
    assert not broken, f"images not loaded: {broken}"

    # Widgets: every widget view on the page was drawn (a page whose notebook was
    # saved without widget state fails), and each of its own controls changes what it shows.
    problems = widget_problems(page, MATHJAX_MS)
    assert not problems, f"widgets: {problems}"

    _check_solutions_hidden(page)

    # Every request the page made (fonts MathJax fetched, those the controls caused) was answered.
    requests.wait_until_none_in_flight(page, MATHJAX_MS)
    host = urlparse(server).netloc
    foreign = [u for u in requests.urls if urlparse(u).scheme in {"http", "https"} and urlparse(u).netloc != host]
    assert not foreign, f"requests to other hosts: {foreign}"
    assert not requests.failed, f"failed requests: {requests.failed}"
    unexpected = [e for e in errors if not any(p.search(e) for p in ALLOWED_CONSOLE_ERRORS)]
    assert not unexpected, f"console errors: {unexpected}"
    page.close()
