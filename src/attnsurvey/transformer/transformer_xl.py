"""Transformer-XL: segment-level recurrence with relative positions (Dai et al., 2019).

A long sequence is processed in segments of ``n`` tokens. Each layer keeps the
hidden states it received for the previous segment as a *memory* ``M``
(``n_m`` rows, gradient stopped) and lets the current segment's queries attend
over ``[M; X]``. Absolute positions would collide (position 0 of every
segment), so scores use relative distances ``i - j`` instead::

    e_ij = (q_i + u)^T k_j  +  (q_i + v)^T W_R r_{i-j}

with sinusoidal ``r`` and learned global biases ``u`` and ``v``.
Computing ``(q_i + v)^T W_R r_{i-j}`` for every pair by a loop is slow; the
*relative shift* computes it for all pairs from one matrix product against
the ``klen = n_m + n`` distances in descending order, then slides row ``i``
left by ``n - 1 - i`` places (:func:`rel_shift`).

Shapes: ``...`` leading batch axes, n segment length, n_m memory length, d_model model width, h
heads.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F_
from torch import Tensor, nn

from .._checks import as_tensor, check_dim_equal, check_integers, check_min_rank, check_weight
from ..catalog import catalogued
from ..masking import causal_mask
from ..query_related.multihead import multi_head_attention, split_heads
from .positional import sinusoidal_position_encoding

CHAPTER = "chapters/ch03_3_4_transformer_variants.ipynb"


@catalogued(
    "extra:transformer-xl",
    title="Transformer-XL: segment-level recurrence with relative positional scores and the relative shift",
)
def rel_shift(BD: Tensor) -> Tensor:
    """The relative shift: ``out[..., i, j] = BD[..., i, n - 1 - i + j]`` wherever ``j <= n_m + i``.

    Column ``r`` of BD holds distance ``klen - 1 - r``. Entries above the causal
    boundary (``j > n_m + i``) are junk and must be masked. Pad one zero column,
    reinterpret the memory, drop one row.

    Args:
        BD: the position scores, one column per distance.

    Shape:
        - BD: ``(..., n, klen)`` with ``klen = n_m + n``.
        - Output: ``(..., n, klen)``.

    Returns:
        The shifted scores, column ``j`` for key ``j``.

    Raises:
        TypeError: ``BD`` is not a tensor.
    """
    as_tensor(BD, "BD")
    *batch, n, klen = BD.shape
    padded = F_.pad(BD, (1, 0))  # (..., n, klen + 1)
    return padded.reshape(*batch, klen + 1, n)[..., 1:, :].reshape(*batch, n, klen)


def xl_causal_mask(n: int, n_m: int, device: torch.device | None = None) -> Tensor:
    """Boolean mask: query ``i`` (absolute ``n_m + i``) may see keys ``j <= n_m + i``.

    :func:`attnsurvey.masking.causal_mask` with ``offset = n_m``; ``True`` = may attend.

    Args:
        n: the segment length.
        n_m: the memory length.
        device: where to build the mask.

    Shape:
        - Output: ``(n, n_m + n)``.

    Returns:
        The causal mask over memory and segment.

    Raises:
        ValueError: ``n`` or ``n_m`` is not an integer >= 0.
    """
    check_integers("xl_causal_mask", minimum=0, n=n, n_m=n_m)
    return causal_mask(n, n_m + n, device, offset=n_m)


@catalogued("extra:transformer-xl")
def xl_attention(
    X: Tensor,
    M: Tensor | None,
    W_Q: Tensor,
    W_K: Tensor,
    W_V: Tensor,
    W_O: Tensor,
    W_R: Tensor,
    u: Tensor,
    v: Tensor,
    h: int,
) -> tuple[Tensor, Tensor]:
    """One Transformer-XL attention step over memory ``M`` and segment ``X`` (causal).

    The gradient through M is stopped.

    Args:
        X: the current segment.
        M: the memory, or None.
        W_Q: the query projection.
        W_K: the key projection.
        W_V: the value projection.
        W_O: the output projection.
        W_R: the projection of the relative position codes.
        u: the content bias per head.
        v: the position bias per head.
        h: the number of heads (must divide d_model).

    Shape:
        - X: ``(..., n, d_model)``; M: ``(..., n_m, d_model)``;
          W_Q, W_K, W_V, W_R, W_O: ``(d_model, d_model)``; u, v: ``(h, d_model / h)``.
        - Output: ``(output (..., n, d_model), weights (..., h, n, n_m + n))``.

    Returns:
        ``(output, weights)``.

    Raises:
        ValueError: if ``h`` does not divide ``d_model`` or a shape is wrong.
        TypeError: if X or M is not a floating-point tensor.
    """
    as_tensor(X, "X")
    check_min_rank(X, 2, "X", "(..., n, d_model)")
    d = X.shape[-1]
    if h < 1 or d % h:
        raise ValueError(f"d_model={d} is not divisible by the number of heads h={h}")
    for sym, W in (("W_Q", W_Q), ("W_K", W_K), ("W_V", W_V), ("W_O", W_O), ("W_R", W_R)):
        check_weight(W, (d, d), sym, "(d_model, d_model)")
    check_weight(u, (h, d // h), "u", "(h, d_model/h)")
    check_weight(v, (h, d // h), "v", "(h, d_model/h)")
    if M is None:
        M = X.new_zeros(*X.shape[:-2], 0, d)
    as_tensor(M, "M")
    check_min_rank(M, 2, "M", "(..., n_m, d_model)")
    check_dim_equal(M.shape[-1], d, "Transformer-XL memory", "d_model of M", "d_model of X")
    if M.shape[:-2] != X.shape[:-2]:
        raise ValueError(
            f"Transformer-XL memory M (..., n_m, d_model) needs the batch axes {tuple(X.shape[:-2])} of X "
            f"{tuple(X.shape)}, got M {tuple(M.shape)}"
        )
    n, n_m = X.shape[-2], M.shape[-2]
    klen = n_m + n
    R = sinusoidal_position_encoding(klen, d, dtype=X.dtype).flip(0).to(X.device)  # distances klen-1, ..., 0
    r = split_heads(R @ W_R.T, h)  # (h, klen, d_h)

    def score(q: Tensor, k: Tensor) -> Tensor:
        AC = (q + u[:, None, :]) @ k.transpose(-1, -2)  # content terms (a) + (c)
        BD = rel_shift((q + v[:, None, :]) @ r.transpose(-1, -2))  # position terms (b) + (d)
        return (AC + BD) / math.sqrt(d // h)

    # the one multi-head stack, with the memory hook (stop-gradient memory before the segment)
    out, a = multi_head_attention(
        X, X, X, W_Q, W_K, W_V, W_O, h, xl_causal_mask(n, n_m, X.device)[None], memory=M.detach(), score=score
    )  # [None]: the mask is per query, never per batch row
    assert a is not None
    return out, a


@catalogued("extra:transformer-xl")
class TransformerXLAttention(nn.Module):
    """Module form of :func:`xl_attention` that also returns the next memory.

    The new memory is the last ``mem_len`` rows of ``[M; X]``, detached.

    Args:
        d_model: the model width.
        h: the number of heads (must divide d_model).
        mem_len: the number of rows kept as memory (>= 0).

    Shape:
        - X: ``(..., n, d_model)``; M: ``(..., n_m, d_model)`` or None.
        - Output: ``(output (..., n, d_model), new_memory (..., min(mem_len, n_m + n), d_model),
          weights (..., h, n, n_m + n))``.

    Raises:
        ValueError: if ``h`` does not divide ``d_model``, ``mem_len < 0``, or an input
            shape is wrong (see :func:`xl_attention`).
    """

    def __init__(self, d_model: int, h: int, mem_len: int) -> None:
        check_integers("TransformerXLAttention", minimum=1, d_model=d_model, h=h)
        super().__init__()
        if h < 1 or d_model % h:
            raise ValueError(f"d_model={d_model} is not divisible by the number of heads h={h}")
        if mem_len < 0:
            raise ValueError(f"the memory length mem_len must be >= 0, got mem_len={mem_len}")
        self.h, self.mem_len = h, mem_len
        self.W_Q, self.W_K, self.W_V, self.W_O, self.W_R = (nn.Linear(d_model, d_model, bias=False) for _ in range(5))
        self.u = nn.Parameter(torch.zeros(h, d_model // h))
        self.v = nn.Parameter(torch.zeros(h, d_model // h))

    def forward(self, X: Tensor, M: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        out, a = xl_attention(
            X,
            M,
            self.W_Q.weight,
            self.W_K.weight,
            self.W_V.weight,
            self.W_O.weight,
            self.W_R.weight,
            self.u,
            self.v,
            self.h,
        )
        full = X if M is None else torch.cat([M, X], dim=-2)
        return out, full[..., full.shape[-2] - min(self.mem_len, full.shape[-2]) :, :].detach(), a
