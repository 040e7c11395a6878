"""What the browser tests share: the site, a local server, chromium, skip-or-fail."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import pytest

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


__all__ = ["IN_CI", "ROOT", "SITE", "chromium", "need", "serve"]
