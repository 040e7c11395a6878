"""Conformance adapters for the ``entmax`` package: sparsemax, 1.5-entmax, alpha-entmax and their losses.

The book's side runs the alignment through the core's
:func:`attnsurvey.attention.align_scores` (the alignment registry's
``"sparsemax"`` and ``"entmax15"``, and :func:`attnsurvey.attention.alpha_entmax_align`)
and the Fenchel-Young losses of :mod:`attnsurvey.general_mechanisms.sparse_maps`.
The library's functions are looked up by name in :data:`LIBRARY`: the adapter
is the identity (same layout, normalised over the last axis, per-row losses).

Shapes: scores and weights ``(..., n_f)``, n_f the positions normalised over.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..attention import align_scores, alpha_entmax_align
from ..general_mechanisms import sparse_maps as sm
from . import Check, Pair, library
from .torch_target import rand

#: Equation key -> the name of the ``entmax`` function checked.
LIBRARY = {
    "sparsemax": "sparsemax",
    "entmax15": "entmax15",
    "alpha-entmax": "entmax_bisect",
    "sparsemax-loss": "sparsemax_loss",
    "entmax15-loss": "entmax15_loss",
    "alpha-entmax-loss": "entmax_bisect_loss",
}

#: The alpha of the bisection checks (neither 1.5 nor 2, which have closed forms).
ALPHA = 1.3


def library_function(name: str) -> Callable[..., Tensor]:
    """The ``entmax`` package's function of that name (imported here, not at package import).

    Args:
        name: a value of :data:`LIBRARY`.

    Shape:
        the returned function maps scores of any shape ``(..., n_f)`` to weights of the same shape.

    Returns:
        The function.

    Raises:
        AttributeError: if the installed entmax has no such function.
    """
    fn: Callable[..., Tensor] = getattr(library("entmax"), name)
    return fn


def checks() -> list[Check]:
    """The entmax checks: three alignments (with ties, a large score and several rows) and three losses.

    Returns:
        A list of :class:`~attnsurvey.conformance.Check`.
    """
    e = rand(3, 4, 7, seed=31) * 2
    e[0, 0, :3] = 1.0  # ties
    e[1, 2, 4] = 40.0  # one dominant score
    target = torch.arange(12).reshape(3, 4) % 7

    def pair(name: str, ours: Tensor, *args: object) -> Pair:
        return ours, library_function(LIBRARY[name])(e, *args)

    def loss_pair(name: str, ours: Tensor, *args: object) -> Pair:
        # the adapter: entmax's losses take rows (N, n_f) and targets (N,); the book's any batch shape
        theirs = library_function(LIBRARY[name])(e.reshape(-1, e.shape[-1]), target.reshape(-1), *args)
        return ours, theirs.reshape(target.shape)

    return [
        Check("entmax", "sparsemax", "entmax.sparsemax", lambda: pair("sparsemax", align_scores(e, None, "sparsemax"))),
        Check("entmax", "entmax15", "entmax.entmax15", lambda: pair("entmax15", align_scores(e, None, "entmax15"))),
        Check(
            "entmax",
            "alpha-entmax",
            f"entmax.entmax_bisect(alpha={ALPHA})",
            lambda: pair("alpha-entmax", align_scores(e, None, alpha_entmax_align(ALPHA)), ALPHA),
        ),
        Check(
            "entmax",
            "fy-loss",
            "entmax.sparsemax_loss",
            lambda: loss_pair("sparsemax-loss", sm.sparsemax_loss(e, target)),
        ),
        Check(
            "entmax",
            "fy-loss",
            "entmax.entmax15_loss",
            lambda: loss_pair("entmax15-loss", sm.entmax15_loss(e, target)),
        ),
        Check(
            "entmax",
            "fy-loss",
            f"entmax.entmax_bisect_loss(alpha={ALPHA})",
            lambda: loss_pair("alpha-entmax-loss", sm.entmax_bisect_loss(e, target, ALPHA), ALPHA),
        ),
    ]
