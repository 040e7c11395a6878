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

RoPE comes in two layouts of the pairs. RoFormer's *interleaved* pairs
``(2i, 2i+1)`` are the book's default; GPT-NeoX and LLaMA (and the LLaMA code of
``transformers``) rotate *halves*, pairing coordinate ``i`` with ``i + d/2``.
The rotations are the same up to a permutation of the coordinates of every
head, so weights trained with one layout serve the other only after the output
rows of ``W_Q`` and ``W_K`` are permuted (:func:`permute_rope_rows`);
:func:`rotary_from_llama` loads a ``transformers`` LLaMA attention that way.

Both schemes attend through the one attention core
:func:`attnsurvey.attention.attend`, directly or through the multi-head module:
RoPE transforms Q and K before it, ALiBi passes its ``bias`` argument.
Shapes: ``(..., n, d)`` rows; heads as the axis before the sequence. Masks are
boolean, ``True`` = may attend.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from torch import Tensor

from .._checks import as_tensor, check_dim_equal, check_integers, check_min_rank, check_positive
from ..attention import AttendOptions, attend
from ..catalog import catalogued
from ..general_mechanisms.scoring import scaled_dot_score
from ..masking import require_boolean_mask
from ..query_related.multihead import SelfAttentionVariant
from ..transformer.positional import sinusoidal_position_encoding

CHAPTER = "chapters/ch06_2_positions.ipynb"


#: The two layouts of RoPE's pairs: RoFormer's ``(2i, 2i+1)`` and GPT-NeoX/LLaMA's ``(i, i + d/2)``.
RopeConvention = Literal["interleaved", "half"]
CONVENTIONS: tuple[str, ...] = ("interleaved", "half")


def _check_base(base: float) -> float:
    """``base`` as a float if it is a finite number > 0; else a ValueError naming it."""
    check_positive("RoPE (theta_i = base^(-2i/d))", base=base)
    return float(base)


def _check_convention(convention: object) -> str:
    if convention not in CONVENTIONS:
        raise ValueError(f"RoPE convention must be one of {CONVENTIONS}, got convention={convention!r}")
    return str(convention)


