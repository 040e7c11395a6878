"""What the browser tests share: the chromium binary and flags, a local server, skip-or-fail."""
from __future__ import annotations

import contextlib
import functools
import http.server
import os
import threading
from pathlib import Path

import pytest

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
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def need(condition: bool, why: str) -> None:
    """Skip (outside CI) or fail (with CI=true) when a prerequisite is missing."""
    if not condition:
        if IN_CI:
            pytest.fail(why)
        pytest.skip(why)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output clean
        pass


@contextlib.contextmanager
def serve(directory: Path):
    """Serve ``directory`` on a free local port; yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()


@contextlib.contextmanager
def chromium():
    """A headless chromium context with a fresh profile (playwright)."""
    import shutil
    import tempfile

    need(Path(CHROMIUM).is_file(), f"{CHROMIUM} not found (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="book-chromium-")
    try:
        with sync_playwright() as p:
            # the fresh profile dir is the --user-data-dir
            ctx = p.chromium.launch_persistent_context(
                profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS
            )
            try:
                yield ctx
            finally:
                ctx.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
