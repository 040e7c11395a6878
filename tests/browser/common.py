"""What the browser tests share: the site and its pages, a local server, chromium, opening a page (its
requests and console errors recorded from the start), skip-or-fail."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.browser.mathjax import MATHJAX_MS, wait_typeset
from tests.browser.widgets import STATE, VIEW, WAIT_MS
from tests.helpers import toc_files

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "_build" / "html"
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
#: Every page of the book, and the widths of ``book/_static/layout.css`` that the page tests open them at.
PAGES = [f + ".html" for f in toc_files(ROOT)]
WIDTHS = {"desktop": 1280, "phone": 390}

sys.path.insert(0, str(ROOT / "scripts"))
from site_browser import CHROMIUM, serve  # noqa: E402
from site_browser import chromium as _chromium  # noqa: E402


def need(condition: bool, why: str) -> None:
    """Skip (outside CI) or fail (with CI=true) when a prerequisite is missing."""
    if not condition:
        if IN_CI:
            pytest.fail(why)
        pytest.skip(why)


@contextlib.contextmanager
def chromium():
    need(Path(CHROMIUM).is_file(), f"{CHROMIUM} not found (apt-get install chromium)")
    with _chromium() as ctx:
        yield ctx


def settle(page) -> None:
    """Wait until what changes the layout has happened: MathJax typeset, fonts and images loaded, widgets
    drawn (where the page has widget state: :func:`~tests.browser.widgets.widget_problems` reports a page
    without it, or a view not drawn)."""
    if page.locator(".math").count():
        wait_typeset(page)
    page.evaluate("() => document.fonts.ready.then(() => true)")
    page.wait_for_function("() => Array.from(document.images).every(i => i.complete)", timeout=MATHJAX_MS)
    if page.locator(VIEW).count() and page.locator(STATE).count():
        try:
            page.wait_for_function(
                f"() => document.querySelectorAll('{VIEW}').length <= document.querySelectorAll('.widget-subarea').length",
                timeout=MATHJAX_MS,
            )
        except Exception:  # playwright TimeoutError: the widget check names the views not drawn
            pass


class Requests:
    """Every request of a page, from its events: started, failed (no answer, or HTTP >= 400), in flight.

    Counted from the events rather than waited for with playwright's ``networkidle`` (no request for
    500 ms, a timing heuristic): on a loaded machine that never came for three pages whose every request
    had been answered, each failing after 120 s."""

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


@dataclass
class View:
    """A page of the book open at one width, with what it requested and logged since before it loaded."""

    page: object
    path: str
    width: int
    requests: Requests
    console_errors: list[str] = field(default_factory=list)


@contextlib.contextmanager
def opened(browser, url: str, width: int, path: str = ""):
    """A :class:`View` of a new page of ``browser``, ``width`` px wide, loaded from ``url`` and settled;
    its requests and console errors are recorded from before the load. The page is closed on leaving."""
    page = browser.new_page()
    page.set_viewport_size({"width": width, "height": 900})
    page.set_default_timeout(WAIT_MS)
    view = View(page, path, width, Requests(page))
    page.on("console", lambda m: view.console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: view.console_errors.append(str(e)))
    try:
        page.goto(url, wait_until="load", timeout=MATHJAX_MS)
        settle(page)
        yield view
    finally:
        page.close()


__all__ = [
    "IN_CI",
    "PAGES",
    "ROOT",
    "SITE",
    "WIDTHS",
    "Requests",
    "View",
    "chromium",
    "need",
    "opened",
    "serve",
    "settle",
]
