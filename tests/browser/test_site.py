"""Open every page of the built book in a real browser (Debian chromium via playwright).

Checks per page: no raw TeX left (MathJax turned every math block into
``mjx-container`` elements), every ``<img>`` loaded, widgets rendered where the
notebook stored widget state, no failed request, no request to a host other
than the local server, no console error beyond ALLOWED_CONSOLE_ERRORS.

Needs ``_build/html`` (``make book``) and ``/usr/bin/chromium``. Outside CI a
missing browser or site skips these tests; with ``CI=true`` it fails them.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "_build" / "html"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Console messages that are not failures of the book. Keep this list short and explained.
ALLOWED_CONSOLE_ERRORS: list[re.Pattern] = []

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def _need(condition: bool, why: str) -> None:
    if not condition:
        if IN_CI:
            pytest.fail(why)
        pytest.skip(why)


def _toc_pages() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]
    for part in toc.get("parts", []):
        for ch in part.get("chapters", []):
            pages.append(ch["file"])
            pages.extend(s["file"] for s in ch.get("sections", []))
    return [p.removesuffix(".ipynb").removesuffix(".md") + ".html" for p in pages]


PAGES = _toc_pages()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output clean
        pass


@pytest.fixture(scope="module")
def server():
    _need(SITE.joinpath("index.html").is_file(), f"no built site at {SITE} (run `make book`)")
    handler = functools.partial(_QuietHandler, directory=str(SITE))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    _need(Path(CHROMIUM).is_file(), f"{CHROMIUM} not found (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="book-chromium-")
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_FLAGS,  # the fresh profile dir is the --user-data-dir
        )
        yield ctx
        ctx.close()
    shutil.rmtree(profile, ignore_errors=True)


def _has_widget_state(page_path: str) -> bool:
    html = (SITE / page_path).read_text(encoding="utf-8")
    return "application/vnd.jupyter.widget-state+json" in html


@pytest.mark.browser
@pytest.mark.parametrize("page_path", PAGES)
def test_page_renders_offline(server, browser, page_path):
    assert (SITE / page_path).is_file(), f"{page_path} missing from the built site"
    page = browser.new_page()
    requests, failed, errors = [], [], []
    page.on("request", lambda r: requests.append(r.url))
    page.on("requestfailed", lambda r: failed.append(f"{r.url} ({r.failure})"))
    page.on("response", lambda r: failed.append(f"{r.url} (HTTP {r.status})") if r.status >= 400 else None)
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{server}/{page_path}", wait_until="load")
    page.wait_for_load_state("networkidle")

    # Math: MathJax replaced every \( \) / \[ \] block with mjx-container elements.
    n_math = page.locator(".math").count()
    if n_math:
        page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=30_000)
        page.evaluate("() => MathJax.startup.promise")
        assert page.locator("mjx-container").count() >= n_math, "math not typeset"
        raw = page.evaluate(
            "() => Array.from(document.querySelectorAll('.math')).filter(e => !e.querySelector('mjx-container')).length"
        )
        assert raw == 0, f"{raw} math blocks left as raw TeX"

    # Images: every <img> finished loading with a real size.
    broken = page.evaluate(
        "() => Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)"
    )
    assert not broken, f"images not loaded: {broken}"

    # Widgets: where the notebook stored widget state, the embed manager drew them.
    if _has_widget_state(page_path):
        page.wait_for_selector(".jupyter-widgets", timeout=30_000)
        views = page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count()
        controls = page.locator(
            ".jupyter-widgets .widget-slider, .jupyter-widgets select, .jupyter-widgets input, "
            ".jupyter-widgets button, .jupyter-widgets .widget-toggle-buttons"
        ).count()
        assert views > 0, "widget state stored but no widget view on the page"
        assert controls >= views, f"{views} widget views but only {controls} controls rendered"

    host = urlparse(server).netloc
    foreign = [u for u in requests if urlparse(u).scheme in {"http", "https"} and urlparse(u).netloc != host]
    assert not foreign, f"requests to other hosts: {foreign}"
    assert not failed, f"failed requests: {failed}"
    unexpected = [e for e in errors if not any(p.search(e) for p in ALLOWED_CONSOLE_ERRORS)]
    assert not unexpected, f"console errors: {unexpected}"
    page.close()
