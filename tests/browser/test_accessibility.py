"""Every page of the built book checked by axe-core at a desktop (1280 px) and a phone (390 px) width, in light
and dark mode: no critical or serious violation (``axe.py`` says which rules run where, and why).

Kept apart from ``test_layout.py``, which opens the same pages, so that the two xdist workers of ``make test``
share the work: axe's colour rules take 3-5 s a run on a chapter page. Needs ``_build/html`` (``make book``),
``/usr/bin/chromium`` and axe-core (``make assets``); outside CI a missing one skips these tests, with ``CI=true``
it fails them.
"""

from __future__ import annotations

import pytest

from tests.browser.axe import AXE, accessibility_problems, axe_available, violations
from tests.browser.common import every_page_and_width, need, opened


@pytest.fixture(scope="module")
def server(book_site):
    need(axe_available(), f"no axe-core at {AXE} (run `make assets`)")
    return book_site


@pytest.mark.browser
@every_page_and_width
def test_page_accessibility(server, browser, page_path, width):
    with opened(browser, f"{server}/{page_path}", width) as page:
        problems = accessibility_problems(page, phone=width < 1280)
    assert not problems, f"{page_path} at {width} px: {problems}"


_A11Y_FIXTURE = """<!doctype html><html lang="en"><head><title>fixture</title><style>
html[data-theme="dark"] body, html[data-theme="dark"] p {background: #222; color: #333}
</style></head><body><main><h1>Fixture</h1>
<p>Readable in light mode, not in dark mode.</p>
<img src="data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==">
<div role="slider" tabindex="0" aria-valuemin="0" aria-valuemax="5" aria-valuenow="1"></div>
</main></body></html>"""


@pytest.mark.browser
def test_the_accessibility_check_fails_a_page_with_violations(browser):
    """On a fixture page: an image without alternative text and an unlabelled slider are found in
    light mode, and text that loses its contrast only in dark mode is found in dark mode."""
    need(axe_available(), f"no axe-core at {AXE} (run `make assets`)")
    page = browser.new_page()
    try:
        page.set_content(_A11Y_FIXTURE)
        found = accessibility_problems(page)
        assert any(p.startswith("light: image-alt (critical") for p in found), found
        assert any(p.startswith("light: aria-input-field-name (serious") for p in found), found
        assert any(p.startswith("dark: color-contrast (serious") for p in found), found
        assert not any(p.startswith("light: color-contrast") for p in found), found
        # at the phone width the structure rules run again; the colours are checked in the header only
        phone = accessibility_problems(page, phone=True)
        assert any(p.startswith("light: image-alt (critical") for p in phone), phone
        assert not any("color-contrast" in p for p in phone), phone
        page.set_content(
            _A11Y_FIXTURE.replace("<img ", '<img alt="one pixel" ').replace(
                'role="slider"', 'role="slider" aria-label="d_k"'
            )
        )
        assert not violations(page), "the mended fixture still fails in light mode"
    finally:
        page.close()
