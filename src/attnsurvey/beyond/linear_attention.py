"""Linear attention, decay and gates: causal attention as a recurrence with a fixed-size state.

Katharopoulos et al. (2020) replace the softmax of Eq. (3) by a feature map ``phi``:
the score of query ``i`` and key ``j`` is ``phi(q_i)^T phi(k_j)`` and the weights are
the scores divided by their sum over the allowed keys. Under a causal mask the context
then needs only two running sums, the state ``S_t = S_{t-1} + phi(k_t) v_t^T``
(``d_k x d_v``) and the normaliser ``z_t = z_{t-1} + phi(k_t)``:
``o_t = S_t^T phi(q_t) / (z_t^T phi(q_t))``. RetNet multiplies the state by a fixed
per-head decay ``gamma`` at each step; Mamba-2 (SSD) and scalar GLA by a data-dependent
gate ``g_t`` in ``(0, 1]``: ``S_t = g_t S_{t-1} + phi(k_t) v_t^T``. Unrolled, the gate
multiplies score ``(i, j)`` by ``D_ij = prod_{l=j+1..i} g_l``.

Each mechanism is computed in three forms that agree to rounding:

* parallel (:func:`linear_attention`): the whole ``n x n`` score matrix through the core
  :func:`attnsurvey.attention.attend`: the score hook :func:`linear_score` gives
  ``phi(q_i)^T phi(k_j)``, the alignment is ``"linear-normalise"`` (Eq. 3 of linear
  attention: divide by the row sum) or ``"identity"`` (unnormalised, as RetNet, GLA and
  DeltaNet use), and the decay enters as an alignment closure (:func:`gated_align`)
  that multiplies the allowed scores by ``D``;
* recurrent (:func:`linear_attention_recurrent`, one step :func:`linear_attention_step`):
  the state carried token by token, as in decoding;
* chunked (:func:`linear_attention_chunked`): the parallel form inside chunks of ``C``
  positions (through the core again) and the state carried from chunk to chunk.

Decay products are never formed as ratios of cumulative products (they underflow):
``D_ij = exp(L_i - L_j)`` with ``L`` the cumulative sum of the log-gates, and the
exponent of every entry that is used is ``<= 0``.

Masks are boolean, ``True`` = may attend. A ``key_padding_mask`` ``(..., n)`` marks padded
positions: a padded position is neither attended nor attending (its output is 0), and the
NaN/Inf it may hold reach neither the outputs nor the gradients; a query that may attend
no key gets a zero output.

Shape legend: ``...`` batch axes (e.g. ``B, h``), ``n`` positions, ``d_k`` the key and
query width, ``d_v`` the value width, ``C`` the chunk size.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import torch
import torch.nn.functional as F_
from torch import Tensor, nn

from .._checks import (
    as_tensor,
    broadcast_batch,
    check_dim_equal,
    check_integers,
    check_min_rank,
    check_same_dtype,
)
from ..attention import ALIGNMENTS, AlignFn, ScoreFn, _attend_trusted, attend
from ..catalog import catalogued
from ..masking import check_attn_mask, check_key_padding_mask
from ..query_related.multihead import merge_heads, split_heads
from ..registry import Registry

CHAPTER = "chapters/ch06_7_recurrent_attention.ipynb"

FeatureMap = Callable[[Tensor], Tensor]
Form = Literal["parallel", "recurrent", "chunked"]
FORMS = ("parallel", "recurrent", "chunked")

#: Feature maps ``phi`` of linear attention by name.
FEATURE_MAPS: Registry[FeatureMap] = Registry("feature map")


@FEATURE_MAPS.register("elu+1")
def elu_feature_map(x: Tensor) -> Tensor:
    """Katharopoulos et al.'s feature map ``phi(x) = elu(x) + 1`` (positive, so the normaliser is positive).

    Args:
        x: queries or keys.

    Shape:
        x: any; returns the same shape.

    Returns:
        ``elu(x) + 1``, elementwise.

    Raises:
        TypeError: if x is not a floating-point tensor.
    """
    return F_.elu(as_tensor(x, "x")) + 1.0


@FEATURE_MAPS.register("identity")
def identity_feature_map(x: Tensor) -> Tensor:
    """The identity feature map ``phi(x) = x`` (RetNet, GLA; the normaliser may then vanish or change sign).

    Args:
        x: queries or keys.

    Shape:
        x: any; returns the same shape.

    Returns:
        ``x`` itself.

    Raises:
        TypeError: if x is not a floating-point tensor.
    """
    return as_tensor(x, "x")


def resolve_feature_map(feature_map: str | FeatureMap) -> FeatureMap:
    """The feature map that ``feature_map`` names (or ``feature_map`` itself when it is callable).

    Args:
        feature_map: a name of :data:`FEATURE_MAPS` or a callable ``x -> phi(x)``.

    Returns:
        The callable.

    Raises:
        ValueError: for an unknown name.
        TypeError: for anything that is neither a string nor callable.
    """
    return FEATURE_MAPS.resolve(feature_map, "feature_map", "x -> phi(x)")


def _safe_divide(num: Tensor, den: Tensor) -> Tensor:
    """``num / den`` where ``den != 0``, else 0 (no NaN in the values or the gradients)."""
    zero = den == 0
    return torch.where(zero, torch.zeros((), dtype=num.dtype), num / torch.where(zero, torch.ones_like(den), den))


@ALIGNMENTS.register("linear-normalise")
def linear_normalise_align(e: Tensor, mask: Tensor | None = None) -> Tensor:
    """Linear attention's alignment: the allowed scores divided by their row sum (no exponential).

    Args:
        e: the scores ``phi(q)^T phi(k)``.
        mask: boolean, broadcastable to ``e``, ``True`` = may attend; None: all allowed.

    Shape:
        e: ``(..., n_q, n_f)``; returns the same shape.

    Returns:
        ``e_ij / sum_{allowed l} e_il`` at allowed positions, 0 elsewhere; a row whose sum is 0
        (a fully-masked row among them) is all zeros. Masked scores are inert (selected away).

    Raises:
        TypeError: if e is not a floating-point tensor.
        ValueError: for a mask that is not boolean or does not broadcast to ``e``.
    """
    a = identity_align(e, mask)
    return _safe_divide(a, a.sum(-1, keepdim=True))


@ALIGNMENTS.register("identity")
def identity_align(e: Tensor, mask: Tensor | None = None) -> Tensor:
    """The unnormalised alignment: the scores themselves at allowed positions, 0 elsewhere.

    Args:
        e: the scores.
        mask: boolean, broadcastable to ``e``, ``True`` = may attend; None: all allowed.

    Shape:
        e: ``(..., n_q, n_f)``; returns the same shape.

    Returns:
        ``e`` where allowed, 0 elsewhere (masked scores are inert, NaN included).

    Raises:
        TypeError: if e is not a floating-point tensor.
        ValueError: for a mask that is not boolean or does not broadcast to ``e``.
    """
    as_tensor(e, "e")
    if mask is None:
        return e
    check_attn_mask(mask, e.shape)
    return torch.where(mask, e, torch.zeros((), dtype=e.dtype, device=e.device))


def linear_score(feature_map: str | FeatureMap = "elu+1") -> ScoreFn:
    """The score hook of linear attention, ``(Q, K) -> phi(Q) phi(K)^T``, for :func:`attnsurvey.attention.attend`.

    Args:
        feature_map: a name of :data:`FEATURE_MAPS` or a callable.

    Shape:
        the returned function maps Q ``(..., n_q, d_k)`` and K ``(..., n_f, d_k)`` to ``(..., n_q, n_f)``.

    Returns:
        The score function.

    Raises:
        ValueError, TypeError: for a bad feature map (see :func:`resolve_feature_map`).
    """
    phi = resolve_feature_map(feature_map)

    def score(Q: Tensor, K: Tensor) -> Tensor:
        return phi(Q) @ phi(K).transpose(-1, -2)

    return score


@catalogued(
    "extra:gated-decay",
    title="Decay and gates: S_t = g_t S_(t-1) + phi(k_t) v_t^T (RetNet: fixed g_t = gamma; Mamba-2, GLA: data-dependent), D_ij = prod_(l=j+1..i) g_l",
)
def decay_matrix(log_gate: Tensor) -> Tensor:
    """The decay matrix of a gated recurrence: ``D_ij = prod_{l=j+1..i} g_l`` for ``j <= i``, else 0.

    Computed as ``exp(L_i - L_j)`` from the cumulative log-gates ``L`` (every exponent used is
    ``<= 0``), so strong decay gives small entries, not ``0/0``.

    Args:
        log_gate: ``log g_t``, finite and ``<= 0`` (``g_t`` in ``(0, 1]``).

    Shape:
        log_gate: ``(..., n)``; returns ``(..., n, n)``.

    Returns:
        ``D`` (lower triangular, ones on the diagonal).

    Raises:
        TypeError: if log_gate is not a floating-point tensor.
        ValueError: if it has no axis or holds a value that is positive or not finite.
    """
    _check_log_gate(log_gate)
    return _decay_matrix(log_gate)


def _decay_matrix(log_gate: Tensor) -> Tensor:
    """:func:`decay_matrix` on checked inputs."""
    L = log_gate.cumsum(-1)
    n = L.shape[-1]
    causal = torch.ones(n, n, dtype=torch.bool, device=L.device).tril()
    diff = L[..., :, None] - L[..., None, :]  # L_i - L_j
    # -inf before exp (not exp then where): exp of a positive difference above the diagonal may overflow
    return torch.exp(diff.masked_fill(~causal, float("-inf")))


def gated_align(log_gate: Tensor, normalise: bool = True) -> AlignFn:
    """The alignment closure of gated linear attention: the allowed scores times ``D``, then normalised or not.

    ``attend(Q, K, V, score=linear_score(phi), align=gated_align(log_g), is_causal=True)`` is the
    parallel form of ``S_t = g_t S_{t-1} + phi(k_t) v_t^T``.

    Args:
        log_gate: ``log g_t``, finite and ``<= 0``, broadcastable against the scores' batch axes.
        normalise: divide by the row sum (the decayed normaliser ``z``); False: unnormalised.

    Shape:
        log_gate: ``(..., n)``; the returned function maps scores ``(..., n, n)`` to weights of that shape.

    Returns:
        The alignment function ``(e, mask) -> a``.

    Raises:
        TypeError: if log_gate is not a floating-point tensor.
        ValueError: as :func:`decay_matrix`.
    """
    D = decay_matrix(log_gate)
    finish = linear_normalise_align if normalise else identity_align

    def align(e: Tensor, mask: Tensor | None = None) -> Tensor:
        return finish(identity_align(e, mask) * D, None)

    return align


def _check_log_gate(log_gate: Tensor, n: int | None = None) -> None:
    as_tensor(log_gate, "log_gate")
    check_min_rank(log_gate, 1, "log_gate", "(..., n)")
    if n is not None:
        check_dim_equal(log_gate.shape[-1], n, "gated linear attention", "n of log_gate", "n of Q")
    if not bool(torch.isfinite(log_gate).all()) or bool((log_gate > 0).any()):
        raise ValueError(
            f"log_gate (shape {tuple(log_gate.shape)}) must hold log g_t with g_t in (0, 1]: finite values <= 0"
        )


class LinearAttentionState(NamedTuple):
    """The recurrent state of (gated) linear attention after some positions.

    Args:
        S: ``sum_j D_tj phi(k_j) v_j^T``, the key-value memory.
        z: ``sum_j D_tj phi(k_j)``, the normaliser (None for unnormalised attention).

    Shape:
        S: ``(..., d_k, d_v)``; z: ``(..., d_k)``.
    """

    S: Tensor
    z: Tensor | None


def initial_state(Q: Tensor, V: Tensor, normalise: bool = True) -> LinearAttentionState:
    """The empty state (no key seen) for queries ``Q`` and values ``V``.

    Args:
        Q: queries (their batch axes, width, dtype and device are used).
        V: values (their width is used).
        normalise: include the normaliser ``z``.

    Shape:
        Q: ``(..., n, d_k)``; V: ``(..., n, d_v)``; returns S ``(..., d_k, d_v)`` and z ``(..., d_k)``.

    Returns:
        Zeros.

    Raises:
        TypeError: if Q or V is not a floating-point tensor.
        ValueError: if their batch axes do not broadcast.
    """
    for sym, t in (("Q", Q), ("V", V)):
        as_tensor(t, sym)
        check_min_rank(t, 2, sym, "(..., n, d)")
    batch = broadcast_batch(Q.shape[:-2], V.shape[:-2])
    if batch is None:
        raise ValueError(f"batch dimensions of Q {tuple(Q.shape)} and V {tuple(V.shape)} do not broadcast")
    return _zero_state(Q, V, batch, normalise)


def _zero_state(Q: Tensor, V: Tensor, batch: tuple[int, ...], normalise: bool) -> LinearAttentionState:
    S = Q.new_zeros(*batch, Q.shape[-1], V.shape[-1])
    return LinearAttentionState(S, Q.new_zeros(*batch, Q.shape[-1]) if normalise else None)


def _check_qkv(
    Q: Tensor, K: Tensor, V: Tensor, log_gate: Tensor | None, key_padding_mask: Tensor | None, what: str
) -> tuple[tuple[int, ...], Tensor | None]:
    """Check causal self-attention inputs; return the batch shape and the key mask as ``(..., n)`` (or None)."""
    for sym, t in (("Q", Q), ("K", K), ("V", V)):
        as_tensor(t, sym)
        check_min_rank(t, 2, sym, "(..., n, d)")
    if not Q.dtype == K.dtype == V.dtype:
        check_same_dtype(Q=Q, K=K, V=V)
    check_dim_equal(Q.shape[-1], K.shape[-1], what, "d_k of Q", "d_k of K")
    check_dim_equal(Q.shape[-2], K.shape[-2], what + " (causal, one position per query and key)", "n of Q", "n of K")
    check_dim_equal(K.shape[-2], V.shape[-2], what, "n of K", "n of V")
    shapes = [Q.shape[:-2], K.shape[:-2], V.shape[:-2]]
    if log_gate is not None:
        _check_log_gate(log_gate, Q.shape[-2])
        shapes.append(log_gate.shape[:-1])
    batch = broadcast_batch(*shapes)
    if batch is None:
        raise ValueError(
            f"{what}: batch dimensions of Q {tuple(Q.shape)}, K {tuple(K.shape)}, V {tuple(V.shape)}"
            + ("" if log_gate is None else f" and log_gate {tuple(log_gate.shape)}")
            + " do not broadcast"
        )
    kpm = None
    if key_padding_mask is not None:
        n = Q.shape[-2]
        kpm = check_key_padding_mask(key_padding_mask, torch.Size((*batch, n, n)))[..., 0, :]
    return batch, kpm


@catalogued(
    "extra:linear-attention",
    title="Causal linear attention (Katharopoulos et al. 2020): o_t = S_t^T phi(q_t) / z_t^T phi(q_t), S_t = S_(t-1) + phi(k_t) v_t^T, z_t = z_(t-1) + phi(k_t)",
)
def linear_attention(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    *,
    feature_map: str | FeatureMap = "elu+1",
    log_gate: Tensor | None = None,
    normalise: bool = True,
    key_padding_mask: Tensor | None = None,
    _finite_inputs: bool = False,
) -> Tensor:
    """Causal (gated) linear attention, parallel form, through :func:`attnsurvey.attention.attend`.

    ``o_i = sum_{j <= i} D_ij phi(q_i)^T phi(k_j) v_j / sum_{j <= i} D_ij phi(q_i)^T phi(k_j)``
    (without the denominator when ``normalise`` is False; ``D = 1`` without gates). The core
    computes the scores with :func:`linear_score`, masks causally, and aligns with
    ``"linear-normalise"``/``"identity"`` or, with gates, :func:`gated_align`.

    Args:
        Q: the queries.
        K: the keys.
        V: the values.
        feature_map: ``phi``, a name of :data:`FEATURE_MAPS` or a callable.
        log_gate: ``log g_t`` (finite, ``<= 0``) of a gated recurrence; None: no decay.
        normalise: divide by the normaliser (Katharopoulos et al.); False: RetNet/GLA style.
        key_padding_mask: boolean, ``True`` = may attend; a padded position is inert and its output 0.

    Shape:
        Q: ``(..., n, d_k)``; K: ``(..., n, d_k)``; V: ``(..., n, d_v)``; log_gate: ``(..., n)``;
        key_padding_mask: ``(..., n)``; returns ``(..., n, d_v)``.

    Returns:
        The outputs; a query whose normaliser is 0 (no allowed key) gets 0.

    Raises:
        TypeError: for inputs that are not floating-point tensors or of different dtypes.
        ValueError: for mismatched shapes, a bad mask or a log-gate that is positive or not finite.
    """
    _, kpm = _check_qkv(Q, K, V, log_gate, key_padding_mask, "linear_attention")
    Q, K, V = _inert_positions(Q, K, V, kpm)
    if log_gate is None:
        align: str | AlignFn = "linear-normalise" if normalise else "identity"
    else:
        align = gated_align(log_gate, normalise)
    run = _attend_trusted if _finite_inputs else attend  # private flag: a layer of a model of tokens, finite Q, K, V
    c = run(
        Q,
        K,
        V,
        score=linear_score(feature_map),
        align=align,
        is_causal=True,
        key_padding_mask=key_padding_mask,
        need_weights=False,
    )[0]
    return _zero_padded(c, kpm)


def _inert_positions(Q: Tensor, K: Tensor, V: Tensor, kpm: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """Q, K and V with padded rows set to 0 (selected, so NaN there reaches neither outputs nor gradients)."""
    if kpm is None:
        return Q, K, V
    keep = kpm[..., None]
    return torch.where(keep, Q, 0.0), torch.where(keep, K, 0.0), torch.where(keep, V, 0.0)


def _zero_padded(out: Tensor, kpm: Tensor | None) -> Tensor:
    """The outputs with padded positions set to 0."""
    return out if kpm is None else torch.where(kpm[..., None], out, 0.0)


def _step(
    state: LinearAttentionState,
    phi_q: Tensor,
    phi_k: Tensor,
    v: Tensor,
    log_g: Tensor | None,
) -> tuple[Tensor, LinearAttentionState]:
    """One step on checked, feature-mapped inputs (``phi_k`` already 0 for a masked key)."""
    S, z = state
    if log_g is not None:
        g = torch.exp(log_g)
        S = g[..., None, None] * S
        z = None if z is None else g[..., None] * z
    S = S + phi_k[..., :, None] * v[..., None, :]  # S_t = g_t S_{t-1} + phi(k_t) v_t^T
    num = (phi_q[..., :, None] * S).sum(-2)  # S_t^T phi(q_t)
    if z is None:
        return num, LinearAttentionState(S, None)
    z = z + phi_k
    return _safe_divide(num, (z * phi_q).sum(-1, keepdim=True)), LinearAttentionState(S, z)


def _check_state(state: LinearAttentionState, batch: tuple[int, ...], d_k: int, d_v: int, normalise: bool) -> None:
    S, z = state
    as_tensor(S, "S")
    check_min_rank(S, 2, "S", "(..., d_k, d_v)")
    if S.shape[-2:] != (d_k, d_v) or broadcast_batch(S.shape[:-2], batch) is None:
        raise ValueError(f"the state S has shape {tuple(S.shape)}, expected (..., d_k={d_k}, d_v={d_v})")
    if normalise != (z is not None):
        raise ValueError(f"normalise={normalise} needs a state {'with' if normalise else 'without'} a normaliser z")
    if z is not None:
        as_tensor(z, "z")
        if z.shape[-1:] != (d_k,) or z.shape[:-1] != S.shape[:-2]:
            raise ValueError(f"the normaliser z has shape {tuple(z.shape)}, expected {(*S.shape[:-2], d_k)}")


@catalogued("extra:linear-attention")
def linear_attention_step(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    state: LinearAttentionState,
    *,
    feature_map: str | FeatureMap = "elu+1",
    log_gate: Tensor | None = None,
) -> tuple[Tensor, LinearAttentionState]:
    """One decoding step of (gated) linear attention: update the state with ``(k_t, v_t)``, read it with ``q_t``.

    ``S_t = g_t S_{t-1} + phi(k_t) v_t^T``, ``z_t = g_t z_{t-1} + phi(k_t)``,
    ``o_t = S_t^T phi(q_t) / (z_t^T phi(q_t))`` (no division when the state has no ``z``).

    Args:
        q: the query of step t.
        k: the key of step t.
        v: the value of step t.
        state: the state after step t-1 (:func:`initial_state` at the start).
        feature_map: ``phi``, a name of :data:`FEATURE_MAPS` or a callable.
        log_gate: ``log g_t`` (finite, ``<= 0``); None: no decay.

    Shape:
        q, k: ``(..., d_k)``; v: ``(..., d_v)``; log_gate: ``(...)`` as a tensor of the batch shape;
        state S ``(..., d_k, d_v)``, z ``(..., d_k)``; returns o ``(..., d_v)`` and the new state.

    Returns:
        ``(o_t, state_t)``.

    Raises:
        TypeError: for inputs that are not floating-point tensors.
        ValueError: for widths that disagree with the state, or a bad log-gate.
    """
    for sym, t in (("q", q), ("k", k), ("v", v)):
        as_tensor(t, sym)
        check_min_rank(t, 1, sym, "(..., d)")
    check_dim_equal(q.shape[-1], k.shape[-1], "linear_attention_step", "d_k of q", "d_k of k")
    batch = broadcast_batch(q.shape[:-1], k.shape[:-1], v.shape[:-1])
    if batch is None:
        raise ValueError(f"batch dimensions of q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} differ")
    _check_state(state, batch, q.shape[-1], v.shape[-1], state.z is not None)
    if log_gate is not None:
        as_tensor(log_gate, "log_gate")
        _check_log_gate(log_gate.unsqueeze(-1))
    phi = resolve_feature_map(feature_map)
    return _step(state, phi(q), phi(k), v, log_gate)


def linear_attention_recurrent(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    *,
    feature_map: str | FeatureMap = "elu+1",
    log_gate: Tensor | None = None,
    normalise: bool = True,
    key_padding_mask: Tensor | None = None,
    state: LinearAttentionState | None = None,
) -> tuple[Tensor, LinearAttentionState]:
    """Causal (gated) linear attention, recurrent form: :func:`linear_attention_step` for ``t = 1..n``.

    Args:
        Q: the queries.
        K: the keys.
        V: the values.
        feature_map: ``phi``, a name of :data:`FEATURE_MAPS` or a callable.
        log_gate: ``log g_t`` (finite, ``<= 0``); None: no decay.
        normalise: carry and divide by the normaliser ``z``.
        key_padding_mask: boolean, ``True`` = may attend; a padded position adds nothing to the state
            and its output is 0.
        state: the state before position 1 (a previous chunk of the same sequence); None: empty.

    Shape:
        Q: ``(..., n, d_k)``; K: ``(..., n, d_k)``; V: ``(..., n, d_v)``; log_gate: ``(..., n)``;
        key_padding_mask: ``(..., n)``; returns ``(..., n, d_v)`` and the state after position n.

    Returns:
        ``(outputs, state)``; equal to :func:`linear_attention` to rounding.

    Raises:
        TypeError, ValueError: as :func:`linear_attention`, and for a state of the wrong shape.
    """
    batch, kpm = _check_qkv(Q, K, V, log_gate, key_padding_mask, "linear_attention_recurrent")
    state = _start(state, Q, V, batch, normalise)
    phi = resolve_feature_map(feature_map)
    Q, K, V = _inert_positions(Q, K, V, kpm)
    phi_q, phi_k = phi(Q), phi(K)
    if kpm is not None:
        phi_k = torch.where(kpm[..., None], phi_k, 0.0)
    outs = []
    for t in range(Q.shape[-2]):
        g = None if log_gate is None else log_gate[..., t]
        o, state = _step(state, phi_q[..., t, :], phi_k[..., t, :], V[..., t, :], g)
        outs.append(o)
    out = torch.stack(outs, -2) if outs else V.new_zeros(*batch, 0, V.shape[-1])
    return _zero_padded(out.expand(*batch, *out.shape[-2:]), kpm), state


def _start(
    state: LinearAttentionState | None, Q: Tensor, V: Tensor, batch: tuple[int, ...], normalise: bool
) -> LinearAttentionState:
    """The given state (checked) or the empty one, with the batch shape."""
    if state is None:
        return _zero_state(Q, V, batch, normalise)
    _check_state(state, batch, Q.shape[-1], V.shape[-1], normalise)
    return state


@catalogued(
    "extra:linear-attention-chunked",
    title="Chunked linear attention: parallel inside chunks of C positions, the state S carried between chunks",
)
def linear_attention_chunked(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    chunk_size: int = 64,
    *,
    feature_map: str | FeatureMap = "elu+1",
    log_gate: Tensor | None = None,
    normalise: bool = True,
    key_padding_mask: Tensor | None = None,
    state: LinearAttentionState | None = None,
) -> tuple[Tensor, LinearAttentionState]:
    """Causal (gated) linear attention, chunked form: parallel inside chunks of ``C`` positions, a state between them.

    The sequence is cut into ``ceil(n / C)`` chunks (the last one padded with masked keys).
    Inside a chunk the core (:func:`attnsurvey.attention.attend`, unnormalised, values
    extended by a column of ones so that the same call gives the normaliser) computes the
    intra-chunk part with the chunk's own cumulative log-gates ``b``; the state ``S_c``
    before the chunk adds ``exp(b_i) phi(q_i)^T S_c``; and the state moves on as
    ``S_{c+1} = exp(b_last) S_c + sum_j exp(b_last - b_j) phi(k_j) v_j^T``.

    Args:
        Q: the queries.
        K: the keys.
        V: the values.
        chunk_size: ``C``, any integer >= 1 (it need not divide n).
        feature_map: ``phi``, a name of :data:`FEATURE_MAPS` or a callable.
        log_gate: ``log g_t`` (finite, ``<= 0``); None: no decay.
        normalise: divide by the normaliser.
        key_padding_mask: boolean, ``True`` = may attend; a padded position is inert and its output 0.
        state: the state before position 1; None: empty.

    Shape:
        Q: ``(..., n, d_k)``; K: ``(..., n, d_k)``; V: ``(..., n, d_v)``; log_gate: ``(..., n)``;
        key_padding_mask: ``(..., n)``; returns ``(..., n, d_v)`` and the state after position n.

    Returns:
        ``(outputs, state)``; equal to :func:`linear_attention` to rounding.

    Raises:
        TypeError, ValueError: as :func:`linear_attention`, for ``C < 1`` and for a bad state.
    """
    check_integers("linear_attention_chunked", minimum=1, chunk_size=chunk_size)
    batch, kpm = _check_qkv(Q, K, V, log_gate, key_padding_mask, "linear_attention_chunked")
    state = _start(state, Q, V, batch, normalise)
    phi = resolve_feature_map(feature_map)
    n, d_v, C = Q.shape[-2], V.shape[-1], chunk_size
    Q, K, V = _inert_positions(Q, K, V, kpm)
    Q, K, V = (t.expand(*batch, *t.shape[-2:]) for t in (Q, K, V))
    if normalise:  # one more value column of ones: its context is the normaliser
        V = torch.cat([V, V.new_ones(*V.shape[:-1], 1)], -1)
    keep = Q.new_ones(*batch, n, dtype=torch.bool) if kpm is None else kpm.expand(*batch, n)
    log_g = Q.new_zeros(*batch, n) if log_gate is None else log_gate.expand(*batch, n)
    pad = -n % C
    if pad:  # padded positions: masked keys, gate 1, outputs dropped
        Q, K, V = (F_.pad(t, (0, 0, 0, pad)) for t in (Q, K, V))
        keep, log_g = F_.pad(keep, (0, pad), value=False), F_.pad(log_g, (0, pad))
    n_c = (n + pad) // C
    Qc, Kc, Vc = (t.reshape(*batch, n_c, C, t.shape[-1]) for t in (Q, K, V))
    keep_c = keep.reshape(*batch, n_c, C)
    b = log_g.reshape(*batch, n_c, C).cumsum(-1)  # cumulative log-gates inside each chunk
    align: AlignFn = gated_align(log_g.reshape(*batch, n_c, C), False) if log_gate is not None else identity_align
    intra = attend(
        Qc, Kc, Vc, score=linear_score(phi), align=align, is_causal=True, key_padding_mask=keep_c, need_weights=False
    )[0]
    phi_q = phi(Qc)
    phi_k = torch.where(keep_c[..., None], phi(Kc), 0.0)
    # each chunk's own contribution to the state at its end: sum_j exp(b_last - b_j) phi(k_j) v_j^T
    to_end = torch.exp(b[..., -1:] - b)
    U = (phi_k * to_end[..., None]).transpose(-1, -2) @ Vc  # (..., n_c, d_k, d_v')
    S = state.S if state.z is None else torch.cat([state.S, state.z[..., None]], -1)
    S = S.expand(*batch, *S.shape[-2:])
    starts = []
    for c in range(n_c):  # the scan over chunks: S_{c+1} = exp(b_last) S_c + U_c
        starts.append(S)
        S = torch.exp(b[..., c, -1])[..., None, None] * S + U[..., c, :, :]
    inter = (phi_q * torch.exp(b)[..., None]) @ torch.stack(starts, -3) if n_c else intra
    out = (intra + inter).reshape(*batch, n_c * C, V.shape[-1])[..., :n, :]
    if not normalise:
        return _zero_padded(out, kpm), LinearAttentionState(S, None)
    out = _safe_divide(out[..., :d_v], out[..., d_v:])
    return _zero_padded(out, kpm), LinearAttentionState(S[..., :d_v], S[..., d_v])


def linear_attention_forms(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    form: str = "parallel",
    chunk_size: int = 64,
    *,
    feature_map: str | FeatureMap = "elu+1",
    log_gate: Tensor | None = None,
    normalise: bool = True,
    key_padding_mask: Tensor | None = None,
    _finite_inputs: bool = False,
) -> Tensor:
    """The outputs of causal (gated) linear attention in one of its three forms, chosen by name.

    Args:
        Q: the queries.
        K: the keys.
        V: the values.
        form: ``"parallel"`` (:func:`linear_attention`), ``"recurrent"``
            (:func:`linear_attention_recurrent`) or ``"chunked"`` (:func:`linear_attention_chunked`).
        chunk_size: ``C`` of the chunked form.
        feature_map: ``phi``, a name of :data:`FEATURE_MAPS` or a callable.
        log_gate: ``log g_t`` (finite, ``<= 0``); None: no decay.
        normalise: divide by the normaliser.
        key_padding_mask: boolean, ``True`` = may attend.

    Shape:
        Q: ``(..., n, d_k)``; K: ``(..., n, d_k)``; V: ``(..., n, d_v)``; log_gate: ``(..., n)``;
        key_padding_mask: ``(..., n)``; returns ``(..., n, d_v)``.

    Returns:
        The outputs (the same for every form, to rounding).

    Raises:
        ValueError: for an unknown form or ``C < 1``; otherwise as the form called.
    """
    check_integers("linear_attention_forms", minimum=1, chunk_size=chunk_size)
    kw: dict[str, Any] = {
        "feature_map": feature_map,
        "log_gate": log_gate,
        "normalise": normalise,
        "key_padding_mask": key_padding_mask,
    }
    if form == "parallel":  # the one form through the core: _finite_inputs (private) skips its clearing
        return linear_attention(Q, K, V, **kw, _finite_inputs=_finite_inputs)
    if form == "recurrent":
        return linear_attention_recurrent(Q, K, V, **kw)[0]
    if form == "chunked":
        return linear_attention_chunked(Q, K, V, chunk_size, **kw)[0]
    raise ValueError(f"form must be one of {FORMS}, got form={form!r}")


def retnet_log_decay(h: int) -> Tensor:
    """RetNet's fixed per-head decay as log-gates: ``log gamma_j`` with ``gamma_j = 1 - 2^(-5-j)``, ``j = 0..h-1``.

    Args:
        h: the number of heads.

    Shape:
        returns ``(h,)`` (float64; cast it to the inputs' dtype).

    Returns:
        ``log(1 - 2^(-5-j))`` per head.

    Raises:
        ValueError: unless h is an integer >= 1.
    """
    check_integers("retnet_log_decay", minimum=1, h=h)
    return torch.log1p(-torch.exp2(-5.0 - torch.arange(h, dtype=torch.float64)))


#: GLA's temperature of the gate: ``log g = logsigmoid(W_g x) / 16`` keeps the gates near 1 at initialisation.
GATE_TEMPERATURE = 16.0


@catalogued("extra:linear-attention")
class LinearAttentionLayer(nn.Module):
    """A causal token mixer with (gated) linear attention heads: project, attend per head, merge, mix.

    ``forward(x)`` projects ``x`` to per-head queries, keys and values (``W_Q, W_K, W_V``, the
    heads split as :func:`attnsurvey.query_related.multihead.split_heads`), runs causal linear
    attention in the chosen form, merges the heads and applies ``W_O``. Parameters:
    ``4 d_model^2`` (four bias-free projections), plus ``h d_model`` with ``gate="scalar"``
    (a bias-free gate projection ``W_g``, ``log g_t = logsigmoid(W_g x_t) / 16`` per head as in
    GLA); ``gate="fixed"`` uses RetNet's ``gamma_j = 1 - 2^(-5-j)`` (a buffer, no parameter).

    Args:
        d_model: the input and output width.
        n_heads: ``h``, dividing ``d_model``.
        feature_map: ``phi``, a name of :data:`FEATURE_MAPS` or a callable.
        gate: None (no decay), ``"fixed"`` (RetNet) or ``"scalar"`` (data-dependent, Mamba-2/GLA).
        normalise: divide by the normaliser (False: unnormalised, as RetNet and GLA).
        form: ``"parallel"``, ``"recurrent"`` or ``"chunked"`` (the same outputs).
        chunk_size: ``C`` of the chunked form.
        finite_inputs: the caller vouches that ``x`` holds no NaN/Inf (a model of tokens), so the
            parallel form's attention core skips its NaN-inert clearing of masked positions (the same
            bits for finite ``x``; :class:`~attnsurvey.attention.CoreSettings`).

    Shape:
        forward: x ``(B, n, d_model)``; returns ``(B, n, d_model)``.

    Raises:
        ValueError: for sizes that are not positive integers, ``h`` not dividing ``d_model``, an
            unknown gate or form; ``forward``: for an input of the wrong width.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        feature_map: str | FeatureMap = "elu+1",
        gate: Literal["fixed", "scalar"] | None = None,
        normalise: bool = True,
        form: Form = "parallel",
        chunk_size: int = 64,
        finite_inputs: bool = False,
    ) -> None:
        super().__init__()
        check_integers("LinearAttentionLayer", minimum=1, d_model=d_model, n_heads=n_heads, chunk_size=chunk_size)
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by the number of heads n_heads={n_heads}")
        if gate not in (None, "fixed", "scalar"):
            raise ValueError(f"gate must be None, 'fixed' or 'scalar', got gate={gate!r}")
        if form not in FORMS:
            raise ValueError(f"form must be one of {FORMS}, got form={form!r}")
        resolve_feature_map(feature_map)
        self.d_model, self.h, self.gate, self.normalise = d_model, n_heads, gate, normalise
        self.feature_map, self.form, self.chunk_size = feature_map, form, chunk_size
        self.finite_inputs = finite_inputs
        self.W_Q, self.W_K, self.W_V, self.W_O = (nn.Linear(d_model, d_model, bias=False) for _ in range(4))
        self.W_g = nn.Linear(d_model, n_heads, bias=False) if gate == "scalar" else None
        self.register_buffer("log_gamma", retnet_log_decay(n_heads).float() if gate == "fixed" else None)

    def log_gates(self, x: Tensor) -> Tensor | None:
        """The log-gates of input ``x`` per head and position (None without a gate).

        Args:
            x: the input.

        Shape:
            x: ``(B, n, d_model)``; returns ``(B, h, n)`` (``(h, n)`` for the fixed decay).

        Returns:
            ``log g``, finite and ``<= 0``.
        """
        if self.W_g is not None:
            return F_.logsigmoid(self.W_g(x)).transpose(-1, -2) / GATE_TEMPERATURE
        if isinstance(self.log_gamma, Tensor):
            return self.log_gamma.to(x.dtype)[:, None].expand(self.h, x.shape[-2])
        return None

    def forward(self, x: Tensor, form: Form | None = None) -> Tensor:
        """Causal mixing of ``x``.

        Args:
            x: the input sequence.
            form: overrides the layer's form for this call.

        Shape:
            x: ``(B, n, d_model)``; returns ``(B, n, d_model)``.

        Returns:
            The mixed sequence.

        Raises:
            TypeError: if x is not a floating-point tensor.
            ValueError: for the wrong width or an unknown form.
        """
        as_tensor(x, "x")
        check_min_rank(x, 2, "x", "(..., n, d_model)")
        check_dim_equal(x.shape[-1], self.d_model, "LinearAttentionLayer", "d_model of x", "d_model of the layer")
        q, k, v = (split_heads(W(x), self.h) for W in (self.W_Q, self.W_K, self.W_V))
        o = linear_attention_forms(
            q,
            k,
            v,
            self.form if form is None else form,
            self.chunk_size,
            feature_map=self.feature_map,
            log_gate=self.log_gates(x),
            normalise=self.normalise,
            _finite_inputs=self.finite_inputs,
        )
        return self.W_O(merge_heads(o))


