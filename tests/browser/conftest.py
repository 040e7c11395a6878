"""Fixtures of the browser tests: one chromium per module."""

from __future__ import annotations

import pytest

from tests.browser.common import chromium


@pytest.fixture(scope="module")
def browser():
    with chromium() as ctx:
        yield ctx
