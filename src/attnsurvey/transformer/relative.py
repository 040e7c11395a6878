"""Position-aware attention scores: relative positions and a Gaussian local bias.

* Relative positions (Shaw et al., 2018; review eq. 14-15). Instead of adding
  a code to the inputs, every *pair* ``(i, j)`` gets learned vectors
  ``a^K_ij`` and ``a^V_ij`` that depend only on the clipped offset
  ``clip(j - i, b) = max(-b, min(b, j - i))`` (eq. 15)::

      z_i = sum_j softmax_j( (x_i W^Q)(x_j W^K + a^K_ij)^T / sqrt(d_k) ) (x_j W^V + a^V_ij)   (eq. 14)

  Only ``2b + 1`` vectors per role exist, so the model accepts sequences of any
  length, including lengths never seen in training.

* Gaussian local bias (Yang et al., 2018; review eq. 16). A bias
  ``G_ij = -(j - P_i)^2 / (2 sigma_i^2)`` with ``sigma_i = D_i / 2`` is added to
  the scores before the softmax, ``alpha_ij = softmax_j(e_ij + G_ij)``, so that
  token ``i`` favours a window of size ``D_i`` around a centre ``P_i``. ``G_ij`` is
  0 at the centre and goes to ``-inf`` far from it.

Masks are boolean, ``True`` = may attend.

Shapes: ``...`` leading batch axes, n_q queries, n_f keys, d_k key size, d_v value size, b clipping
distance, h heads.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .._checks import as_tensor, check_dim_equal, check_integers, check_min_rank, check_weight
from ..attention import attend
from ..catalog import catalogued
from ..general_mechanisms.scoring import scaled_dot_score
from ..masking import require_boolean_mask
from ..query_related.multihead import SelfAttentionVariant

CHAPTER = "chapters/ch03_3_3_transformer.ipynb"


@catalogued("extra:relative-position", title="Relative positions with clipping (review eq. 14-15; Shaw et al. 2018)")
def clipped_relative_positions(n_q: int, n_f: int, b: int, device: torch.device | None = None) -> Tensor:
    """Offsets ``clip(j - i, b)`` of review eq. 15 as an integer tensor in ``[-b, b]``.

    Args:
        n_q: the number of queries.
        n_f: the number of keys.
        b: the clipping distance.
        device: where to build the tensor.

    Shape:
        - Output: ``(n_q, n_f)``.

    Returns:
        The clipped offsets.

    Raises:
        ValueError: unless ``b >= 0``.
    """
    check_integers("clipped_relative_positions", minimum=0, n_q=n_q, n_f=n_f)
    if b < 0:
        raise ValueError(f"the clipping distance b must be >= 0, got b={b}")
    i = torch.arange(n_q, device=device)[:, None]
    j = torch.arange(n_f, device=device)[None, :]
    return (j - i).clamp(-b, b)


@catalogued("extra:relative-position")
def relative_position_attention(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    A_K: Tensor,
    A_V: Tensor,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Self-attention with clipped relative positions, review eq. 14-15 (Shaw et al., 2018).

    A_K and A_V hold the vectors for offsets ``-b..b`` (row ``b + clip(j - i, b)``).
    A fully-masked row gives zero weights and ``z = 0``.

    Args:
        Q: the projected queries ``x_i W^Q``.
        K: the projected keys.
        V: the projected values.
        A_K: the key-side offset vectors.
        A_V: the value-side offset vectors.
        mask: boolean, broadcastable to ``(..., n_q, n_f)``, ``True`` = may attend.

    Shape:
        - Q: ``(..., n_q, d_k)``; K: ``(..., n_f, d_k)``; V: ``(..., n_f, d_v)``;
          A_K: ``(2b+1, d_k)``; A_V: ``(2b+1, d_v)``.
        - Output: ``(z (..., n_q, d_v), alpha (..., n_q, n_f))``.

    Returns:
        ``(z, alpha)``: the contexts and the weights.

    Raises:
        ValueError: on shape mismatches, an even number of rows in ``A_K``, or a mask
            that is not boolean.
        TypeError: if an input is not a floating-point tensor.
    """
    require_boolean_mask(mask, "relative_position_attention")
    for sym, t in (("Q", Q), ("K", K), ("V", V), ("A_K", A_K), ("A_V", A_V)):
        as_tensor(t, sym)
    check_min_rank(Q, 2, "Q", "(..., n_q, d_k)")
    check_min_rank(K, 2, "K", "(..., n_f, d_k)")
    check_dim_equal(Q.shape[-1], K.shape[-1], "relative attention", "d_q", "d_k")
    check_dim_equal(K.shape[-2], V.shape[-2], "relative attention", "n_f of K", "n_f of V")
    if A_K.dim() != 2 or A_K.shape[0] % 2 == 0:
        raise ValueError(f"A_K must have shape (2b+1, d_k), got {tuple(A_K.shape)}")
    b = (A_K.shape[0] - 1) // 2
    check_weight(A_K, (2 * b + 1, K.shape[-1]), "A_K", "(2b+1, d_k)")
    check_weight(A_V, (2 * b + 1, V.shape[-1]), "A_V", "(2b+1, d_v)")
    aK, aV = _relative_tables(A_K, A_V, Q.shape[-2], K.shape[-2])
    c, alpha = attend(Q, K, V, mask, lambda Q, K: _relative_scores(Q, K, aK))
    return c + _relative_values(alpha, aV), alpha