@catalogued(
    "extra:rope", title="Rotary position embedding (RoPE): the score depends only on the offset (beyond the survey)"
)
def apply_rope(X: Tensor, offset: int = 0, base: float = 10000.0, convention: RopeConvention = "interleaved") -> Tensor:
    """Rotary position embedding of the rows of ``X`` (Su et al.).

    Row ``t`` sits at position ``offset + t``; pair ``i`` is rotated by the angle
    ``(offset + t) * theta_i`` with ``theta_i = base^(-2i/d)``. The sines and
    cosines are the columns of the sinusoidal code
    :func:`~attnsurvey.transformer.positional.sinusoidal_position_encoding`.

    Args:
        X: queries or keys, one row per position.
        offset: position of the first row (an int >= 0).
        base: the frequency base (a finite number > 0; 10000 in RoFormer and LLaMA).
        convention: ``"interleaved"`` rotates the pairs ``(x_{2i}, x_{2i+1})``
            (RoFormer, the book's default); ``"half"`` rotates ``(x_i, x_{i+d/2})``
            (GPT-NeoX, LLaMA in ``transformers``).

    Shape:
        X: ``(..., n, d)`` with ``d`` even; output: the same.

    Returns:
        The rotated rows (the norm of every pair unchanged).

    Raises:
        ValueError: for an odd ``d``, an offset that is not an integer >= 0, a
            ``base`` that is not a finite number > 0, or an unknown convention.
    """
    as_tensor(X, "X")
    check_min_rank(X, 2, "X", "(..., n, d)")
    check_integers("apply_rope", minimum=0, offset=offset)
    base = _check_base(base)
    _check_convention(convention)
    n, d = X.shape[-2], X.shape[-1]
    if d % 2:
        raise ValueError(f"RoPE rotates pairs of coordinates and needs an even d, got X of shape {tuple(X.shape)}")
    P = sinusoidal_position_encoding(offset + n, d, base, dtype=X.dtype)[offset:].to(X.device)
    sin, cos = P[:, 0::2], P[:, 1::2]
    first, second = (slice(0, d // 2), slice(d // 2, d)) if convention == "half" else (slice(0, d, 2), slice(1, d, 2))
    x1, x2 = X[..., first], X[..., second]
    out = torch.empty_like(X)
    out[..., first] = x1 * cos - x2 * sin
    out[..., second] = x1 * sin + x2 * cos
    return out


@catalogued(
    "extra:rope-rotate-half",
    title="RoPE layouts: interleaved pairs (2i, 2i+1) vs rotate-half pairs (i, i + d/2), weights converted by a permutation",
)
def rope_permutation(d: int, source: RopeConvention = "half", target: RopeConvention = "interleaved") -> Tensor:
    """Index vector ``perm`` with ``rotate_target(x[perm]) == rotate_source(x)[perm]`` for one head.

    Coordinate ``2i`` of the interleaved layout is coordinate ``i`` of the
    rotate-half layout and ``2i + 1`` is ``i + d/2``: both are pair ``i``, with
    frequency ``theta_i``. Going from ``"half"`` to ``"interleaved"``,
    ``perm = [0, d/2, 1, d/2 + 1, ...]``; the other way it is the inverse;
    the same layout gives the identity.

    Args:
        d: the head size (even, >= 2).
        source: the layout the coordinates are in.
        target: the layout they should be in.

    Shape:
        output: ``(d,)``, int64.

    Returns:
        The permutation of the ``d`` coordinates of a head.

    Raises:
        ValueError: if ``d`` is not an even int >= 2 or a convention is unknown.
    """
    check_integers("rope_permutation", d=d)
    if d < 2 or d % 2:
        raise ValueError(f"RoPE needs an even head size d >= 2, got d={d!r}")
    _check_convention(source)
    _check_convention(target)
    half_to_inter = torch.stack([torch.arange(d // 2), torch.arange(d // 2, d)], -1).reshape(-1)
    if source == target:
        return torch.arange(d)
    return half_to_inter if source == "half" else torch.argsort(half_to_inter)


@catalogued("extra:rope-rotate-half")
def permute_rope_rows(
    W: Tensor, h: int, source: RopeConvention = "half", target: RopeConvention = "interleaved"
) -> Tensor:
    """Convert ``W_Q`` or ``W_K`` (or its bias) between RoPE layouts: permute the output rows of every head.

    Heads are consecutive blocks of ``d_k`` rows (as in ``nn.Linear`` and
    :class:`~attnsurvey.query_related.multihead.MultiHeadAttention`); inside
    each block the rows are reordered by :func:`rope_permutation`. Then, for
    every input, ``rotate_target`` of the new projection is the same
    permutation of ``rotate_source`` of the old one, so all scores
    ``<R q, R k>`` (and the attention) are unchanged. Apply it to ``W_Q`` and
    ``W_K`` alike, never to ``W_V`` or ``W_O``.

    Args:
        W: the weight (or bias) of the query or key projection.
        h: the number of heads of ``W`` (``h_kv`` for the keys of grouped-query attention).
        source: the layout ``W`` was trained with.
        target: the layout wanted.

    Shape:
        W: ``(h*d_k, d_model)`` or ``(h*d_k,)``; output: the same.

    Returns:
        A new tensor with the permuted rows.

    Raises:
        ValueError: if ``h`` does not divide the rows of ``W``, ``d_k`` is odd,
            or a convention is unknown.
    """
    as_tensor(W, "W")
    check_integers("permute_rope_rows", minimum=1, h=h)
    if W.dim() not in (1, 2) or W.shape[0] % h:
        raise ValueError(f"W must be (h*d_k, d_model) or (h*d_k,) with h={h} dividing its rows, got {tuple(W.shape)}")
    d_k = W.shape[0] // h
    perm = rope_permutation(d_k, source, target).to(W.device)
    index = (torch.arange(h, device=W.device)[:, None] * d_k + perm[None, :]).reshape(-1)
    return W[index].clone()


@catalogued("extra:rope")
def rope_attention(
    Q: Tensor, K: Tensor, V: Tensor, mask: Tensor | None = None, base: float = 10000.0
) -> tuple[Tensor, Tensor]:
    """Scaled dot-product attention on rotated queries and keys: ``attend(R Q, R K, V, mask)``.

    Queries sit at positions ``0..n_q-1``, keys at ``0..n_f-1``; the rotation
    is :func:`apply_rope` (interleaved pairs).

    Args:
        Q: queries.
        K: keys.
        V: values.
        mask: boolean, broadcastable to the scores, ``True`` = may attend.
        base: the RoPE frequency base (> 0).

    Shape:
        Q: ``(..., n_q, d_k)``; K: ``(..., n_f, d_k)``; V: ``(..., n_f, d_v)``;
        c: ``(..., n_q, d_v)``; a: ``(..., n_q, n_f)``.

    Returns:
        ``(c, a)``, as :func:`attnsurvey.attention.attend`.

    Raises:
        ValueError: on shape problems, a mask that is not boolean or a bad ``base``.
    """
    require_boolean_mask(mask, "rope_attention")
    c, a = attend(apply_rope(Q, base=base), apply_rope(K, base=base), V, mask)
    assert a is not None  # need_weights is left at True: attend returns the weights
    return c, a


@catalogued("extra:alibi", title="ALiBi: a per-head linear distance penalty on the scores (beyond the survey)")
def alibi_slopes(h: int) -> Tensor:
    """The ALiBi head slopes of Press et al. (2022).

    For ``h`` a power of two: ``m_j = 2^(-8 (j+1) / h)``, ``j = 0..h-1`` (for 8
    heads: 1/2, 1/4, ..., 1/256). Otherwise the slopes of the largest power of
    two ``p < h``, followed by every other slope of ``2p`` heads until there are
    ``h``.

    Args:
        h: the number of heads.

    Shape:
        output: ``(h,)``, float64.

    Returns:
        The slopes ``m_0 > m_1 > ...``.

    Raises:
        ValueError: unless ``h`` is an integer >= 1.
    """
    check_integers("alibi_slopes", minimum=1, h=h)

    def geometric(p: int) -> list[float]:
        return [2.0 ** (-8.0 * (j + 1) / p) for j in range(p)]

    p = 2 ** int(math.floor(math.log2(h)))
    slopes = geometric(p) + geometric(2 * p)[0::2][: h - p]
    return torch.tensor(slopes, dtype=torch.float64)


@catalogued("extra:alibi")
def alibi_bias(slopes: Tensor, n_q: int, n_f: int) -> Tensor:
    """The ALiBi bias ``B[j, i, l] = -m_j |i - l|``.

    With a causal mask (keys ``l <= i``) this is exactly Press et al.'s
    ``-m_j (i - l)``; without one it is the symmetric variant.

    Args:
        slopes: the head slopes ``m_j`` (:func:`alibi_slopes`).
        n_q: the number of queries (positions ``0..n_q-1``).
        n_f: the number of keys (positions ``0..n_f-1``).

    Shape:
        slopes: ``(h,)``; output: ``(h, n_q, n_f)``, on the slopes' device and dtype.

    Returns:
        The additive score bias.

    Raises:
        ValueError: unless ``slopes`` is 1-D and the sizes are ints >= 0.
    """
    if not isinstance(slopes, Tensor) or slopes.dim() != 1:
        raise ValueError(f"slopes must be a (h,) tensor, got {getattr(slopes, 'shape', type(slopes))}")
    check_integers("alibi_bias", minimum=0, n_q=n_q, n_f=n_f)
    pos_q, pos_f = torch.arange(n_q, device=slopes.device), torch.arange(n_f, device=slopes.device)
    dist = (pos_q[:, None] - pos_f[None, :]).abs()
    return -slopes[:, None, None] * dist


@catalogued("extra:alibi")
def alibi_attention(
    Q: Tensor, K: Tensor, V: Tensor, slopes: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Attention with linear biases: ``softmax(Q K^T / sqrt(d_k) + B) V`` per head.

    The bias :func:`alibi_bias` enters through the ``bias`` argument of the core
    :func:`attnsurvey.attention.attend`.

    Args:
        Q: queries, one block per head.
        K: keys.
        V: values.
        slopes: the head slopes (:func:`alibi_slopes`).
        mask: boolean, broadcastable to the scores, ``True`` = may attend.

    Shape:
        Q: ``(..., h, n_q, d_k)``; K: ``(..., h, n_f, d_k)``; V: ``(..., h, n_f, d_v)``;
        slopes: ``(h,)``; mask: broadcastable to ``(..., h, n_q, n_f)``;
        c: ``(..., h, n_q, d_v)``; a: ``(..., h, n_q, n_f)``.

    Returns:
        ``(c, a)``: contexts and weights.

    Raises:
        ValueError: if ``h`` differs between Q and slopes, Q or K has fewer than 3 dimensions,
            or the mask is not boolean (shape problems of the attention as
            :func:`attnsurvey.attention.attend`).
        TypeError: if Q, K or V is not a floating-point tensor (a list, NumPy array or integer tensor).
    """
    require_boolean_mask(mask, "alibi_attention")
    as_tensor(Q, "Q")
    as_tensor(K, "K")
    as_tensor(V, "V")
    check_min_rank(Q, 3, "Q", "(..., h, n_q, d_k)")
    check_min_rank(K, 3, "K", "(..., h, n_f, d_k)")
    check_dim_equal(Q.shape[-3], len(slopes), "ALiBi", "heads of Q", "number of slopes")
    B = alibi_bias(slopes, Q.shape[-2], K.shape[-2]).to(Q.dtype).to(Q.device)
    c, a = attend(Q, K, V, mask, bias=B)
    assert a is not None  # need_weights is left at True: attend returns the weights
    return c, a


@catalogued("extra:rope")
class RotarySelfAttention(SelfAttentionVariant):
    """Multi-head self-attention with RoPE on every head's queries and keys.

    A :class:`~attnsurvey.query_related.multihead.SelfAttentionVariant` whose
    ``score_fn`` rotates the per-head queries and keys (:func:`apply_rope`) and
    scores them with the scaled dot product; the weights come from the core
    :func:`attnsurvey.attention.attend`. With ``h_kv < h`` (grouped-query
    attention) the core shares each key/value head among ``h / h_kv`` query
    heads. ``forward(X, X_kv=None, mask=None, **options)`` as the base class
    (``is_causal=True`` for a decoder); any sequence length.

    Args:
        d_model: the model width.
        h: the number of query heads.
        base: the RoPE frequency base (> 0).
        h_kv: the number of key/value heads (default ``h``; must divide ``h``).
        bias: biases on the four projections (LLaMA has none).
        convention: ``"interleaved"`` (RoFormer) or ``"half"`` (GPT-NeoX, LLaMA).
        d_k: the head size (default ``d_model / h``; must be even).

    Shape:
        X: ``(..., n, d_model)``; output: ``(..., n, d_model)``; weights: ``(..., h, n, n)``.

    Returns:
        ``forward`` returns ``(output, weights)``.

    Raises:
        ValueError: if ``d_model``, ``h`` or a given ``d_k`` is not an integer >= 1, for an odd
            head size, a ``base`` that is not > 0, an unknown convention, or (from the base
            class) ``h_kv`` not dividing ``h``.
    """

    def __init__(
        self,
        d_model: int,
        h: int,
        base: float = 10000.0,
        *,
        h_kv: int | None = None,
        bias: bool = True,
        convention: RopeConvention = "interleaved",
        d_k: int | None = None,
    ) -> None:
        check_integers("RotarySelfAttention", minimum=1, d_model=d_model, h=h)
        if d_k is not None:
            check_integers("RotarySelfAttention", minimum=1, d_k=d_k)
        head = d_k if d_k is not None else (d_model // h if d_model % h == 0 else None)
        if head is not None and head % 2:
            raise ValueError(f"RoPE needs an even head size d_k, got d_k = {head}")
        base = _check_base(base)
        _check_convention(convention)
        super().__init__(d_model, h, d_k, d_k, bias=bias, h_kv=h_kv)
        self.base = base
        self.convention: RopeConvention = convention

    # ignore: the base declares the hook as an attribute (None: no hook); a variant fills it with a method
    def score_fn(self, q: Tensor, k: Tensor) -> Tensor:  # type: ignore[override]
        base, conv = self.base, self.convention
        return scaled_dot_score(apply_rope(q, base=base, convention=conv), apply_rope(k, base=base, convention=conv))


@catalogued("extra:rope-rotate-half")
def rotary_from_llama(llama_attention: Any, convention: RopeConvention = "interleaved") -> RotarySelfAttention:
    """The book's :class:`RotarySelfAttention` with the weights of a ``transformers`` LLaMA attention layer.

    Reads ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj`` and the configuration
    (heads, key/value heads, head size, ``rope_theta``) of
    ``transformers.models.llama.modeling_llama.LlamaAttention``, which rotates
    halves. For ``convention="interleaved"`` the rows of ``W_Q`` and ``W_K``
    are permuted per head (:func:`permute_rope_rows`); for ``"half"`` they are
    copied. The result computes the same causal attention (call it with
    ``is_causal=True``) through the book's core.

    Args:
        llama_attention: a ``LlamaAttention`` module (any object with those
            projections and a ``config``; ``transformers`` is not imported here).
        convention: the RoPE layout of the returned module.

    Shape:
        the returned module maps ``(..., n, hidden_size)`` to ``(..., n, hidden_size)``.

    Returns:
        A new module on the layer's device and dtype, in eval mode.

    Raises:
        ValueError: if the layer uses a RoPE scaling other than the default
            (``rope_type`` other than ``"default"``) or has a bias on ``o_proj``
            but not the others.
    """
    cfg = llama_attention.config
    rope = dict(getattr(cfg, "rope_parameters", None) or {})
    base = rope.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"only the default RoPE is supported, got rope_type={rope.get('rope_type')!r}")
    h, h_kv, d_k = cfg.num_attention_heads, cfg.num_key_value_heads, llama_attention.head_dim
    projections = [llama_attention.q_proj, llama_attention.k_proj, llama_attention.v_proj, llama_attention.o_proj]
    biased = {p.bias is not None for p in projections}
    if len(biased) != 1:
        raise ValueError("rotary_from_llama needs biases on all four projections or on none")
    W = projections[0].weight
    module = RotarySelfAttention(
        cfg.hidden_size, h, base, h_kv=h_kv, bias=biased.pop(), convention=convention, d_k=d_k
    ).to(device=W.device, dtype=W.dtype)
    with torch.no_grad():
        for mine, theirs, heads in zip(
            (module.W_Q, module.W_K, module.W_V, module.W_O), projections, (h, h_kv, None, None)
        ):
            for name in ("weight", "bias"):
                src = getattr(theirs, name)
                if src is None:
                    continue
                if heads is not None:
                    src = permute_rope_rows(src, heads, "half", convention)
                getattr(mine, name).copy_(src)
    return module.eval()


@catalogued("extra:alibi")
class ALiBiSelfAttention(SelfAttentionVariant):
    """Multi-head self-attention with the ALiBi bias (fixed slopes, :func:`alibi_slopes`).

    A :class:`~attnsurvey.query_related.multihead.SelfAttentionVariant`
    (projections with biases) that passes :func:`alibi_bias` to the core
    :func:`attnsurvey.attention.attend` as a per-head ``bias``.
    ``forward(X, X_kv=None, mask=None, **options)`` as :class:`RotarySelfAttention`.

    Args:
        d_model: the model width.
        h: the number of heads (one slope each).

    Shape:
        X: ``(..., n, d_model)``; output: ``(..., n, d_model)``; weights: ``(..., h, n, n)``.

    Returns:
        ``forward`` returns ``(output, weights)``.

    Raises:
        ValueError: if ``d_model`` or ``h`` is not an integer >= 1, from the base class (``h``
            not dividing ``d_model``), and in ``forward`` if ``options`` include ``bias`` (the
            module sets it).
    """

    slopes: Tensor  # a buffer (registered in __init__)

    def __init__(self, d_model: int, h: int) -> None:
        check_integers("ALiBiSelfAttention", minimum=1, d_model=d_model, h=h)
        super().__init__(d_model, h, bias=True)
        self.register_buffer("slopes", alibi_slopes(h).float(), persistent=False)

    def attend_options(self, X: Tensor) -> AttendOptions:
        n = X.shape[-2]
        B = alibi_bias(self.slopes, n, n).to(X.dtype).to(X.device)  # (h, n, n)
        return {"bias": B.reshape((1,) * (X.dim() - 2) + B.shape)}  # per head, with X's batch axes
