"""Synthetic look-up tasks for §3.2.1 (score functions) and §3.2.3 (dimensionality).

Both tasks have a known answer, are generated from an explicit
``torch.Generator`` (nothing is downloaded), and are small enough to train on
in a few seconds on a CPU.

Shapes: n examples, n_f items, d_key key size, d_v value size.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import check_integers
from ..catalog import catalogued
from ._rows import check_positive


def key_lookup(
    n: int,
    n_f: int = 8,
    d_key: int = 8,
    n_classes: int = 4,
    noise: float = 0.5,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Noisy key look-up: find the stored item whose key the query resembles, return its label.

    Each example stores ``n_f`` items. Item ``l`` is the feature vector
    ``f_l = [k_l ; onehot(y_l)]`` with a random key ``k_l ~ N(0, I_{d_key})`` and
    a random label ``y_l`` in ``{0, ..., n_classes - 1}``. The query input is
    ``x_q = k_m + noise * eps`` for a random target item ``m``; the answer is
    ``y_m``. A model must score the query against every key (Eq. 23), so the
    task isolates the score function.

    Args:
        n: the number of examples.
        n_f: items per example.
        d_key: the key size.
        n_classes: the number of labels.
        noise: the standard deviation of the query noise (>= 0).
        generator: the random generator.

    Shape:
        - Output: ``(x_q (n, d_key), F (n, n_f, d_key + n_classes), y (n,))``.

    Returns:
        ``(x_q, F, y)`` with int64 targets ``y``.

    Raises:
        ValueError: for a size below 1 or a negative ``noise``.
    """
    check_integers("key_lookup", n=n, n_f=n_f, d_key=d_key, n_classes=n_classes)
    keys, labels, target, F = _stored_items(n, n_f, d_key, n_classes, noise, generator)
    rows = torch.arange(n)
    x_q = keys[rows, target] + noise * torch.randn(n, d_key, generator=generator)
    return x_q, F, labels[rows, target]


def _stored_items(
    n: int, n_f: int, d_key: int, n_classes: int, noise: float, generator: torch.Generator | None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Checked sizes, then random keys ``(n, n_f, d_key)``, labels ``(n, n_f)``, a target item ``(n,)`` and
    the feature vectors ``F = [keys ; onehot(labels)]``, drawn in this order."""
    check_positive(n=n, n_f=n_f, d_key=d_key, n_classes=n_classes)
    if noise < 0:
        raise ValueError(f"noise must be >= 0, got {noise}")
    keys = torch.randn(n, n_f, d_key, generator=generator)
    labels = torch.randint(n_classes, (n, n_f), generator=generator)
    target = torch.randint(n_f, (n,), generator=generator)
    F = torch.cat([keys, torch.nn.functional.one_hot(labels, n_classes).float()], dim=-1)
    return keys, labels, target, F


def magnitude_lookup(
    n: int,
    n_f: int = 8,
    d_key: int = 4,
    n_classes: int = 4,
    noise: float = 0.05,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Look-up by a nonlinear relevance: find the item whose key's first entry has the query's size.

    Items are those of :func:`key_lookup` (``f_l = [k_l ; onehot(y_l)]``,
    ``k_l ~ N(0, I_{d_key})``). The query input is one number,
    ``x_q = |k_{m,1}| + noise * eps`` (so ``d_q = 1``, unlike ``d_key``), for a
    random target item ``m``; the answer is the label of the item whose
    ``|k_{l,1}|`` lies nearest to ``x_q``. For a fixed query this relevance peaks
    at two values of ``k_{l,1}`` (``+x_q`` and ``-x_q``), which no score linear in
    the key (the product forms) and no single distance in a linear projection
    can express.

    Args:
        n: the number of examples.
        n_f: items per example.
        d_key: the key size.
        n_classes: the number of labels.
        noise: the standard deviation of the query noise (>= 0).
        generator: the random generator.

    Shape:
        - Output: ``(x_q (n, 1), F (n, n_f, d_key + n_classes), y (n,))``.

    Returns:
        ``(x_q, F, y)`` with int64 targets ``y``.

    Raises:
        ValueError: for a size below 1 or a negative ``noise``.
    """
    check_integers("magnitude_lookup", n=n, n_f=n_f, d_key=d_key, n_classes=n_classes)
    keys, labels, target, F = _stored_items(n, n_f, d_key, n_classes, noise, generator)
    rows = torch.arange(n)
    x_q = keys[rows, target, 0].abs() + noise * torch.randn(n, generator=generator)
    nearest = (keys[..., 0].abs() - x_q[:, None]).abs().argmin(-1)
    return x_q[:, None], F, labels[rows, nearest]


@catalogued("extra:multidimensional-task")
def featurewise_lookup(
    n: int, n_f: int = 4, d_v: int = 4, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Feature-wise look-up: every feature of the answer comes from a different item.

    Each example holds ``n_f`` items in random order. Item ``l`` has a tag
    ``t_l`` (a permutation of ``0 .. n_f-1``; its key is ``k_l = onehot(t_l)``)
    and a value ``v_l`` in ``{-1, +1}^{d_v}``. The query is a recipe that names,
    for every feature ``i``, the tag ``tau_i`` to read it from; ``q`` is the
    concatenation of ``onehot(tau_i)`` over ``i`` (size ``d_v * n_f``). The answer
    is ``y_i = [v_{l_i, i} > 0]`` with ``t_{l_i} = tau_i``, so different features
    must be read from different items: one scalar weight per item (Eq. 4) cannot
    do it, one weight per item *and feature* (Eq. 30) can.

    Args:
        n: the number of examples.
        n_f: items per example.
        d_v: the value size.
        generator: the random generator.

    Shape:
        - Output: ``(q (n, d_v * n_f), K (n, n_f, n_f), V (n, n_f, d_v), y (n, d_v))``.

    Returns:
        ``(q, K, V, y)`` with ``y`` float 0/1.

    Raises:
        ValueError: for a size below 1.
    """
    check_integers("featurewise_lookup", n=n, n_f=n_f, d_v=d_v)
    check_positive(n=n, n_f=n_f, d_v=d_v)
    tags = torch.argsort(torch.rand(n, n_f, generator=generator), dim=-1)  # random permutation per example
    K = torch.nn.functional.one_hot(tags, n_f).float()
    V = torch.randint(2, (n, n_f, d_v), generator=generator).float() * 2 - 1
    recipe = torch.randint(n_f, (n, d_v), generator=generator)  # tau_i for every feature i
    q = torch.nn.functional.one_hot(recipe, n_f).float().reshape(n, d_v * n_f)
    # position of the item with tag tau_i: invert the permutation
    pos_of_tag = torch.argsort(tags, dim=-1)
    src = torch.gather(pos_of_tag, 1, recipe)  # (n, d_v): the item each feature comes from
    y = torch.gather(V, 1, src.unsqueeze(1)).squeeze(1)  # y[b, i] = V[b, src[b, i], i]
    return q, K, V, (y > 0).float()
