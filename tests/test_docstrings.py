"""Docstring contracts that a scan of the whole public API can check.

Masks follow ``F.scaled_dot_product_attention``: boolean, ``True`` = may attend (CONTRIBUTING.md,
book/api.md). Every public callable that takes a mask says so in its own docstring, so a reader
never has to guess the polarity from a module header or from the code.

What is scanned: every public module of :mod:`attnsurvey` (``pkgutil.walk_packages``; names with a
``_`` part and :mod:`attnsurvey.exercises` are skipped), every public function defined there, and
every public method (``forward`` included, static and class methods too) defined in the body of a
public class defined there. A mask parameter is one named ``mask`` / ``masks``, ``mask`` followed by
a digit or a ``_suffix`` (``mask1``, ``mask_w``), or ending in ``_mask`` (``key_padding_mask``).
The docstring read is the callable's own ``__doc__``; an ``nn.Module.forward`` without one is
documented by its class docstring.

The polarity counts as stated when the docstring, whitespace collapsed, matches :data:`POLARITY`:
the word True (plain or in double backticks), then "=", "where" or "means", then within the same
clause (at most 80 characters, no ";" and no sentence end ". ") the words "may attend". So "True = may attend", the same
with True in backticks, "True = a real word (may attend)" and "True where query i may attend key
j" pass; a docstring that only says "boolean mask", or "True = blocked; ... no query may attend",
does not. A mask with another meaning (torch's blocked polarity, a region or a mean over positions
rather than keys) is stated precisely in its docstring; :data:`OTHER_MEANING` lists each such
callable, with the reason and the phrase its docstring must hold instead.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest
import torch.nn as nn

import attnsurvey

POLARITY = re.compile(r"\bTrue\b(?:``)?\s*(?:=|where|means)\s(?:(?!\. |;).){0,80}?\bmay attend\b")
MASK_PARAM = re.compile(r"^masks?(?:\d+|_\w+)?$|_mask$")

#: Callables whose mask parameter is not a may-attend mask over keys. Each entry maps the qualified
#: name to the phrase its docstring must hold instead (checked below), the reason in a comment.
OTHER_MEANING: dict[str, str] = {
    # torch.nn.MultiheadAttention's drop-in keeps torch's polarity (bool True = blocked, float = additive)
    "attnsurvey.query_related.torch_mha.TorchMultiheadAttention.forward": "is ``True`` where attention is *blocked*",
    # segmentation masks of an IoU metric: pixels of a region, not positions anyone attends to
    "attnsurvey.evaluation.extrinsic.mask_iou": "``True`` = the pixel lies in the region",
    # a generic masked mean: the mask selects the positions averaged, no scores are involved
    "attnsurvey.masking.masked_mean": "``True`` = counted in the mean",
    # a depthwise convolution (Lite Transformer's local branch): the mask marks real tokens of its input
    "attnsurvey.transformer.lite.depthwise_conv": "``True`` = a real token",
}


def _public_modules():
    for info in pkgutil.walk_packages(attnsurvey.__path__, "attnsurvey."):
        parts = info.name.split(".")
        if any(p.startswith("_") for p in parts) or parts[1] == "exercises":
            continue
        yield importlib.import_module(info.name)


def _public_callables():
    """``(qualified name, function, docstring)`` for every public function and method in scope."""
    for mod in _public_modules():
        for name, obj in sorted(vars(mod).items()):
            if name.startswith("_") or getattr(obj, "__module__", None) != mod.__name__:
                continue
            if inspect.isfunction(obj):
                yield f"{mod.__name__}.{name}", obj, obj.__doc__
            elif inspect.isclass(obj):
                for meth_name, meth in vars(obj).items():
                    if meth_name.startswith("_"):
                        continue
                    if isinstance(meth, (staticmethod, classmethod)):
                        meth = meth.__func__
                    if not inspect.isfunction(meth):
                        continue
                    doc = meth.__doc__
                    if doc is None and meth_name == "forward" and issubclass(obj, nn.Module):
                        doc = obj.__doc__
                    yield f"{mod.__name__}.{name}.{meth_name}", meth, doc


def _mask_params(fn) -> list[str]:
    return [p for p in inspect.signature(fn).parameters if MASK_PARAM.search(p)]


def states_polarity(doc: str | None) -> bool:
    return doc is not None and POLARITY.search(" ".join(doc.split())) is not None


MASKED = [(q, _mask_params(fn), doc) for q, fn, doc in _public_callables() if _mask_params(fn)]


def test_the_scan_finds_the_masked_api():
    """Guards the scan itself: it sees module functions, methods, forward and several mask names."""
    names = {q for q, _, _ in MASKED}
    params = {p for _, ps, _ in MASKED for p in ps}
    assert len(MASKED) >= 100, len(MASKED)
    assert "attnsurvey.general_model.plain_attend" in names
    assert "attnsurvey.query_related.multihop.MultiHopAttention.forward" in names
    assert {"mask", "key_padding_mask", "masks", "mask_w", "memory_mask"} <= params
    assert not any(".exercises." in q for q in names)


def test_polarity_regex():
    assert states_polarity("mask: boolean ``(..., n_f)``, ``True`` = may\n    attend.")
    assert states_polarity("mask: boolean, True where query i may attend key j.")
    assert states_polarity("word_mask: True = a real word (may attend)")
    assert not states_polarity("mask: boolean ``(..., n_f)``.")
    assert not states_polarity("mask: True = blocked; a row no query may attend is inert")
    assert not states_polarity("mask: True = blocked. A row no query may attend is inert")
    assert not states_polarity(None)


def test_every_mask_docstring_states_its_polarity():
    missing = [f"{q}({', '.join(ps)})" for q, ps, doc in MASKED if q not in OTHER_MEANING and not states_polarity(doc)]
    assert not missing, f"{len(missing)} docstrings do not say True = may attend:\n" + "\n".join(missing)


def test_other_meaning_entries_are_scanned_callables():
    """No stale allow-list entry: each names a callable the scan finds with a mask parameter."""
    names = {q for q, _, _ in MASKED}
    assert set(OTHER_MEANING) <= names, sorted(set(OTHER_MEANING) - names)


@pytest.mark.parametrize("q", sorted(OTHER_MEANING))
def test_other_meaning_docstrings_say_what_the_mask_is(q):
    """An allow-listed docstring states its own meaning and does not claim the may-attend polarity."""
    doc = " ".join(next(d for name, _, d in MASKED if name == q).split())
    assert OTHER_MEANING[q] in doc
    assert not states_polarity(doc)