# --- costs (pure arithmetic) ---------------------------------------------------------------------


def state_elements(d_k: int, d_v: int, h: int = 1, normalise: bool = True) -> int:
    """Elements of the recurrent state of one layer: ``h (d_k d_v + d_k)`` (``h d_k d_v`` unnormalised), for any n.

    Args:
        d_k: the per-head key width.
        d_v: the per-head value width.
        h: the number of heads.
        normalise: count the normaliser ``z``.

    Returns:
        The element count.

    Raises:
        ValueError: unless the sizes are integers >= 1.
    """
    check_integers("state_elements", minimum=1, d_k=d_k, d_v=d_v, h=h)
    return h * (d_k * d_v + (d_k if normalise else 0))


def kv_cache_elements(n: int, d_k: int, d_v: int, h: int = 1) -> int:
    """Elements of a softmax layer's key-value cache after n positions: ``h n (d_k + d_v)``.

    Args:
        n: the context length.
        d_k: the per-head key width.
        d_v: the per-head value width.
        h: the number of heads.

    Returns:
        The element count.

    Raises:
        ValueError: unless n >= 0 and the widths and h >= 1 are integers.
    """
    check_integers("kv_cache_elements", minimum=0, n=n)
    check_integers("kv_cache_elements", minimum=1, d_k=d_k, d_v=d_v, h=h)
    return h * n * (d_k + d_v)


