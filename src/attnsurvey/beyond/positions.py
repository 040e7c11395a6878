"""Positions for long contexts: rotary embeddings (RoPE) and ALiBi (beyond the survey).

The survey-era encodings live in :mod:`attnsurvey.transformer.positional`
(sinusoidal and learned codes added to the inputs) and
:mod:`attnsurvey.transformer.relative` (Shaw et al.'s clipped relative
vectors). Two later schemes act inside the attention instead:

* **RoPE** (Su et al., RoFormer): rotate each pair of coordinates
  ``(2i, 2i+1)`` of a query or key at position ``t`` by the angle
  ``t * theta_i``, ``theta_i = base^(-2i/d)`` (the frequencies of the
  sinusoidal code). Rotations compose, so
  ``<R_s q, R_t k> = <q, R_{t-s} k>``: the score depends on the positions
  only through the offset ``t - s``.
* **ALiBi** (Press et al., 2022): no code at all; add ``-m_j * (i - l)`` to
  the score of query ``i`` and key ``l`` in head ``j``, with a fixed
  geometric sequence of slopes ``m_j`` per head. Distant keys are penalised
  linearly, more in some heads than in others.

Both keep the attention core :func:`attnsurvey.general_model.attend`: RoPE
transforms Q and K before it, ALiBi through its ``bias`` argument.
Shapes: ``(..., n, d)`` rows; heads as the axis before the sequence. Masks are
boolean, ``True`` = may attend.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .._checks import as_tensor, check_dim_equal, check_min_rank, check_sizes
from ..attention import AttendOptions
from ..catalog import catalogued
from ..general_mechanisms.scoring import scaled_dot_score
from ..general_model import attend
from ..masking import require_boolean_mask
from ..query_related.multihead import SelfAttentionVariant
from ..transformer.positional import sinusoidal_position_encoding

CHAPTER = "chapters/ch06_2_positions.ipynb"


@catalogued(
    "extra:rope", title="Rotary position embedding (RoPE): the score depends only on the offset (beyond the survey)"
)
def apply_rope(X: Tensor, offset: int = 0, base: float = 10000.0) -> Tensor:
    """Rotary position embedding of the rows of ``X`` (Su et al.).

    X: ``(..., n, d)`` with ``d`` even; row ``t`` sits at position ``offset + t``.
    Pair ``(x_{2i}, x_{2i+1})`` is rotated by the angle ``(offset + t) * theta_i``,
    ``theta_i = base^(-2i/d)``; the sines and cosines are the columns of the
    sinusoidal code :func:`~attnsurvey.transformer.positional.sinusoidal_position_encoding`.
    Returns a tensor like X (norms of every pair unchanged). Raises
    ``ValueError`` for an odd ``d`` or an offset that is not an integer >= 0.
    """
    as_tensor(X, "X")
    check_min_rank(X, 2, "X", "(..., n, d)")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"the RoPE position offset must be an integer >= 0, got offset={offset!r}")
    n, d = X.shape[-2], X.shape[-1]
    if d % 2:
        raise ValueError(f"RoPE rotates pairs of coordinates and needs an even d, got X of shape {tuple(X.shape)}")
    P = sinusoidal_position_encoding(offset + n, d, base, dtype=X.dtype)[offset:].to(X.device)
    sin, cos = P[:, 0::2], P[:, 1::2]
    x1, x2 = X[..., 0::2], X[..., 1::2]
    out = torch.empty_like(X)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out


@catalogued("extra:rope")
def rope_attention(
    Q: Tensor, K: Tensor, V: Tensor, mask: Tensor | None = None, base: float = 10000.0
) -> tuple[Tensor, Tensor]:
    """Scaled dot-product attention on rotated queries and keys: ``attend(R Q, R K, V, mask)``.

    Q: ``(..., n_q, d_k)`` at positions ``0..n_q-1``; K: ``(..., n_f, d_k)`` at
    ``0..n_f-1``; V: ``(..., n_f, d_v)``; mask boolean, ``True`` = may attend.
    Returns ``(c, a)`` as :func:`attnsurvey.general_model.attend`.
    Raises ``ValueError`` on shape problems or a mask that is not boolean.
    """
    require_boolean_mask(mask, "rope_attention")
    c, a = attend(apply_rope(Q, base=base), apply_rope(K, base=base), V, mask)
    assert a is not None  # need_weights is left at True: attend returns the weights
    return c, a


@catalogued("extra:alibi", title="ALiBi: a per-head linear distance penalty on the scores (beyond the survey)")
def alibi_slopes(h: int) -> Tensor:
    """The ALiBi head slopes of Press et al. (2022), a ``(h,)`` float64 tensor.

    For ``h`` a power of two: ``m_j = 2^(-8 (j+1) / h)``, ``j = 0..h-1`` (for 8
    heads: 1/2, 1/4, ..., 1/256). Otherwise the slopes of the largest power of
    two ``p < h``, followed by every other slope of ``2p`` heads until there are
    ``h``. Raises ``ValueError`` unless ``h`` is an integer >= 1.
    """
    check_sizes("alibi_slopes", h=h)

    def geometric(p: int) -> list[float]:
        return [2.0 ** (-8.0 * (j + 1) / p) for j in range(p)]

    p = 2 ** int(math.floor(math.log2(h)))
    slopes = geometric(p) + geometric(2 * p)[0::2][: h - p]
    return torch.tensor(slopes, dtype=torch.float64)


@catalogued("extra:alibi")
def alibi_bias(slopes: Tensor, n_q: int, n_f: int) -> Tensor:
    """The ALiBi bias ``B[j, i, l] = -m_j |i - l|``, shape ``(h, n_q, n_f)``.

    With a causal mask (keys ``l <= i``) this is exactly Press et al.'s
    ``-m_j (i - l)``; without one it is the symmetric variant. The bias lives on
    the slopes' device. Raises ``ValueError`` unless ``slopes`` is 1-D and the
    sizes are ints >= 0.
    """
    if not isinstance(slopes, Tensor) or slopes.dim() != 1:
        raise ValueError(f"slopes must be a (h,) tensor, got {getattr(slopes, 'shape', type(slopes))}")
    for name, size in (("n_q", n_q), ("n_f", n_f)):
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"alibi_bias needs {name} to be an int >= 0, got {name}={size!r}")
    pos_q, pos_f = torch.arange(n_q, device=slopes.device), torch.arange(n_f, device=slopes.device)
    dist = (pos_q[:, None] - pos_f[None, :]).abs()
    return -slopes[:, None, None] * dist


@catalogued("extra:alibi")
def alibi_attention(
    Q: Tensor, K: Tensor, V: Tensor, slopes: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Attention with linear biases: ``softmax(Q K^T / sqrt(d_k) + B) V`` per head.

    Q: ``(..., h, n_q, d_k)``; K: ``(..., h, n_f, d_k)``; V: ``(..., h, n_f, d_v)``;
    slopes: ``(h,)``; mask boolean, broadcastable to ``(..., h, n_q, n_f)``,
    ``True`` = may attend. The bias enters through the core's ``bias`` argument.
    Returns ``(c, a)``. Raises ``ValueError`` if ``h`` differs between Q and slopes
    or the mask is not boolean.
    """
    require_boolean_mask(mask, "alibi_attention")
    as_tensor(Q, "Q")
    check_min_rank(Q, 3, "Q", "(..., h, n_q, d_k)")
    check_dim_equal(Q.shape[-3], len(slopes), "ALiBi", "heads of Q", "number of slopes")
    B = alibi_bias(slopes, Q.shape[-2], K.shape[-2]).to(Q.dtype).to(Q.device)
    c, a = attend(Q, K, V, mask, bias=B)
    assert a is not None  # need_weights is left at True: attend returns the weights
    return c, a


