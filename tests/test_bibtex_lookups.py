"""book/_ext/bibtex_lookups.py: after its setup, pybtex finds the same plugins, and a repeated lookup no longer
scans the installed packages' entry points."""

from __future__ import annotations

import sys
from pathlib import Path

import pybtex.plugin

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import bibtex_lookups  # noqa: E402

LOOKUPS = [("pybtex.style.formatting", "unsrt"), ("pybtex.backends", "plaintext"), ("pybtex.backends", "html")]


def test_same_plugins_and_a_repeated_lookup_is_cached(monkeypatch):
    monkeypatch.setattr(pybtex.plugin, "entry_points", pybtex.plugin.entry_points)  # restored afterwards
    before = [pybtex.plugin.find_plugin(group, name) for group, name in LOOKUPS]
    bibtex_lookups.setup(None)
    bibtex_lookups.setup(None)  # a second build in the same process does not wrap the cache again
    cached = pybtex.plugin.entry_points
    assert not hasattr(cached.__wrapped__, "cache_info")
    assert [pybtex.plugin.find_plugin(group, name) for group, name in LOOKUPS] == before
    misses = cached.cache_info().misses
    assert [pybtex.plugin.find_plugin(group, name) for group, name in LOOKUPS] == before
    assert cached.cache_info().misses == misses and cached.cache_info().hits >= len(LOOKUPS)
