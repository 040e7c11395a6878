"""Local (sliding-window) self-attention: each token attends to the ``2w + 1`` tokens around it.

Restricting attention to a band ``|i - j| <= w`` turns the ``n x n`` weights
into ``n x (2w + 1)``: linear time and memory in ``n``. The efficient form
gathers each query's window of keys (``unfold``) instead of masking a full
matrix; :func:`local_window_mask` gives the equivalent dense mask.
Masks are boolean, ``True`` = may attend.

Shapes: ``...`` leading batch axes, n tokens, w window half-width, d_k key size, d_v value size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F_
from torch import Tensor

from .._checks import as_tensor, check_dim_equal, check_integers, check_min_rank
from ..attention import attend
from ..catalog import catalogued
from ..masking import band_mask

CHAPTER = "chapters/ch03_3_4_transformer_variants.ipynb"


@catalogued("extra:local-window-attention")
def local_window_mask(n: int, w: int, device: torch.device | None = None) -> Tensor:
    """Boolean band mask ``|i - j| <= w`` (``True`` = may attend): :func:`attnsurvey.masking.band_mask`.

    Args:
        n: the sequence length.
        w: the half-width.
        device: where to build the mask.

    Shape:
        - Output: ``(n, n)``.

    Returns:
        The band mask.

    Raises:
        ValueError: unless ``w >= 0``.
    """
    return band_mask(n, w, device=device)


@catalogued(
    "extra:local-window-attention", title="Local (sliding-window) self-attention, |i - j| <= w, in O(n w) memory"
)
def local_window_attention(Q: Tensor, K: Tensor, V: Tensor, w: int) -> tuple[Tensor, Tensor]:
    """Sliding-window attention in ``O(n w)`` memory.

    ``a_band[..., i, t]`` is the weight of key ``i - w + t`` (zero outside the
    sequence). Equal to full attention with :func:`local_window_mask`. ``n = 0``
    gives empty results.

    Args:
        Q: the queries.
        K: the keys.
        V: the values.
        w: the half-width (>= 0).

    Shape:
        - Q, K: ``(..., n, d_k)``; V: ``(..., n, d_v)``.
        - Output: ``(c (..., n, d_v), a_band (..., n, 2w + 1))``.

    Returns:
        ``(c, a_band)``: the contexts and the band weights.

    Raises:
        ValueError: on bad shapes or ``w < 0``.
        TypeError: if an input is not a floating-point tensor.
    """
    for sym, t in (("Q", Q), ("K", K), ("V", V)):
        as_tensor(t, sym)
        check_min_rank(t, 2, sym, "(..., n, d)")
    check_dim_equal(Q.shape[-2], K.shape[-2], "local self-attention", "n of Q", "n of K")
    check_dim_equal(K.shape[-2], V.shape[-2], "local self-attention", "n of K", "n of V")
    check_dim_equal(Q.shape[-1], K.shape[-1], "local self-attention", "d_q", "d_k")
    if w < 0:
        raise ValueError(f"window half-width w must be >= 0, got w={w}")
    check_integers("local_window_attention", minimum=0, w=w)
    n = K.shape[-2]
    if n == 0:  # no positions: empty contexts and band weights
        batch = torch.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
        return V.new_zeros(*batch, 0, V.shape[-1]), Q.new_zeros(*batch, 0, 2 * w + 1)
    Kw = F_.pad(K, (0, 0, w, w)).unfold(-2, 2 * w + 1, 1)  # (..., n, d_k, 2w+1)
    Vw = F_.pad(V, (0, 0, w, w)).unfold(-2, 2 * w + 1, 1)
    j = torch.arange(n, device=Q.device)[:, None] - w + torch.arange(2 * w + 1, device=Q.device)[None, :]
    inside = ((j >= 0) & (j < n))[:, None, :]  # (n, 1, 2w+1): keys that exist
    # each position is one query ``(..., n, 1, d)`` over its own 2w+1 keys ``(..., n, 2w+1, d)``
    c, a = attend(Q.unsqueeze(-2), Kw.transpose(-1, -2), Vw.transpose(-1, -2), inside)
    return c.squeeze(-2), a.squeeze(-2)


def band_to_dense(a_band: Tensor, w: int) -> Tensor:
    """Scatter band weights into a dense matrix (for plots and checks).

    Args:
        a_band: the band weights, ``a_band[..., i, t]`` for key ``i - w + t``.
        w: the half-width.

    Shape:
        - a_band: ``(..., n, 2w + 1)``.
        - Output: ``(..., n, n)``.

    Returns:
        The dense weights (zero outside the band).

    Raises:
        TypeError: ``a_band`` is not a tensor.
        ValueError: ``w`` is not an integer >= 0.
    """
    as_tensor(a_band, "a_band")
    check_integers("band_to_dense", minimum=0, w=w)
    n = a_band.shape[-2]
    padded = a_band.new_zeros(*a_band.shape[:-1], n + 2 * w)
    idx = torch.arange(n)[:, None] + torch.arange(2 * w + 1)[None, :]
    padded.scatter_(-1, idx.expand_as(a_band), a_band)
    return padded[..., w : w + n]
