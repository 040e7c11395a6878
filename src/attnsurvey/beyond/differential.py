"""Differential attention (Ye et al. 2024, the DIFF Transformer): the difference of two softmax maps.

Each head splits its query and key into halves ``[Q_1; Q_2]`` and ``[K_1; K_2]``
of width ``d`` and shares one value ``V`` of width ``2d``. Its map is

``A = softmax(Q_1 K_1^T / sqrt(d)) - lambda softmax(Q_2 K_2^T / sqrt(d))``,

so weight that both maps put on the same keys (the "attention noise" on
irrelevant context) cancels. ``lambda`` is learned through
``lambda = exp(l_q1 . l_k1) - exp(l_q2 . l_k2) + lambda_init`` with
``lambda_init = 0.8 - 0.6 exp(-0.3 (l - 1))`` for layer ``l = 1, 2, ...``; each
head's output is normalised (RMSNorm over its ``2d`` channels) and scaled by
``1 - lambda_init`` before the heads are concatenated and mixed by ``W_O``.

Both maps come from the package's core: the two halves are stacked on a batch
axis and sent through one call of :func:`~attnsurvey.attention.attend`, with the
value broadcast over that axis. The difference is then taken of the contexts,
``c_1 - lambda c_2``: since ``c_m = A_m V`` and the matrix product distributes
over a difference, ``c_1 - lambda c_2 = (A_1 - lambda A_2) V``, the context of
the differential map. No softmax, mask or head split is written here.

Parameters: with ``h`` differential heads of width ``2d = d_model / h`` the
layer has the four ``d_model x d_model`` projections of
:class:`~attnsurvey.query_related.multihead.MultiHeadAttention` with ``2h``
heads, plus ``4d`` (the lambda vectors) and ``2d`` (the RMSNorm gain): the paper
matches a Transformer's size by halving the number of heads.

Shapes: ``B`` batch (``...``), ``h`` heads, ``n`` positions, ``d`` the width of
one query/key half. Masks are boolean, ``True`` = may attend.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .._checks import as_tensor, broadcast_batch, check_dim_equal, check_integers, check_min_rank, check_same_dtype
from ..attention import _attend_trusted, attend
from ..catalog import catalogued
from ..masking import check_attn_mask
from ..query_related.multihead import _merge_heads, _split_heads

CHAPTER = "chapters/ch06_8_selective_attention.ipynb"


def lambda_init_for(layer: int) -> float:
    """The paper's initial ``lambda`` of layer ``l``: ``0.8 - 0.6 exp(-0.3 (l - 1))``.

    Args:
        layer: the layer's index ``l``, counted from 1.

    Returns:
        ``lambda_init``, 0.2 for the first layer, rising towards 0.8.

    Raises:
        ValueError: unless ``layer`` is an integer >= 1.
    """
    check_integers("lambda_init_for", minimum=1, layer=layer)
    return 0.8 - 0.6 * math.exp(-0.3 * (layer - 1))


@catalogued(
    "extra:differential-attention",
    title="Differential attention: softmax(Q1 K1^T/sqrt(d)) - lambda softmax(Q2 K2^T/sqrt(d)) (Ye et al. 2024)",
)
def differential_attention(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    lam: Tensor | float,
    mask: Tensor | None = None,
    *,
    is_causal: bool = False,
    need_weights: bool = False,
    _finite_inputs: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """The context and map of differential attention, ``(A_1 - lambda A_2) V``.

    ``Q = [Q_1; Q_2]`` and ``K = [K_1; K_2]`` are split into halves of width ``d``;
    both maps ``A_m = softmax(Q_m K_m^T / sqrt(d))`` come from one call of
    :func:`~attnsurvey.attention.attend` (the halves stacked on a new batch axis),
    and the result is ``c_1 - lambda c_2``, which equals ``(A_1 - lambda A_2) V``.
    Masked positions are inert (NaN there reaches nothing), as in ``attend``.

    Args:
        Q: the queries, the two halves side by side.
        K: the keys, likewise.
        V: the values (shared by the two maps).
        lam: ``lambda``, a number or a tensor broadcastable to ``(..., 1, 1)`` (e.g. one per head).
        mask: boolean, ``True`` = may attend, broadcastable to ``(..., n_q, n_f)``; None: all allowed.
        is_causal: query ``i`` may attend to keys ``j <= i``.
        need_weights: also return the differential map.

    Shape:
        Q: ``(..., n_q, d_k)``; K: ``(..., n_f, d_k)`` with ``d_k = 2d``; V: ``(..., n_f, d_v)``;
        lam: ``()`` or ``(..., 1, 1)``; returns c ``(..., n_q, d_v)`` and A ``(..., n_q, n_f)``.

    Returns:
        ``(c, A)``, A None unless ``need_weights``.

    Raises:
        TypeError: if Q, K, V or a tensor ``lam`` is not a floating-point tensor.
        ValueError: if the widths of Q and K differ or are odd, or as :func:`~attnsurvey.attention.attend`.
    """
    for sym, t in (("Q", Q), ("K", K), ("V", V)):
        as_tensor(t, sym)
        check_min_rank(t, 2, sym, "(..., n, d)")
    check_dim_equal(Q.shape[-1], K.shape[-1], "differential_attention", "2d of Q", "2d of K")
    if Q.shape[-1] % 2:
        raise ValueError(
            f"differential_attention splits Q and K into two halves: 2d must be even, got Q {tuple(Q.shape)}"
        )
    if isinstance(lam, Tensor):
        as_tensor(lam, "lambda")
        check_same_dtype(Q=Q, lam=lam)
    elif not (isinstance(lam, (int, float)) and math.isfinite(lam)):
        raise ValueError(f"lambda must be a finite number or a tensor, got lam={lam!r}")
    halves = lambda X: _split_heads(X, 2)  # noqa: E731  (..., n, 2d) -> (..., 2, n, d): the two maps
    if isinstance(mask, Tensor) and mask.dtype == torch.bool:  # checked in the caller's layout, then shared
        batch = broadcast_batch(Q.shape[:-2], K.shape[:-2]) or ()
        check_attn_mask(mask, torch.Size((*batch, Q.shape[-2], K.shape[-2])))
    if isinstance(mask, Tensor) and mask.dim() >= 2:
        mask = mask.unsqueeze(-3)  # one mask for the two maps
    # _finite_inputs (private): a layer of a model of tokens vouches for finite Q, K, V; the core clears nothing
    run = _attend_trusted if _finite_inputs else attend
    c, a = run(halves(Q), halves(K), V.unsqueeze(-3), mask, is_causal=is_causal, need_weights=need_weights)
    return _difference(c, lam), (None if a is None else _difference(a, lam))


def _difference(x: Tensor, lam: Tensor | float) -> Tensor:
    """``x_1 - lambda x_2`` of a tensor whose axis -3 holds the two maps' results."""
    return x[..., 0, :, :] - lam * x[..., 1, :, :]


