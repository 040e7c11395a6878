"""Recall tasks for token mixers: associative recall with many queries, one needle, near-duplicate distractors.

Three generators of token sequences whose answer is stored earlier in the
sequence, for comparing causal token mixers (softmax attention, differential,
linear and selective attention):

* :func:`mqar_batch`: multi-query associative recall (Arora et al. 2023,
  Zoology): ``P`` key-value pairs, then ``Q`` of the stored keys again; the
  target at each repeated key is its value.
* :func:`needle_batch`: a long run of filler with one key-value pair (the
  needle) somewhere, and the key again at the end; the target is the value.
* :func:`distractor_batch`: items of three tokens ``(a, b, v)``, one of them
  the target ``(a*, b*, v*)`` and the rest near-duplicates that share ``a*`` or
  ``b*``; the query ``a* b*`` at the end asks for ``v*``. A head whose score adds
  a match of ``a`` and a match of ``b`` gives every distractor half the target's
  score, and the weight spent on them is common to a map that scores ``a`` (or
  ``b``) alone: the situation that differential attention's subtraction targets.

Vocabularies are split into ranges so that a token's role is its range: keys
``[0, n_keys)``, values ``[n_keys, n_keys + n_values)``, filler above. Targets
follow ``F.cross_entropy``: :data:`~attnsurvey.data.sequences.IGNORE` wherever
nothing is asked, so a loss counts the query positions only. No target is
visible in the input at or before its position, except as the stored value the
query must find.

Shapes: ``B`` sequences of ``n`` tokens; ``x`` and ``y`` are ``(B, n)`` integers.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import check_integers
from .sequences import IGNORE


def _distinct(batch: int, pool: int, k: int, generator: torch.Generator) -> Tensor:
    """``k`` distinct integers from ``[0, pool)`` per row, uniformly (``(batch, k)``)."""
    return torch.rand(batch, pool, generator=generator).argsort(-1)[:, :k]


def mqar_batch(
    batch: int, n_pairs: int, n_queries: int | None, n_keys: int, n_values: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """Multi-query associative recall (Zoology's MQAR): pairs ``k_1 v_1 ... k_P v_P``, then ``Q`` stored keys.

    Keys are distinct within a sequence, drawn from ``[0, n_keys)``; values are drawn
    uniformly from ``[n_keys, n_keys + n_values)``; the queries are ``Q`` distinct stored
    keys in random order. ``y`` is the value of the query key at each query position and
    IGNORE elsewhere.

    Args:
        batch: the number of sequences ``B``.
        n_pairs: the number of stored pairs ``P``.
        n_queries: the number of queries ``Q`` (at most ``P``); None: every stored key, ``Q = P``.
        n_keys: the size of the key range (at least ``P``).
        n_values: the size of the value range.
        generator: the random generator.

    Shape:
        returns x and y ``(B, 2P + Q)``.

    Returns:
        ``(x, y)``.

    Raises:
        ValueError: unless every size is a positive integer, ``Q <= P <= n_keys``.
    """
    n_queries = n_pairs if n_queries is None else n_queries
    check_integers("mqar_batch", minimum=1, batch=batch, n_pairs=n_pairs, n_queries=n_queries, n_keys=n_keys)
    check_integers("mqar_batch", minimum=1, n_values=n_values)
    if not n_queries <= n_pairs <= n_keys:
        raise ValueError(
            f"mqar_batch needs n_queries <= n_pairs <= n_keys, got n_queries={n_queries}, n_pairs={n_pairs}, "
            f"n_keys={n_keys}"
        )
    keys = _distinct(batch, n_keys, n_pairs, generator)  # (B, P)
    values = n_keys + torch.randint(0, n_values, (batch, n_pairs), generator=generator)
    asked = _distinct(batch, n_pairs, n_queries, generator)  # which stored pairs are queried
    pairs = torch.stack([keys, values], dim=-1).flatten(1)  # k_1 v_1 k_2 v_2 ...
    x = torch.cat([pairs, keys.gather(1, asked)], dim=1)
    y = torch.full_like(x, IGNORE)
    y[:, 2 * n_pairs :] = values.gather(1, asked)
    return x, y


def needle_batch(
    batch: int, n: int, n_keys: int, n_values: int, n_filler: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """One key-value needle in filler, the key repeated at the end: the target is the value.

    Filler tokens are uniform over ``[n_keys + n_values, n_keys + n_values + n_filler)``;
    the key (from ``[0, n_keys)``) stands at a uniform position ``p`` in ``[0, n - 3]``,
    its value at ``p + 1``, and the key again at ``n - 1``, where ``y`` holds the value
    (IGNORE elsewhere).

    Args:
        batch: the number of sequences ``B``.
        n: the sequence length (at least 3).
        n_keys: the size of the key range.
        n_values: the size of the value range.
        n_filler: the size of the filler range.
        generator: the random generator.

    Shape:
        returns x and y ``(B, n)``.

    Returns:
        ``(x, y)``.

    Raises:
        ValueError: unless every size is a positive integer and ``n >= 3``.
    """
    check_integers("needle_batch", minimum=1, batch=batch, n_keys=n_keys, n_values=n_values, n_filler=n_filler)
    check_integers("needle_batch", minimum=3, n=n)
    x = n_keys + n_values + torch.randint(0, n_filler, (batch, n), generator=generator)
    key = torch.randint(0, n_keys, (batch,), generator=generator)
    value = n_keys + torch.randint(0, n_values, (batch,), generator=generator)
    pos = torch.randint(0, n - 2, (batch,), generator=generator)
    rows = torch.arange(batch)
    x[rows, pos], x[rows, pos + 1], x[:, -1] = key, value, key
    y = torch.full_like(x, IGNORE)
    y[:, -1] = value
    return x, y


def distractor_batch(
    batch: int, n_distractors: int, n_keys: int, n_values: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """Find the value of the item ``(a*, b*)`` among near-duplicates that share ``a*`` or ``b*``.

    A sequence holds ``1 + D`` items of three tokens ``a b v`` in random order, then the
    query ``a* b*``. One item is the target ``(a*, b*, v*)``; ``ceil(D/2)`` distractors are
    ``(a*, b_i, v_i)`` and ``floor(D/2)`` are ``(a_j, b*, v_j)``, with ``a* , a_j`` distinct and
    ``b*, b_i`` distinct keys from ``[0, n_keys)``, so only the pair ``(a*, b*)`` names the
    target. Values are uniform over ``[n_keys, n_keys + n_values)``. ``y`` holds ``v*`` at
    the last position (the ``b*`` of the query) and IGNORE elsewhere. A reader that matches
    only ``a`` or only ``b`` sees ``ceil(D/2) + 1`` or ``floor(D/2) + 1`` candidates.

    Args:
        batch: the number of sequences ``B``.
        n_distractors: the number of near-duplicates ``D``.
        n_keys: the size of the key range (at least ``ceil(D/2) + 1``).
        n_values: the size of the value range.
        generator: the random generator.

    Shape:
        returns x and y ``(B, 3 (1 + D) + 2)``.

    Returns:
        ``(x, y)``.

    Raises:
        ValueError: unless ``batch, n_keys, n_values, D >= 1`` and ``n_keys > ceil(D/2)``.
    """
    check_integers("distractor_batch", minimum=1, batch=batch, n_keys=n_keys, n_values=n_values)
    check_integers("distractor_batch", minimum=1, n_distractors=n_distractors)
    n_b = (n_distractors + 1) // 2  # distractors sharing a*, each with another b
    n_a = n_distractors // 2  # distractors sharing b*, each with another a
    if n_keys <= n_b:
        raise ValueError(
            f"distractor_batch needs n_keys > ceil(n_distractors/2) distinct keys, got n_keys={n_keys}, "
            f"n_distractors={n_distractors}"
        )
    a = _distinct(batch, n_keys, n_a + 1, generator)  # a[:, 0] = a*
    b = _distinct(batch, n_keys, n_b + 1, generator)  # b[:, 0] = b*
    first = torch.cat([a[:, :1].expand(-1, n_b + 1), a[:, 1:]], dim=1)  # target, shares-a*, shares-b*
    second = torch.cat([b, b[:, :1].expand(-1, n_a)], dim=1)
    values = n_keys + torch.randint(0, n_values, (batch, n_distractors + 1), generator=generator)
    order = torch.rand(batch, n_distractors + 1, generator=generator).argsort(-1)
    items = torch.stack([t.gather(1, order) for t in (first, second, values)], dim=-1).flatten(1)
    x = torch.cat([items, a[:, :1], b[:, :1]], dim=1)
    y = torch.full_like(x, IGNORE)
    y[:, -1] = values[:, 0]
    return x, y


__all__ = ["distractor_batch", "mqar_batch", "needle_batch"]