def _relative_tables(A_K: Tensor, A_V: Tensor, n_q: int, n_f: int) -> tuple[Tensor, Tensor]:
    """``(a^K_ij, a^V_ij)``, each ``(n_q, n_f, d)``: rows ``b + clip(j - i, b)`` of the offset tables."""
    return _relative_rows(A_K, n_q, n_f), _relative_rows(A_V, n_q, n_f)


def _relative_rows(A: Tensor, n_q: int, n_f: int) -> Tensor:
    """Rows ``b + clip(j - i, b)`` of one offset table ``A`` ``(2b+1, d)``: ``(n_q, n_f, d)``."""
    b = (A.shape[0] - 1) // 2
    return A[clipped_relative_positions(n_q, n_f, b, A.device) + b]


def _relative_scores(Q: Tensor, K: Tensor, aK: Tensor) -> Tensor:
    """Review eq. 14: ``e_ij = q_i (k_j + a^K_ij)^T / sqrt(d_k)``."""
    return (Q @ K.transpose(-1, -2) + torch.einsum("...id,ijd->...ij", Q, aK)) / math.sqrt(K.shape[-1])


def _relative_values(alpha: Tensor, aV: Tensor) -> Tensor:
    """Review eq. 15's position term ``sum_j alpha_ij a^V_ij`` (added to ``sum_j alpha_ij v_j``)."""
    return torch.einsum("...ij,ijd->...id", alpha, aV)


@catalogued("extra:relative-position")
class RelativeSelfAttention(SelfAttentionVariant):
    """Multi-head self-attention with relative positions (review eq. 14-15).

    The offset tables ``A_K``, ``A_V`` (``(2b+1, d_model/h)``) are shared by the heads,
    as in Shaw et al. A configuration of :class:`MultiHeadAttention`: its ``score_fn``
    adds the key-side offsets, its ``context_hook`` the value-side ones.

    Args:
        d_model: the model width.
        h: the number of heads (must divide d_model).
        b: the clipping distance (>= 0).
        bias: whether the projections have biases.

    Shape:
        ``forward(X, X_kv=None, mask=None, **options)``: X ``(..., n, d_model)``; it is
        self-attention only, so ``X_kv`` must be ``None`` or ``X`` itself; returns
        ``(output (..., n, d_model), weights (..., h, n, n))``.

    Raises:
        ValueError: if ``h`` does not divide ``d_model`` or ``b < 0``.
    """

    def __init__(self, d_model: int, h: int, b: int = 4, bias: bool = True) -> None:
        check_integers("RelativeSelfAttention", minimum=1, d_model=d_model, h=h)
        if h < 1 or d_model % h:
            raise ValueError(f"d_model={d_model} is not divisible by the number of heads h={h}")
        if b < 0:
            raise ValueError(f"the clipping distance b must be >= 0, got b={b}")
        super().__init__(d_model, h, bias=bias)
        self.b = b
        d_k = d_model // h
        self.A_K = nn.Parameter(torch.randn(2 * b + 1, d_k) * d_k**-0.5)
        self.A_V = nn.Parameter(torch.randn(2 * b + 1, d_k) * d_k**-0.5)

    # ignore: the base declares the hook as an attribute (None: no hook); a variant fills it with a method
    def score_fn(self, q: Tensor, k: Tensor) -> Tensor:  # type: ignore[override]
        return _relative_scores(q, k, _relative_rows(self.A_K, q.shape[-2], k.shape[-2]))  # the key side only

    # ignore: the base declares the hook as an attribute (None: no hook); a variant fills it with a method
    def context_hook(self, c: Tensor, a: Tensor) -> Tensor:  # type: ignore[override]
        return c + _relative_values(a, _relative_rows(self.A_V, a.shape[-2], a.shape[-1]))  # the value side only


