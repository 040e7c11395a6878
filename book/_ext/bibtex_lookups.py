"""Sphinx extension: pybtex finds each of its plugins once per build instead of once per citation.

sphinxcontrib-bibtex asks pybtex for its formatting style and plain-text backend at every citation it
resolves, and pybtex answers by scanning the installed packages' entry points (``importlib.metadata``)
each time: some 350 scans, 5 to 6 s of each book build (``jupyter-book build``, and again for the
single page that ``scripts/build_pdf.py`` prints). The installed packages do not change during a build,
so the scans are cached; plugins registered at run time are still looked up first, as before.
"""

from __future__ import annotations

import functools

import pybtex.plugin
from sphinx.application import Sphinx


def setup(app: Sphinx) -> dict:
    if not hasattr(pybtex.plugin.entry_points, "cache_info"):
        pybtex.plugin.entry_points = functools.lru_cache(maxsize=None)(pybtex.plugin.entry_points)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
