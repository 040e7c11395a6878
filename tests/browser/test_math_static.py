"""The math check of ``test_pages.py`` fails on bad TeX (issue: it once passed it).

A fixture page loads the book's vendored MathJax with the book's MathJax
configuration (``mathjax3_config`` in ``_config.yml``) and holds good formulas,
red ones that are meant to be red, an undefined macro and a mismatched
environment. Every formula gets its ``mjx-container`` (the old check passes),
and :func:`tex_errors` names exactly the two bad ones.
"""

from __future__ import annotations

import html
import json

import pytest
import yaml

from tests.browser.common import ROOT, SITE, need, serve
from tests.browser.mathjax import tex_errors, wait_typeset

# Where the pages' MathJax comes from: `make assets` (book/_ext/offline_assets.py), or the built site's copy of it.
MATHJAX_DIRS = [ROOT / "book" / "_vendor" / "site" / "vendor" / "mathjax", SITE / "vendor" / "mathjax"]

GOOD = [r"\(\alpha_i = \mathrm{softmax}(e_i)\)", r"\[\begin{aligned} a &= b \\ c &= d \end{aligned}\]"]
RED_ON_PURPOSE = [r"\(\color{red}{x} + \textcolor{red}{\text{y}}\)"]
BAD = {
    r"\notamacro{x} + 1": r"\notamacro{x} + 1 -> undefined macro \notamacro",
    r"\begin{aligned} a &= b \end{align}": r"\begin{aligned} a &= b \end{align} -> \begin{aligned} ended with \end{align}",
}


@pytest.fixture(scope="module")
def math_page(tmp_path_factory):
    found = [d for d in MATHJAX_DIRS if (d / "tex-chtml.js").is_file()]
    need(bool(found), f"no vendored MathJax in {[str(d) for d in MATHJAX_DIRS]} (run `make assets`)")
    config = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"]["mathjax3_config"]
    site = tmp_path_factory.mktemp("math_site")
    (site / "vendor").mkdir()
    (site / "vendor" / "mathjax").symlink_to(found[0], target_is_directory=True)
    formulas = GOOD + RED_ON_PURPOSE + [rf"\({tex}\)" for tex in BAD]
    body = "\n".join(f'<p><span class="math notranslate nohighlight">{html.escape(f)}</span></p>' for f in formulas)
    (site / "index.html").write_text(
        '<!DOCTYPE html><html><head><meta charset="utf-8">\n'
        f"<script>window.MathJax = {json.dumps(config)}</script>\n"
        '<script defer src="vendor/mathjax/tex-chtml.js"></script>\n'
        f"</head><body>\n{body}\n</body></html>\n"
    )
    return site


@pytest.mark.browser
def test_tex_errors_names_the_bad_formulas(math_page, browser):
    with serve(math_page) as url:
        page = browser.new_page()
        page.goto(f"{url}/index.html", wait_until="load")
        wait_typeset(page)
        n_math = page.locator(".math").count()
        assert n_math == len(GOOD) + len(RED_ON_PURPOSE) + len(BAD)
        # What the check asserted before: every formula was typeset. Bad TeX passes it.
        assert page.locator(".math mjx-container").count() == n_math
        assert sorted(tex_errors(page)) == sorted(BAD.values())
        page.close()
