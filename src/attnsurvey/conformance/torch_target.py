"""Conformance adapters for PyTorch: SDPA, ``nn.MultiheadAttention`` and the Transformer layers.

Each adapter maps the book's symbols onto torch's arguments (masks: the book's
boolean ``True`` = may attend; ``nn.MultiheadAttention`` reads ``True`` as
blocked, so its adapter inverts the mask) and torch's outputs back.

Shapes: B batch, n_q queries, n_f keys, d_model model width, h heads, d_k, d_v per-head
key and value sizes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import as_tensor, check_integers, check_min_rank, check_rank, check_same_dtype
from ..attention import attend
from ..masking import check_boolean, check_mask
from ..query_related.multihead import multi_head_attention
from ..query_related.torch_mha import from_torch_state_dict
from ..transformer.model import DecoderLayer, EncoderLayer, from_torch_transformer_state_dict
from . import Check, Convention, Pair


def rand(*shape: int, seed: int = 0) -> Tensor:
    """Standard normal float64 numbers from a seeded generator (the checks' inputs).

    Args:
        *shape: the shape.
        seed: the generator's seed.

    Shape:
        returns ``shape``.

    Returns:
        A float64 tensor of ``shape``.
    """
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def example_mask(n_q: int, n_f: int, dead_row: int | None = None) -> Tensor:
    """A boolean attention mask with holes, ``True`` = may attend; optionally one fully-masked row.

    Args:
        n_q: number of queries.
        n_f: number of keys.
        dead_row: a query row that may attend nothing (None: every row attends something).

    Shape:
        Returns ``(n_q, n_f)``.

    Returns:
        The mask (key ``(i + l) % 3 != 1`` kept, plus key 0 for every row).

    Raises:
        ValueError: if ``n_q`` or ``n_f`` is not an integer >= 0, or ``dead_row`` is not a row index.
    """
    check_integers("example_mask", minimum=0, n_q=n_q, n_f=n_f)
    check_integers("example_mask", allow_none=True, dead_row=dead_row)
    if dead_row is not None and not 0 <= dead_row < n_q:
        raise ValueError(f"example_mask needs dead_row in [0, n_q={n_q}), got dead_row={dead_row!r}")
    i, j = torch.arange(n_q)[:, None], torch.arange(n_f)[None, :]
    mask = ((i + j) % 3 != 1) | (j == 0)
    if dead_row is not None:
        mask[dead_row] = False
    return mask


def zero_dead_rows(c: Tensor, mask: Tensor) -> Tensor:
    """Set the context of every query that may attend no key to zero (the book's convention).

    Args:
        c: contexts ``(..., n_q, d_v)``.
        mask: boolean, ``True`` = may attend, broadcastable to ``(..., n_q, n_f)``.

    Shape:
        c: ``(..., n_q, d_v)``; mask: ``(..., n_q, n_f)``.

    Returns:
        ``c`` with the rows of fully-masked queries replaced by zeros.
    """
    alive = mask.any(-1, keepdim=True)
    return torch.where(alive, c, torch.zeros((), dtype=c.dtype))


# --------------------------------------------------------------------------- adapters


def sdpa_adapter(Q: Tensor, K: Tensor, V: Tensor, mask: Tensor | None = None, **kw: object) -> Tensor:
    """``F.scaled_dot_product_attention`` in the book's symbols (same layout, same mask polarity).

    Args:
        Q: queries. K: keys. V: values.
        mask: boolean, ``True`` = may attend (SDPA's own polarity), or None.
        **kw: SDPA's keyword arguments (``is_causal``, ``enable_gqa``, ``scale``).

    The keys and values that no query may attend are zeroed first (the book's convention:
    a masked position is inert even if it holds NaN or Inf); SDPA sees the same scores
    and weights on every allowed pair.

    Shape:
        Q ``(B, h, n_q, d_k)``, K ``(B, h_kv, n_f, d_k)``, V ``(B, h_kv, n_f, d_v)``,
        mask ``(n_q, n_f)`` (or SDPA's own broadcastable ``(n_f,)`` or rank-4
        ``(B, h, n_q, n_f)``); returns c ``(B, h, n_q, d_v)``.

    Returns:
        The context c.

    Raises:
        TypeError: if Q, K or V is not a floating-point tensor, or their dtypes differ.
        ValueError: if Q, K or V has fewer than 3 dimensions, or the mask is not boolean or has
            rank 3 (``(B, n_q, n_f)`` would be read by SDPA as ``(h, n_q, n_f)``: add the head
            axis, ``mask[:, None]``) or more than 4, or does not broadcast to the scores
            ``(B, h, n_q, n_f)`` (a ``(B, n_f)`` key mask with ``B != n_q``).
    """
    for x, name, layout in (
        (Q, "Q", "(B, h, n_q, d_k)"),
        (K, "K", "(B, h_kv, n_f, d_k)"),
        (V, "V", "(B, h_kv, n_f, d_v)"),
    ):
        as_tensor(x, name)
        check_min_rank(x, 3, name, layout)
    check_same_dtype(Q=Q, K=K, V=V)
    if mask is not None:
        check_boolean(mask, "mask")
        if mask.dim() not in (1, 2, 4):
            raise ValueError(
                f"sdpa_adapter needs mask (n_q, n_f), (n_f,) or (B, h, n_q, n_f), got {tuple(mask.shape)} "
                f"for Q {tuple(Q.shape)}, K {tuple(K.shape)}: a (B, n_q, n_f) mask needs its head axis, mask[:, None]"
            )
        check_mask(mask, torch.Size((*Q.shape[:-1], K.shape[-2])))
        seen = (mask if mask.dim() > 1 else mask[None]).any(-2).unsqueeze(-1)  # (..., n_f, 1): some query may attend
        zero = torch.zeros((), dtype=K.dtype, device=K.device)
        K, V = torch.where(seen, K, zero), torch.where(seen, V, zero)
    return F.scaled_dot_product_attention(Q, K, V, attn_mask=mask, **kw)  # type: ignore[arg-type]  # kw: SDPA's options


def mha_weights(module: nn.MultiheadAttention) -> dict[str, Tensor]:
    """The survey's ``W_Q, W_K, W_V, W_O`` (and biases) of an ``nn.MultiheadAttention``.

    Args:
        module: a torch module with packed in-projection (``kdim == vdim == embed_dim``).

    Shape:
        W_Q, W_K: ``(h*d_k, d_model)``; W_V: ``(h*d_v, d_model)``; W_O: ``(d_model, h*d_v)``;
        each bias: the first dimension of its weight.

    Returns:
        ``{"W_Q": (h*d_k, d_model), "b_Q": ..., "W_K", "b_K", "W_V", "b_V", "W_O", "b_O"}``.
    """
    sd = from_torch_state_dict(module.state_dict())
    return {
        f"{kind}_{s}": sd[f"{kind2}_{s}.{p}"]
        for s in "QKVO"
        for kind, kind2, p in (("W", "W", "weight"), ("b", "W", "bias"))
        if f"{kind2}_{s}.{p}" in sd
    }


def mha_adapter(module: nn.MultiheadAttention, X: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Self-attention through ``nn.MultiheadAttention`` in the book's symbols.

    Args:
        module: the torch module (``batch_first=True``).
        X: the features (queries, keys and values).
        mask: boolean, ``True`` = may attend; inverted for torch, which reads ``True`` as blocked.

    Shape:
        X ``(B, n, d_model)``; mask ``(n, n)``; returns ``(B, n, d_model)`` and the
        weights as torch returns them by default, averaged over the heads ``(B, n, n)``.

    Returns:
        The output and torch's weights.
    """
    out, a = module(X, X, X, attn_mask=None if mask is None else ~mask)
    assert a is not None  # need_weights defaults to True
    return out, a


def linear(W: Tensor, b: Tensor) -> nn.Linear:
    """An ``nn.Linear`` holding a survey-shaped weight ``W`` and bias ``b`` (for the multi-head stack).

    Args:
        W: the weight ``(d_out, d_in)``.
        b: the bias ``(d_out,)``.

    Shape:
        W: ``(d_out, d_in)``; b: ``(d_out,)``; the module maps ``(..., d_in)`` to ``(..., d_out)``.

    Returns:
        The module (W's dtype).

    Raises:
        TypeError: if W or b is not a floating-point tensor.
        ValueError: if W is not ``(d_out, d_in)`` or b is not ``(d_out,)``.
    """
    check_rank(W, 2, "W", "(d_out, d_in)")
    check_rank(b, 1, "b", "(d_out,)")
    if b.shape[0] != W.shape[0]:
        raise ValueError(
            f"linear needs b of shape (d_out,) = ({W.shape[0]},), got b {tuple(b.shape)} for W {tuple(W.shape)}"
        )
    lin = nn.Linear(W.shape[1], W.shape[0], dtype=W.dtype)
    with torch.no_grad():
        lin.weight.copy_(W)
        lin.bias.copy_(b)
    return lin


def _book_mha(w: dict[str, Tensor], X: Tensor, h: int, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    WQ, WK, WV, WO = (linear(w[f"W_{s}"], w[f"b_{s}"]) for s in "QKVO")
    out, a = multi_head_attention(X, X, X, WQ, WK, WV, WO, h=h, mask=mask)
    assert a is not None
    return out, a


# --------------------------------------------------------------------------- checks


def checks() -> list[Check]:
    """The torch checks: SDPA (masks, fully-masked rows, causal, GQA), MHA, the Transformer layers.

    Returns:
        A list of :class:`~attnsurvey.conformance.Check`.
    """
    sdpa = _sdpa_checks()
    torch.manual_seed(0)  # the torch modules below draw their initial weights from it, in this order
    X = rand(2, 5, 8, seed=4)
    return [*sdpa, *_mha_checks(X), *_layer_checks(X)]


def _sdpa_checks() -> list[Check]:
    """F.scaled_dot_product_attention: a mask, a fully-masked row, causality, grouped K/V heads."""
    B, h, n_q, n_f, d = 2, 4, 5, 6, 4
    Q, K, V = rand(B, h, n_q, d, seed=1), rand(B, h, n_f, d, seed=2), rand(B, h, n_f, d, seed=3)
    mask = example_mask(n_q, n_f)
    dead = example_mask(n_q, n_f, dead_row=2)
    K2, V2 = K[:, :2], V[:, :2]

    def book(*args: Tensor, **kw: object) -> Tensor:
        return attend(*args, **kw)[0]  # type: ignore[call-overload]  # kw: attend's options

    return [
        Check(
            "torch",
            "eq25",
            "F.scaled_dot_product_attention",
            lambda: (book(Q, K, V, mask), sdpa_adapter(Q, K, V, mask)),
        ),
        Check(
            "torch",
            "fully-masked",
            "F.scaled_dot_product_attention",
            lambda: (book(Q, K, V, dead), sdpa_adapter(Q, K, V, dead)),
        ),
        Check(
            "torch",
            "causal",
            "F.scaled_dot_product_attention(is_causal)",
            lambda: (book(Q, K, V, is_causal=True), sdpa_adapter(Q, K, V, is_causal=True)),
        ),
        Check(
            "torch",
            "gqa",
            "F.scaled_dot_product_attention(enable_gqa)",
            lambda: (book(Q, K2, V2, mask, enable_gqa=True), sdpa_adapter(Q, K2, V2, mask, enable_gqa=True)),
        ),
    ]


def _mha_checks(X: Tensor) -> list[Check]:
    """nn.MultiheadAttention: output, weights (per head or averaged) and a fully-masked row."""
    mha = nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64).eval()
    w = mha_weights(mha)
    mha_mask = example_mask(5, 5, dead_row=3)

    def mha_output() -> Pair:
        return _book_mha(w, X, 2, example_mask(5, 5))[0], mha_adapter(mha, X, example_mask(5, 5))[0]

    def mha_weights_pair(average: bool = False) -> Pair:
        ours = _book_mha(w, X, 2, example_mask(5, 5))[1]  # (B, h, n, n)
        ours = ours.mean(-3, keepdim=True).expand_as(ours) if average else ours
        return ours, mha_adapter(mha, X, example_mask(5, 5))[1].unsqueeze(-3).expand_as(ours)  # one map for all heads

    def mha_dead() -> Pair:
        return _book_mha(w, X, 2, mha_mask)[0], mha_adapter(mha, X, mha_mask)[0]

    return [
        Check("torch", "eq38-40", "nn.MultiheadAttention", mha_output),
        Check(
            "torch",
            "eq38-40",
            "nn.MultiheadAttention weights",
            mha_weights_pair,
            Convention(
                "head-averaged weights",
                "nn.MultiheadAttention returns the weights averaged over the heads by default "
                "(average_attn_weights=True); the book returns one weight matrix per head.",
                lambda: mha_weights_pair(average=True),
            ),
        ),
        Check(
            "torch",
            "fully-masked",
            "nn.MultiheadAttention",
            mha_dead,
            Convention(
                "fully-masked rows: NaN",
                "nn.MultiheadAttention (on its weights path) normalises a row of -inf scores and returns NaN "
                "for a query that may attend nothing; the book returns zero weights and a zero context.",
                lambda: (
                    _book_mha(w, X, 2, mha_mask)[0],
                    torch.where(mha_mask.any(-1)[:, None], mha_adapter(mha, X, mha_mask)[0], torch.zeros(())),
                ),
            ),
        ),
    ]


def _layer_checks(X: Tensor) -> list[Check]:
    """nn.TransformerEncoderLayer (post-norm) and nn.TransformerDecoderLayer (pre-norm, causal)."""
    B = X.shape[0]
    enc_torch = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, dtype=torch.float64).eval()
    enc = EncoderLayer(8, 2, 16, dropout=0.0, bias=True).double().eval()
    enc.load_state_dict(from_torch_transformer_state_dict(enc_torch.state_dict()))
    dec_torch = nn.TransformerDecoderLayer(
        8, 2, 16, dropout=0.0, batch_first=True, norm_first=True, dtype=torch.float64
    ).eval()
    dec = DecoderLayer(8, 2, 16, dropout=0.0, bias=True, norm_first=True).double().eval()
    dec.load_state_dict(from_torch_transformer_state_dict(dec_torch.state_dict()))
    M = rand(B, 6, 8, seed=5)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()

    return [
        Check("torch", "eq37", "nn.TransformerEncoderLayer (post-norm)", lambda: (enc(X)[0], enc_torch(X))),
        Check(
            "torch",
            "pre-norm",
            "nn.TransformerDecoderLayer (pre-norm, causal)",
            lambda: (dec(X, M, causal)[0], dec_torch(X, M, tgt_mask=~causal)),
        ),
    ]
