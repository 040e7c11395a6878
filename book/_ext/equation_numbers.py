"""Sphinx extension: displayed equations show the number their label names.

A MyST display equation carries a label after its closing ``$$``::

    $$
    \\mathbf{c} = \\sum_{l=1}^{n_f} a_l \\mathbf{v}_l
    $$ (eq-survey-4)

Sphinx would number labelled equations by their order in the page (or, with
``numfig``, across the book), so the survey's Eq. (4) could show as (54). This
extension replaces that number by one taken from the label:

====================  =============  ==========================================
label                 shown as       meaning
====================  =============  ==========================================
``eq-survey-<k>``     ``(k)``        the survey's own equation k (k = 1..46)
``eq-review-<k>``     ``(R<k>)``     equation k of the NLP review seed
``eq-nndl-<k>``       ``(N<k>)``     equation k of the nndl seed
anything else         ``(a)``, ...   a letter per page, in order of appearance
====================  =============  ==========================================

The same string is used by ``{eq}`` cross-references (``(4)``) and by every
HTML builder, including ``singlehtml`` (the PDF). Unlabelled ``$$`` blocks stay
unnumbered; MathJax must not number environments itself (``_config.yml`` sets
``mathjax3_config.tex.tags: none``), so a bare integer can only come from a
``\\tag{}``, which the book does not use.

How: ``math_numfig`` is switched off, so Sphinx shows ``node["number"]`` as is;
on ``doctree-read`` every labelled ``math_block`` of the page gets its display
string as ``number``, and the math domain's record of the label (used to
resolve ``{eq}``) is updated to the same string.
"""

from __future__ import annotations

import re
import string

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.util import logging

logger = logging.getLogger(__name__)

#: Number of equations in the survey (Brauwers & Frasincar).
SURVEY_EQUATIONS = 46

_PREFIXED = [
    (re.compile(r"^eq-survey-(\d+)$"), "{}"),
    (re.compile(r"^eq-review-(\d+)$"), "R{}"),
    (re.compile(r"^eq-nndl-(\d+)$"), "N{}"),
]
# myst-parser gives a top-level amsmath environment (``\begin{align}``) a random
# uuid label so that Sphinx numbers it; nobody can reference it, so it stays
# unnumbered, like an unlabelled ``$$`` block.
_ANONYMOUS = re.compile(r"^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$")


def letter(i: int) -> str:
    """0 -> 'a', 25 -> 'z', 26 -> 'aa', 27 -> 'ab', ..."""
    if i < 0:
        raise ValueError(f"letter index must be >= 0, got {i}")
    out = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        out = string.ascii_lowercase[r] + out
    return out


def prefixed_number(label: str) -> str | None:
    """The shown number of a survey/review/nndl label, or None for any other label."""
    for pattern, fmt in _PREFIXED:
        m = pattern.match(label)
        if m:
            return fmt.format(int(m.group(1)))
    return None


def display_numbers(labels: list[str]) -> dict[str, str]:
    """Shown number of every label of one page, given in order of appearance."""
    shown: dict[str, str] = {}
    n_letters = 0
    for label in labels:
        if label in shown or _ANONYMOUS.match(label):
            continue
        fixed = prefixed_number(label)
        if fixed is None:
            fixed = letter(n_letters)
            n_letters += 1
        shown[label] = fixed
    return shown


def _configure(app: Sphinx, config: Config) -> None:
    # Sphinx then shows node["number"] verbatim instead of a book-wide count.
    config.math_numfig = False


def _renumber(app: Sphinx, doctree: nodes.document) -> None:
    docname = app.env.docname
    blocks = [n for n in doctree.findall(nodes.math_block) if n.get("label")]
    shown = display_numbers([n["label"] for n in blocks])
    domain = app.env.get_domain("math")
    objects = domain.data.setdefault("objects", {})
    for node in blocks:
        label = node["label"]
        if label not in shown:
            if _ANONYMOUS.match(label):
                node["number"] = None
            continue
        m = re.match(r"^eq-survey-(\d+)$", label)
        if m and not 1 <= int(m.group(1)) <= SURVEY_EQUATIONS:
            logger.warning("equation label %r: the survey has equations 1-%d", label, SURVEY_EQUATIONS, location=node)
        node["number"] = shown[label]
        if objects.get(label, (docname,))[0] == docname:
            objects[label] = (docname, shown[label])


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", _configure, priority=900)
    app.connect("doctree-read", _renumber)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True, "env_version": 1}