@catalogued(
    "extra:gaussian-local-bias",
    title="Learnable Gaussian local bias added to the scores, softmax(e_ij + G_ij) (review eq. 16; Yang et al. 2018)",
)
def gaussian_local_bias(P: Tensor, D: Tensor, n_f: int) -> Tensor:
    """The Gaussian bias ``G_ij = -(j - P_i)^2 / (2 sigma_i^2)``, ``sigma_i = D_i / 2`` (review eq. 16).

    Args:
        P: the centres (real-valued positions).
        D: the window sizes, all > 0.
        n_f: the number of key positions.

    Shape:
        - P, D: ``(..., n_q)``.
        - Output: G ``(..., n_q, n_f)`` with entries in ``(-inf, 0]``.

    Returns:
        The bias G.

    Raises:
        ValueError: if the shapes differ or a window size is not positive.
        TypeError: if P or D is not a floating-point tensor.
    """
    as_tensor(P, "P")
    as_tensor(D, "D")
    if P.shape != D.shape:
        raise ValueError(f"P and D must have the same shape (..., n_q), got P={tuple(P.shape)}, D={tuple(D.shape)}")
    if not bool((D > 0).all()):
        raise ValueError(f"window sizes D must be > 0, got min D={float(D.min()):.3g}")
    j = torch.arange(n_f, dtype=P.dtype, device=P.device)
    sigma = D / 2
    diff = j - P[..., None]
    # a sigma so small that sigma^2 underflows to 0: 0 at the centre, -inf elsewhere (never 0/0 = NaN)
    return torch.where(diff == 0, torch.zeros((), dtype=P.dtype), -(diff**2) / (2 * sigma[..., None] ** 2))