def recurrent_step_flops(d_k: int, d_v: int, h: int = 1, normalise: bool = True, gated: bool = False) -> int:
    """FLOPs of one recurrent decoding step per layer (2 per multiply-add; feature map and gate ignored).

    Per head: the outer product added to the state ``2 d_k d_v``, the read-out ``S^T phi(q)``
    ``2 d_k d_v``; with the normaliser ``z += phi(k)`` ``d_k``, ``z . phi(q)`` ``2 d_k`` and the
    division ``d_v``; with a gate the scaling of the state ``d_k d_v`` (and of ``z``, ``d_k``).

    Args:
        d_k: the per-head key width.
        d_v: the per-head value width.
        h: the number of heads.
        normalise: with the normaliser.
        gated: with a decay or gate.

    Returns:
        The FLOP count, independent of the position.

    Raises:
        ValueError: unless the sizes are integers >= 1.
    """
    check_integers("recurrent_step_flops", minimum=1, d_k=d_k, d_v=d_v, h=h)
    per_head = 4 * d_k * d_v
    if normalise:
        per_head += 3 * d_k + d_v
    if gated:
        per_head += d_k * d_v + (d_k if normalise else 0)
    return h * per_head


def softmax_step_flops(n: int, d_k: int, d_v: int, h: int = 1) -> int:
    """FLOPs of one softmax decoding step per layer with n cached positions: ``h (2 n d_k + 2 n d_v)``.

    The scores ``q . k_j`` and the weighted sum of the values (2 per multiply-add); the
    exponentials and the division are not counted.

    Args:
        n: the context length (cached keys, the new one included).
        d_k: the per-head key width.
        d_v: the per-head value width.
        h: the number of heads.

    Returns:
        The FLOP count.

    Raises:
        ValueError: unless n >= 0 and the widths and h >= 1 are integers.
    """
    check_integers("softmax_step_flops", minimum=0, n=n)
    check_integers("softmax_step_flops", minimum=1, d_k=d_k, d_v=d_v, h=h)
    return h * 2 * n * (d_k + d_v)