@catalogued("extra:differential-attention")
class DifferentialAttentionLayer(nn.Module):
    """A causal self-attention layer of differential heads (Ye et al. 2024): a token mixer.

    ``h = n_heads`` heads, each with query and key halves of width ``d = d_model / (2h)``
    and a value of width ``2d``; the four projections are ``d_model x d_model`` (no bias),
    as in a :class:`~attnsurvey.query_related.multihead.MultiHeadAttention` with ``2h``
    heads, plus ``lambda_q1, lambda_k1, lambda_q2, lambda_k2`` (``4d``) and the RMSNorm
    gain (``2d``, shared by the heads). ``forward(x)`` returns ``W_O concat_j((1 -
    lambda_init) RMSNorm(c^(j)))``.

    Args:
        d_model: the model width.
        n_heads: the number of differential heads ``h`` (``2h`` must divide ``d_model``).
        layer: the layer's index ``l`` (from 1), which sets ``lambda_init``.
        lambda_init: overrides the paper's ``lambda_init`` of ``layer``.
        causal: mask the future (a causal token mixer); False: full self-attention.
        learn_lambda: learn ``lambda``; False fixes it at ``lambda_init`` (with ``lambda_init=0``
            a control with the same heads, norm and sizes but one map, no subtraction).
        finite_inputs: the caller vouches that ``x`` holds no NaN/Inf (a model of tokens), so the
            attention core skips its NaN-inert clearing of masked positions (the same bits for finite
            ``x``; :class:`~attnsurvey.attention.CoreSettings`).

    Shape:
        x: ``(..., n, d_model)``; returns ``(..., n, d_model)``.

    Raises:
        ValueError: if a size is not a positive integer, ``2 n_heads`` does not divide
            ``d_model``, or ``x`` has the wrong width or rank.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        layer: int = 1,
        lambda_init: float | None = None,
        causal: bool = True,
        learn_lambda: bool = True,
        finite_inputs: bool = False,
    ) -> None:
        super().__init__()
        check_integers("DifferentialAttentionLayer", minimum=1, d_model=d_model, n_heads=n_heads)
        if d_model % (2 * n_heads):
            raise ValueError(
                f"DifferentialAttentionLayer needs 2*n_heads to divide d_model, got d_model={d_model}, n_heads={n_heads}"
            )
        self.d_model, self.h, self.d, self.causal = d_model, n_heads, d_model // (2 * n_heads), causal
        self.lambda_init = lambda_init_for(layer) if lambda_init is None else float(lambda_init)
        self.W_Q, self.W_K, self.W_V, self.W_O = (nn.Linear(d_model, d_model, bias=False) for _ in range(4))
        self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2 = (
            nn.Parameter(0.1 * torch.randn(self.d)) for _ in range(4)
        )
        self.head_norm = nn.RMSNorm(2 * self.d, eps=1e-5)
        self.learn_lambda = learn_lambda
        self.finite_inputs = finite_inputs

    def lam(self) -> Tensor:
        """``lambda = exp(l_q1 . l_k1) - exp(l_q2 . l_k2) + lambda_init`` (a scalar tensor).

        Returns:
            The current ``lambda`` (``lambda_init`` when it is not learned).
        """
        if not self.learn_lambda:
            return torch.tensor(self.lambda_init, dtype=self.W_Q.weight.dtype)
        e1 = torch.exp(self.lambda_q1 @ self.lambda_k1)
        return e1 - torch.exp(self.lambda_q2 @ self.lambda_k2) + self.lambda_init

    def _heads(self, x: Tensor, need_weights: bool) -> tuple[Tensor, Tensor | None]:
        as_tensor(x, "x")
        check_min_rank(x, 2, "x", "(..., n, d_model)")
        check_dim_equal(x.shape[-1], self.d_model, "DifferentialAttentionLayer", "d_model of x", "d_model of the layer")
        q, k, v = (_split_heads(W(x), self.h) for W in (self.W_Q, self.W_K, self.W_V))  # (..., h, n, 2d)
        return differential_attention(
            q, k, v, self.lam(), is_causal=self.causal, need_weights=need_weights, _finite_inputs=self.finite_inputs
        )

    def forward(self, x: Tensor) -> Tensor:
        c, _ = self._heads(x, False)
        return self.W_O(_merge_heads((1 - self.lambda_init) * self.head_norm(c)))

    def attention_map(self, x: Tensor) -> Tensor:
        """The differential map ``A_1 - lambda A_2`` of every head, for drawing (entries may be negative).

        Args:
            x: the layer input.

        Shape:
            x: ``(..., n, d_model)``; returns ``(..., h, n, n)``.

        Returns:
            The maps.

        Raises:
            ValueError: as :meth:`forward`.
        """
        _, a = self._heads(x, True)
        assert a is not None  # need_weights=True
        return a


__all__ = ["DifferentialAttentionLayer", "differential_attention", "lambda_init_for"]
