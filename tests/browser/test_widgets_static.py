"""``attnsurvey.widgets.explore`` responds in static, offline HTML (issue 14).

Executes a two-cell notebook that calls ``explore`` (a slider and a dropdown,
nested Stacks linked with ``jslink``) in a kernel with widget state stored,
renders it with myst-nb and the book's ``offline_assets`` extension (the
vendored html-manager, no CDN), opens it in chromium and moves both controls:
the shown output must change each time, with no request to another host.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.browser.common import need, serve
from tests.browser.widgets import move_every_control

ROOT = Path(__file__).resolve().parents[2]
EMBED = ROOT / "book" / "_vendor" / "site" / "vendor" / "html-manager" / "embed.js"

SOURCE = """
from attnsurvey.widgets import explore

def show(k, mode):
    print(f"k={k} mode={mode}")
    return "#" * k if mode == "bars" else "k squared is " + str(k * k)

explore(show, k=[1, 2, 3], mode={"bars": "bars", "square": "square"})
"""

CONF = f"""
import sys
sys.path.insert(0, {str(ROOT / "book" / "_ext")!r})
extensions = ["myst_nb", "offline_assets"]
nb_execution_mode = "off"
master_doc = "index"
exclude_patterns = ["_build"]
"""


@pytest.fixture(scope="module")
def tiny_site(tmp_path_factory) -> Path:
    need(EMBED.is_file(), f"no vendored html-manager at {EMBED} (run `make assets`)")
    import nbformat
    from nbclient import NotebookClient
    from sphinx.application import Sphinx

    src = tmp_path_factory.mktemp("widgets_book")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Widgets"), nbformat.v4.new_code_cell(SOURCE)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(
        nb, timeout=120, kernel_name="python3", store_widget_state=True, resources={"metadata": {"path": str(src)}}
    ).execute()
    assert "widgets" in nb.metadata, "the kernel stored no widget state"
    nbformat.write(nb, src / "index.ipynb")
    (src / "conf.py").write_text(CONF)
    out = src / "_build" / "html"
    app = Sphinx(
        str(src),
        str(src),
        str(out),
        str(src / "_build" / "doctrees"),
        "html",
        status=None,
        warning=sys.stderr,
        freshenv=True,
    )
    app.build()
    assert app.statuscode == 0
    return out


@pytest.mark.browser
def test_explore_responds_offline(tiny_site, browser):
    with serve(tiny_site) as url:
        page = browser.new_page()
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        page.goto(f"{url}/index.html", wait_until="load")
        page.wait_for_selector(".widget-slider .noUi-handle", timeout=120_000)
        page.wait_for_selector(".widget-dropdown select", timeout=120_000)
        assert "k=1 mode=bars" in page.inner_text("body")
        moves = move_every_control(page)
        assert [m.control.split(" (")[0] for m in moves] == ["slider 0", "dropdown 0"]
        assert all(m.changed for m in moves), moves
        assert "k=2 mode=square" in page.inner_text("body")
        foreign = [u for u in requests if not u.startswith(url) and not u.startswith(("data:", "blob:"))]
        assert not foreign, f"requests to other hosts: {foreign}"
        page.close()