@catalogued("extra:rope")
class RotarySelfAttention(SelfAttentionVariant):
    """Multi-head self-attention with RoPE on every head's queries and keys.

    Args: d_model, h (heads; ``d_model / h`` must be even), base. A
    :class:`~attnsurvey.query_related.multihead.SelfAttentionVariant` (projections
    with biases) whose ``score_fn`` rotates the per-head queries and keys, as
    :func:`rope_attention`. ``forward(X, X_kv=None, mask=None, **options)``: X
    ``(..., n, d_model)``; returns ``(output, weights (..., h, n, n))``. Accepts
    any sequence length.
    """

    def __init__(self, d_model: int, h: int, base: float = 10000.0) -> None:
        if h >= 1 and d_model % h == 0 and (d_model // h) % 2:
            raise ValueError(f"RoPE needs an even head size, got d_model/h = {d_model // h}")
        super().__init__(d_model, h, bias=True)
        self.base = base

    # ignore: the base declares the hook as an attribute (None: no hook); a variant fills it with a method
    def score_fn(self, q: Tensor, k: Tensor) -> Tensor:  # type: ignore[override]
        return scaled_dot_score(apply_rope(q, base=self.base), apply_rope(k, base=self.base))


@catalogued("extra:alibi")
class ALiBiSelfAttention(SelfAttentionVariant):
    """Multi-head self-attention with the ALiBi bias (fixed slopes, :func:`alibi_slopes`).

    A :class:`~attnsurvey.query_related.multihead.SelfAttentionVariant`
    (projections with biases) that passes :func:`alibi_bias` to the core as a
    per-head ``bias``. ``forward(X, X_kv=None, mask=None, **options)`` as :class:`RotarySelfAttention`;
    ``options`` may not include ``bias`` (the module sets it).
    """

    slopes: Tensor  # a buffer (registered in __init__)

    def __init__(self, d_model: int, h: int) -> None:
        super().__init__(d_model, h, bias=True)
        self.register_buffer("slopes", alibi_slopes(h).float(), persistent=False)

    def attend_options(self, X: Tensor) -> AttendOptions:
        n = X.shape[-2]
        B = alibi_bias(self.slopes, n, n).to(X.dtype).to(X.device)  # (h, n, n)
        return {"bias": B.reshape((1,) * (X.dim() - 2) + B.shape)}  # per head, with X's batch axes
