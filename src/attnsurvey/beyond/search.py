"""Greedy and beam-search decoding for any autoregressive model (beyond the survey).

A decoder defines ``p(y_1..y_L) = prod_t p(y_t | y_<t)``. Greedy decoding
takes the most probable token at each step; beam search keeps the
``beam_width`` best prefixes (by summed log-probability) at every step and
returns the best complete sequence. Width 1 is greedy; a width as large as the
number of prefixes is exhaustive search.

The model is a callable ``step_log_probs(prefixes) -> log_probs``: prefixes
``(B, k, t)`` integer tokens (``B`` examples, ``k`` hypotheses each, starting
with the begin token), log-probabilities ``(B, k, V)`` of the next token. Output
length is fixed (``length`` tokens), as in the book's transduction tasks.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..catalog import catalogued

StepFn = Callable[[Tensor], Tensor]


def _check(batch: int, length: int, beam_width: int = 1) -> None:
    if batch < 1 or length < 0 or beam_width < 1:
        raise ValueError(
            f"need batch >= 1, length >= 0, beam_width >= 1; got batch={batch}, length={length}, beam_width={beam_width}"
        )


def _scores(step_log_probs: StepFn, prefixes: Tensor) -> Tensor:
    lp = step_log_probs(prefixes)
    if lp.dim() != 3 or lp.shape[:2] != prefixes.shape[:2]:
        raise ValueError(
            f"step_log_probs must return (B, k, V) for prefixes {tuple(prefixes.shape)}, got {tuple(lp.shape)}"
        )
    return lp


@catalogued("extra:trained-transformer")
@torch.no_grad()
def greedy_search(step_log_probs: StepFn, bos: int, batch: int, length: int) -> tuple[Tensor, Tensor]:
    """Greedy decoding: ``y_t = argmax p(y_t | y_<t)`` for ``t = 1..length``.

    Returns ``(tokens (B, length), log-probability of each sequence (B,))``.
    Raises ``ValueError`` for non-positive sizes or a callable returning the wrong shape.
    """
    _check(batch, length)
    seq = torch.full((batch, 1, 1), bos, dtype=torch.long)
    total = torch.zeros(batch)
    for _ in range(length):
        lp = _scores(step_log_probs, seq)[:, 0]
        best, tok = lp.max(-1)
        total = total + best.to(total.dtype)
        seq = torch.cat([seq, tok[:, None, None]], dim=-1)
    return seq[:, 0, 1:], total


@catalogued("extra:trained-transformer")
@torch.no_grad()
def beam_search(
    step_log_probs: StepFn, bos: int, batch: int, length: int, beam_width: int = 4
) -> tuple[Tensor, Tensor]:
    """Beam search: keep the ``beam_width`` prefixes with the highest summed log-probability.

    At each step every kept prefix is extended by every token; the
    ``beam_width`` best extensions (over all prefixes) survive. After ``length``
    steps the best one is returned. Returns ``(tokens (B, length),
    log-probability (B,))``. With ``beam_width = 1`` it is :func:`greedy_search`;
    with ``beam_width >= V^(length-1)`` it is exhaustive. Raises ``ValueError``
    for non-positive sizes or a callable returning the wrong shape.
    """
    _check(batch, length, beam_width)
    seqs = torch.full((batch, 1, 1), bos, dtype=torch.long)
    scores = torch.zeros(batch, 1, dtype=torch.float64)
    for _ in range(length):
        lp = _scores(step_log_probs, seqs)
        V = lp.shape[-1]
        cand = (scores[..., None] + lp.to(torch.float64)).reshape(batch, -1)  # (B, k * V)
        scores, idx = cand.topk(min(beam_width, cand.shape[-1]), dim=-1)
        parent, tok = idx // V, idx % V
        seqs = torch.cat([seqs.gather(1, parent[..., None].expand(-1, -1, seqs.shape[-1])), tok[..., None]], dim=-1)
    return seqs[:, 0, 1:], scores[:, 0]
