"""Fixtures of the browser tests: one chromium per module, and the built book served for the page tests."""

from __future__ import annotations

import pytest

from tests.browser.common import PAGES, SITE, chromium, need, serve


@pytest.fixture(scope="module")
def browser():
    with chromium() as ctx:
        yield ctx


@pytest.fixture(scope="module")
def book_site():
    """The base URL of ``_build/html`` served locally, one server per module (skips, or fails in CI, without a site)."""
    need(SITE.joinpath("index.html").is_file() or SITE.joinpath(PAGES[0]).is_file(), f"no site at {SITE}")
    with serve(SITE) as url:
        yield url
