"""``attnsurvey.widgets.explore`` responds in static, offline HTML.

Executes a two-cell notebook that calls ``explore`` (a slider and a dropdown,
nested Stacks linked with ``jslink``) in a kernel with widget state stored,
renders it with myst-nb and the book's ``offline_assets`` extension (the
vendored html-manager, no CDN), opens it in chromium and moves both controls:
the shown output must change each time, with no request to another host.
Then the check of every page of the book (``widgets.widget_problems``) passes
that page and fails two copies of it broken on purpose: one without its widget
state (as a notebook saved without it renders: nothing drawn), and one with a
second widget view whose model is not in the state (drawn empty next to a
working widget, so "as many controls as views" held).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from attnsurvey import numeric_env
from tests.browser.common import need, serve
from tests.browser.widgets import move_every_control, widget_problems

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
    from sphinx.application import Sphinx

    src = tmp_path_factory.mktemp("widgets_book")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Widgets"), nbformat.v4.new_code_cell(SOURCE)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    numeric_env.notebook_client(
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


def _broken_copy(site: Path, name: str) -> str:
    """Write a copy of the fixture page broken the way ``name`` says; return its file name."""
    page = (site / "index.html").read_text(encoding="utf-8")
    if name == "no_state":
        page, n = re.subn(
            r'<script type="application/vnd\.jupyter\.widget-state\+json">.*?</script>', "", page, flags=re.S
        )
    else:  # unknown_view: a second widget view, of a model the state does not hold
        view = '<script type="application/vnd.jupyter.widget-view+json">{"model_id": "%s", "version_major": 2, "version_minor": 0}</script>'
        page, n = re.subn(r"</body>", f"<div>{view % ('0' * 32)}</div></body>", page, count=1)
    assert n == 1, f"fixture page not as expected for {name}"
    (site / f"{name}.html").write_text(page, encoding="utf-8")
    return f"{name}.html"


@pytest.mark.browser
@pytest.mark.parametrize(
    "name, expected",
    [
        ("index", []),
        ("no_state", ["1 widget views but no widget state (the notebook was saved without it): nothing is drawn"]),
        ("unknown_view", [f"not drawn after 2 s: ['widget 1 (model {'0' * 32})']"]),
    ],
)
def test_widget_problems(tiny_site, browser, name, expected):
    file = "index.html" if name == "index" else _broken_copy(tiny_site, name)
    with serve(tiny_site) as url:
        page = browser.new_page()
        page.goto(f"{url}/{file}", wait_until="load")
        if name != "no_state":  # the working widget is drawn before the check's own wait starts, so a short
            # wait suffices: the view of a model the state does not hold is never drawn
            page.wait_for_selector(".widget-slider .noUi-handle", timeout=120_000)
        assert widget_problems(page, draw_timeout=2_000) == expected
        page.close()
