"""TeX that MathJax typeset as an error: what ``test_pages.py`` asserts a page has none of.

MathJax draws bad TeX inside an ``mjx-container`` like any other formula, so
"every .math element holds an mjx-container" does not see it:

* an undefined macro (``\\notamacro{x}``; the ``noundefined`` package) becomes
  an ``mtext`` coloured red that holds the macro's name, backslash included;
* any other TeX error (``\\begin{aligned} ... \\end{align}``, a missing brace)
  becomes an ``merror`` whose ``data-mjx-error`` attribute holds the message.

Both are found in MathJax's own internal MathML of every typeset formula
(``MathJax.startup.document.math``), whatever the output (CHTML, SVG) and
however it is styled. Used by ``test_pages.py`` (every page of the book) and
``test_math_static.py`` (a fixture page that must fail the check).
"""

from __future__ import annotations

MATHJAX_MS = 120_000

_JS_TEX_ERRORS = r"""() => {
  const found = [];
  for (const item of MathJax.startup.document.math) {
    item.root.walkTree((node) => {
      if (node.isKind('merror')) {
        found.push(`${item.math} -> ${node.attributes.get('data-mjx-error')}`);
      } else if (node.isKind('mtext') && node.attributes.getExplicit('mathcolor')) {
        const text = node.childNodes.map((c) => (c.getText ? c.getText() : '')).join('');
        if (text.startsWith('\\')) found.push(`${item.math} -> undefined macro ${text}`);
      }
    });
  }
  return found;
}"""


def wait_typeset(page, timeout: int = MATHJAX_MS) -> None:
    """Return once MathJax has loaded and typeset the page's math (its startup promise resolved)."""
    page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=timeout)
    page.evaluate("() => MathJax.startup.promise")


def tex_errors(page) -> list[str]:
    """Every formula MathJax typeset as an error or with an undefined macro: ``"<TeX> -> <what>"``."""
    return page.evaluate(_JS_TEX_ERRORS)
