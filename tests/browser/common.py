"""What the browser tests share: the site, a local server, chromium, skip-or-fail."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import pytest

from tests.browser.mathjax import MATHJAX_MS, wait_typeset
from tests.browser.widgets import VIEW

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "_build" / "html"
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

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
    """Wait until what changes the layout has happened: MathJax typeset, fonts and images loaded, widgets drawn."""
    if page.locator(".math").count():
        wait_typeset(page)
    page.evaluate("() => document.fonts.ready.then(() => true)")
    page.wait_for_function("() => Array.from(document.images).every(i => i.complete)", timeout=MATHJAX_MS)
    views = page.locator(VIEW).count()
    if views:
        page.wait_for_function(
            f"() => document.querySelectorAll('{VIEW}').length <= document.querySelectorAll('.widget-subarea').length",
            timeout=MATHJAX_MS,
        )


__all__ = ["IN_CI", "ROOT", "SITE", "chromium", "need", "serve", "settle"]