def parallel_flops(n: int, d_k: int, d_v: int, normalise: bool = True) -> int:
    """FLOPs of the parallel form for one head: the full ``n x n`` scores and their product with V.

    ``2 n^2 d_k + 2 n^2 d_v'`` with ``d_v' = d_v + 1`` when normalised (the row sums as one
    more value column), as the core computes it (masked entries included).

    Args:
        n: the sequence length.
        d_k: the key width.
        d_v: the value width.
        normalise: count the row sums.

    Returns:
        The FLOP count.

    Raises:
        ValueError: unless n >= 0 and the widths >= 1 are integers.
    """
    check_integers("parallel_flops", minimum=0, n=n)
    check_integers("parallel_flops", minimum=1, d_k=d_k, d_v=d_v)
    return 2 * n * n * (d_k + d_v + int(normalise))


def chunked_flops(n: int, chunk_size: int, d_k: int, d_v: int, normalise: bool = True) -> int:
    """FLOPs of the chunked form for one head, with ``m = ceil(n / C)`` chunks of ``C`` (the last one padded).

    Per chunk: the ``C x C`` scores and product ``2 C^2 (d_k + d_v')``, the chunk's state
    contribution ``2 C d_k d_v'``, the read-out of the carried state ``2 C d_k d_v'`` and the
    state carried on ``2 d_k d_v'`` (scale and add), with ``d_v' = d_v + 1`` when normalised.

    Args:
        n: the sequence length.
        chunk_size: ``C``.
        d_k: the key width.
        d_v: the value width.
        normalise: count the normaliser.

    Returns:
        The FLOP count.

    Raises:
        ValueError: unless n >= 0 and C and the widths >= 1 are integers.
    """
    check_integers("chunked_flops", minimum=0, n=n)
    check_integers("chunked_flops", minimum=1, chunk_size=chunk_size, d_k=d_k, d_v=d_v)
    C, dv = chunk_size, d_v + int(normalise)
    m = math.ceil(n / C)
    return m * (2 * C * C * (d_k + dv) + 4 * C * d_k * dv + 2 * d_k * dv)


__all__ = [
    "CHAPTER",
    "FEATURE_MAPS",
    "FORMS",
    "GATE_TEMPERATURE",
    "LinearAttentionLayer",
    "LinearAttentionState",
    "chunked_flops",
    "decay_matrix",
    "elu_feature_map",
    "gated_align",
    "identity_align",
    "identity_feature_map",
    "initial_state",
    "kv_cache_elements",
    "linear_attention",
    "linear_attention_chunked",
    "linear_attention_forms",
    "linear_attention_recurrent",
    "linear_attention_step",
    "linear_normalise_align",
    "linear_score",
    "parallel_flops",
    "recurrent_step_flops",
    "resolve_feature_map",
    "retnet_log_decay",
    "softmax_step_flops",
    "state_elements",
]