@catalogued("extra:gaussian-local-bias")
def gaussian_biased_attention(
    Q: Tensor, K: Tensor, V: Tensor, G: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Scaled dot-product attention with an additive bias, ``alpha_ij = softmax_j(e_ij + G_ij)`` (review eq. 16).

    Args:
        Q: the queries.
        K: the keys.
        V: the values.
        G: the additive bias (e.g. :func:`gaussian_local_bias`).
        mask: boolean, ``True`` = may attend.

    Shape:
        - Q: ``(..., n_q, d_k)``; K: ``(..., n_f, d_k)``; V: ``(..., n_f, d_v)``;
          G: broadcastable to ``(..., n_q, n_f)``.
        - Output: ``(c (..., n_q, d_v), alpha (..., n_q, n_f))``.

    Returns:
        ``(c, alpha)``: the contexts and the weights.

    Raises:
        ValueError: if G does not broadcast to the scores, ``d_q != d_k``, or the mask is
            not boolean (an additive float mask belongs in G).
        TypeError: if Q or K is not a floating-point tensor.
    """
    require_boolean_mask(mask, "gaussian_biased_attention")
    as_tensor(Q, "Q")
    as_tensor(K, "K")
    check_dim_equal(Q.shape[-1], K.shape[-1], "Gaussian-biased attention", "d_q", "d_k")
    scores_shape = torch.Size((*torch.broadcast_shapes(Q.shape[:-2], K.shape[:-2]), Q.shape[-2], K.shape[-2]))
    try:
        shape = torch.broadcast_shapes(G.shape, scores_shape)
    except RuntimeError:
        shape = None
    if shape != scores_shape:
        raise ValueError(
            f"G of shape {tuple(G.shape)} does not broadcast to the scores e of shape {tuple(scores_shape)}"
        )
    return attend(Q, K, V, mask, bias=G)


@catalogued("extra:gaussian-local-bias")
class GaussianLocalSelfAttention(SelfAttentionVariant):
    """Multi-head self-attention with a learnable Gaussian local bias (review eq. 16).

    ``centre="predicted"`` (Yang et al., 2018): from each query,
    ``P_i = n * sigmoid(v_P^T tanh(W_P q_i))`` and ``D_i = n * sigmoid(v_D^T tanh(W_P q_i))``.
    ``centre="token"``: ``P_i = i`` and one learned window ``D`` per head
    (initialised to ``window``); this book's simplification (Yang et al. always
    predict the centre). Self-attention only. A configuration of
    :class:`MultiHeadAttention` whose ``score_fn`` adds the Gaussian bias.

    Args:
        d_model: the model width.
        h: the number of heads (must divide d_model).
        centre: ``"token"`` or ``"predicted"``.
        window: the initial window ``D`` of ``centre="token"`` (> 0).

    Shape:
        ``forward(X, X_kv=None, mask=None, **options)``: X ``(..., n, d_model)``; returns
        ``(output (..., n, d_model), weights (..., h, n, n))``.

    Raises:
        ValueError: if ``h`` does not divide ``d_model``, ``centre`` is unknown or
            ``window <= 0``.
    """

    def __init__(self, d_model: int, h: int, centre: str = "token", window: float = 4.0) -> None:
        check_integers("GaussianLocalSelfAttention", minimum=1, d_model=d_model, h=h)
        if h < 1 or d_model % h:
            raise ValueError(f"d_model={d_model} is not divisible by the number of heads h={h}")
        if centre not in ("token", "predicted"):
            raise ValueError(f"centre must be 'token' or 'predicted', got {centre!r}")
        if not window > 0 or window == float("inf"):  # NaN fails the comparison
            raise ValueError(f"window D must be a finite number > 0, got {window}")
        super().__init__(d_model, h, bias=True)
        self.centre = centre
        d_k = d_model // h
        if centre == "predicted":
            self.W_P = nn.Linear(d_k, d_k, bias=False)
            self.v_P = nn.Linear(d_k, 1, bias=False)
            self.v_D = nn.Linear(d_k, 1, bias=False)
        else:
            self.log_D = nn.Parameter(torch.full((h,), math.log(window)))

    def centres_and_windows(self, q: Tensor) -> tuple[Tensor, Tensor]:
        """``(P, D)``, each ``(..., h, n)``, for per-head queries ``q`` ``(..., h, n, d_k)``."""
        n = q.shape[-2]
        if self.centre == "predicted":
            hid = torch.tanh(self.W_P(q))
            return n * torch.sigmoid(self.v_P(hid)).squeeze(-1), n * torch.sigmoid(self.v_D(hid)).squeeze(-1) + 1e-3
        P = torch.arange(n, dtype=q.dtype, device=q.device).expand(*q.shape[:-1])
        D = self.log_D.exp()[:, None].to(q.dtype).expand(*q.shape[:-1])
        return P, D

    # ignore: the base declares the hook as an attribute (None: no hook); a variant fills it with a method
    def score_fn(self, q: Tensor, k: Tensor) -> Tensor:  # type: ignore[override]
        P, D = self.centres_and_windows(q)
        return scaled_dot_score(q, k) + gaussian_local_bias(P, D, k.shape[-2])  # review eq. 16
