"""A local web server for a built site and a headless Debian chromium (playwright).

Shared by ``scripts/build_pdf.py`` (``make pdf``) and the browser tests
(``tests/browser``), so both open the book the same way: served over HTTP from
127.0.0.1, never from another host.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

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


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep the caller's output clean
        pass


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[str]:
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
def chromium(executable: str = CHROMIUM):
    """A headless chromium browser context with a fresh, temporary profile."""
    if not Path(executable).is_file():
        raise FileNotFoundError(f"{executable} not found (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="book-chromium-")
    try:
        with sync_playwright() as p:
            # the fresh profile dir is the --user-data-dir
            ctx = p.chromium.launch_persistent_context(
                profile, executable_path=executable, headless=True, args=CHROMIUM_FLAGS
            )
            try:
                yield ctx
            finally:
                ctx.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
