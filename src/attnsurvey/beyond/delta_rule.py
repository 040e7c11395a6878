r"""The delta rule (DeltaNet) and the gated delta rule (Gated DeltaNet): a recurrent state trained online.

Linear attention (:mod:`attnsurvey.beyond.linear_attention`) keeps a state ``S``
(``d_k x d_v``) and *adds* ``k_t v_t^T`` to it at every step; a query reads it as
``S_t^T q_t``. The delta rule (Schlag et al. 2021; parallelised by Yang et al. 2024) keeps
the same layout but first removes what the state already returns for the key, then writes
the value, with a per-token strength ``beta_t``:

    S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,        o_t = S_t^T q_t.

Read as ``S_t = S_{t-1} - beta_t k_t (S_{t-1}^T k_t - v_t)^T``, one step is one gradient
step of size ``beta_t`` on the online least-squares loss ``1/2 ||S^T k_t - v_t||^2``
(:func:`least_squares_step`); with ``beta_t = 1`` and a unit key the new state returns
``v_t`` for ``k_t`` exactly. Gated DeltaNet (Yang et al. 2025) first shrinks the whole
state by ``alpha_t = exp(g_t)`` with ``g_t <= 0``:

    S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T.

(The delta-rule papers write the transpose, a ``d_v x d_k`` state read as ``S_t q_t``;
the book keeps linear attention's layout, which is also the layout Qwen3-Next caches.)
No softmax is involved anywhere: outputs are linear in the values, and the queries
read the state by a plain matrix-vector product.

Two forms give the same outputs (to rounding):

* recurrent (:func:`delta_rule_recurrent`, one step :func:`delta_rule_step`): a loop
  over ``t``; the step with a carried state is what decoding runs;
* chunked (:func:`delta_rule_chunked`): split the sequence into chunks of ``C`` tokens
  (the last may be shorter). Within a chunk, with the carried state ``S_0``, the
  cumulative log-decays ``gamma_r = g_1 + ... + g_r`` and ``Gamma_r = exp(gamma_r)``
  (all 1 without the gate), write the update as ``S_r = alpha_r S_{r-1} +
  k_r delta_r^T`` with ``delta_r = beta_r (v_r - alpha_r S_{r-1}^T k_r)``. Unrolling
  ``S_{r-1} = Gamma_{r-1} S_0 + sum_{i<r} (Gamma_{r-1} / Gamma_i) k_i delta_i^T`` gives a
  triangular system for the rows ``delta_r^T`` of ``Delta`` (the WY / UT representation of
  the product of the factors ``I - beta_r k_r k_r^T``):

      (I + A) Delta = diag(beta) V - diag(beta) diag(Gamma) K S_0,
      A_{ri} = beta_r (Gamma_r / Gamma_i) k_r . k_i  for i < r (0 elsewhere),

  so with ``T = (I + A)^{-1} diag(beta)``, ``U = T V`` and ``W = T diag(Gamma) K``
  (without the gate: ``T = (I + tril(diag(beta) K K^T, -1))^{-1} diag(beta)``,
  ``W = T K``), the *pseudo-values* are ``Delta = U - W S_0``. The chunk's outputs and
  the next state are then

      O = diag(Gamma) Q S_0 + (Q K^T * D * M) Delta,   D_{ri} = Gamma_r / Gamma_i,
      S_C = Gamma_C S_0 + K^T diag(Gamma_C / Gamma) Delta,

  where ``M`` is the causal mask (:func:`attnsurvey.masking.causal_mask`, ``True`` =
  may attend; strictly lower with ``offset=-1`` for ``A``). ``Q K^T * D * M`` is an
  intra-chunk "attention" matrix with no softmax, applied to the pseudo-values. The
  triangular system is solved with :func:`torch.linalg.solve_triangular` (unit diagonal).

:class:`DeltaNetLayer` is the causal token mixer around the rule (projections, beta and
the gate from the input, L2-normalised queries and keys, an optional short convolution
and gated output norm), with the per-head split of
:func:`attnsurvey.query_related.multihead.split_heads`.

Shapes: batch-first rows; per-head ``Q, K`` are ``(..., n, d_k)``, ``V`` is
``(..., n, d_v)``, ``beta`` and ``g`` are ``(..., n)``, the state ``S`` is
``(..., d_k, d_v)``.
"""

from __future__ import annotations

import math
from typing import Any, Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import as_tensor, check_integers, check_min_rank, check_positive, check_same_dtype
from ..catalog import catalogued
from ..masking import causal_mask
from ..query_related.multihead import merge_heads, split_heads

CHAPTER = "chapters/ch06_7_recurrent_attention.ipynb"

#: The two ways to compute the rule: a loop over tokens, or chunks with the WY / UT representation.
DeltaForm = Literal["recurrent", "chunked"]
FORMS: tuple[str, ...] = ("recurrent", "chunked")
#: The epsilon of the L2 normalisation ``x / sqrt(||x||^2 + eps)`` of queries and keys (FLA's form).
L2_EPS = 1e-6


def _check_form(form: object) -> None:
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS}, got {form!r}")


def _check_sequence(
    Q: Tensor, K: Tensor, V: Tensor, beta: Tensor, g: Tensor | None, S0: Tensor | None
) -> tuple[Tensor, Tensor]:
    """Check the rule's inputs; return ``g`` (zeros when None) and ``S0`` (zeros when None)."""
    for x, symbol in ((Q, "Q"), (K, "K"), (V, "V")):
        as_tensor(x, symbol)
        check_min_rank(x, 2, symbol, "(..., n, d)")
    as_tensor(beta, "beta")
    check_min_rank(beta, 1, "beta", "(..., n)")
    if Q.shape != K.shape:
        raise ValueError(f"Q and K must both have shape (..., n, d_k), got Q {tuple(Q.shape)}, K {tuple(K.shape)}")
    if V.shape[:-1] != K.shape[:-1]:
        raise ValueError(
            f"V must have shape (..., n, d_v) with the batch and n of K, got K {tuple(K.shape)}, V {tuple(V.shape)}"
        )
    if beta.shape != K.shape[:-1]:
        raise ValueError(f"beta must have shape (..., n) = {tuple(K.shape[:-1])}, got {tuple(beta.shape)}")
    if g is None:
        g = torch.zeros_like(beta)
    else:
        as_tensor(g, "g")
        if g.shape != beta.shape:
            raise ValueError(f"g must have shape (..., n) = {tuple(beta.shape)}, got {tuple(g.shape)}")
        if bool((g > 0).any()):
            raise ValueError("the log-decays g must be <= 0 (alpha = exp(g) <= 1), got a positive entry")
    state_shape = (*K.shape[:-2], K.shape[-1], V.shape[-1])
    if S0 is None:
        S0 = Q.new_zeros(state_shape)
    else:
        as_tensor(S0, "S0")
        if S0.shape != state_shape:
            raise ValueError(f"S0 must have shape (..., d_k, d_v) = {state_shape}, got {tuple(S0.shape)}")
    check_same_dtype(Q=Q, K=K, V=V, beta=beta, g=g, S0=S0)
    return g, S0


def _refuse_overflow(O: Tensor, S: Tensor, *inputs: Tensor | None) -> tuple[Tensor, Tensor]:
    """Return ``(O, S)``, or raise if they hold inf or NaN although every input is finite."""
    if torch.compiler.is_compiling() or O.is_meta:  # a host-side test breaks a compiled graph; meta holds no data
        return O, S
    if bool(torch.isfinite(O.detach()).all()) and bool(torch.isfinite(S.detach()).all()):
        return O, S
    if all(x is None or bool(torch.isfinite(x.detach()).all()) for x in inputs):
        raise ValueError(
            f"the delta rule overflowed in {O.dtype} with finite inputs (O {tuple(O.shape)}, S {tuple(S.shape)}): "
            "each factor I - beta_t k_t k_t^T contracts only for beta_t ||k_t||^2 in [0, 2]; "
            "use unit keys and beta in [0, 1], or float64"
        )
    return O, S


def _check_vectors(S: Tensor, **vectors: Tensor) -> None:
    """Type and rank checks of one step's arguments (before they gain a sequence axis)."""
    as_tensor(S, "S")
    check_min_rank(S, 2, "S", "(..., d_k, d_v)")
    for symbol, x in vectors.items():
        as_tensor(x, symbol)
        check_min_rank(x, 0 if symbol == "beta" else 1, symbol, "(...)" if symbol == "beta" else "(..., d)")


@catalogued("extra:delta-rule", "extra:gated-delta-rule")
def delta_rule_step(
    S: Tensor, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """One step of the (gated) delta rule: ``S_t = alpha (I - beta k k^T) S + beta k v^T``, ``o_t = S_t^T q``.

    Computed as ``S_t = alpha S + beta k (v - alpha S^T k)^T``; ``alpha = exp(g)`` (1 when g is None).

    Args:
        S: the state ``S_{t-1}``.
        q: the query ``q_t``.
        k: the key ``k_t``.
        v: the value ``v_t``.
        beta: the writing strength ``beta_t``.
        g: the log-decay ``g_t <= 0`` (Gated DeltaNet), or None (DeltaNet).

    Shape:
        S ``(..., d_k, d_v)``; q, k ``(..., d_k)``; v ``(..., d_v)``; beta, g ``(...)``.
        Returns o ``(..., d_v)`` and the new state ``(..., d_k, d_v)``.

    Returns:
        ``(o_t, S_t)``.

    Raises:
        ValueError: for shapes that do not fit, mixed dtypes, or a positive g.
    """
    _check_vectors(S, q=q, k=k, v=v, beta=beta)
    g, S = _check_sequence(q[..., None, :], k[..., None, :], v[..., None, :], beta[..., None],
                           None if g is None else g[..., None], S)  # fmt: skip
    return _step(S, q, k, v, beta, g[..., 0])


def _step(S: Tensor, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, g: Tensor) -> tuple[Tensor, Tensor]:
    """:func:`delta_rule_step` on checked inputs (g a tensor)."""
    alpha = g.exp()[..., None, None]
    S = alpha * S
    delta = beta[..., None] * (v - (k[..., None, :] @ S)[..., 0, :])  # beta (v - alpha S^T k)
    S = S + k[..., :, None] * delta[..., None, :]
    return (q[..., None, :] @ S)[..., 0, :], S


@catalogued("extra:delta-rule", "extra:gated-delta-rule")
def delta_rule_recurrent(
    Q: Tensor, K: Tensor, V: Tensor, beta: Tensor, g: Tensor | None = None, S0: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """The (gated) delta rule by a loop over tokens (:func:`delta_rule_step` at each ``t``).

    Args:
        Q: the queries ``q_t`` (rows).
        K: the keys ``k_t``.
        V: the values ``v_t``.
        beta: the writing strengths ``beta_t``.
        g: the log-decays ``g_t <= 0``, or None (DeltaNet: no decay).
        S0: the initial state (default zeros).

    Shape:
        Q, K ``(..., n, d_k)``; V ``(..., n, d_v)``; beta, g ``(..., n)``; S0 ``(..., d_k, d_v)``.
        Returns O ``(..., n, d_v)`` and the final state ``(..., d_k, d_v)``.

    Returns:
        ``(O, S_n)``: the outputs ``o_t = S_t^T q_t`` and the last state.

    Raises:
        ValueError: for shapes that do not fit, mixed dtypes, a positive g, or an output that overflows
            with finite inputs.
    """
    g, S = _check_sequence(Q, K, V, beta, g, S0)
    outputs = []
    for t in range(K.shape[-2]):
        o, S = _step(S, Q[..., t, :], K[..., t, :], V[..., t, :], beta[..., t], g[..., t])
        outputs.append(o)
    O = torch.stack(outputs, -2) if outputs else V.new_zeros(V.shape)
    return _refuse_overflow(O, S, Q, K, V, beta, g, S0)


def _chunk(Q: Tensor, K: Tensor, V: Tensor, beta: Tensor, g: Tensor, S0: Tensor) -> tuple[Tensor, Tensor]:
    """One chunk of :func:`delta_rule_chunked` (the module docstring's equations)."""
    c = K.shape[-2]
    gamma = g.cumsum(-1)  # gamma_r: the log of Gamma_r
    causal = causal_mask(c, device=K.device)
    # D_{ri} = Gamma_r / Gamma_i where i <= r; zero above the diagonal (exp of -inf, never of a large positive)
    log_D = torch.where(causal, gamma[..., :, None] - gamma[..., None, :], -math.inf)
    D = log_D.exp()
    strict = causal_mask(c, device=K.device, offset=-1)
    A = torch.where(strict, beta[..., :, None] * D * (K @ K.transpose(-1, -2)), 0.0)
    I_plus_A = A + torch.eye(c, dtype=K.dtype, device=K.device)
    T_rhs = torch.cat([beta[..., None] * V, (beta * gamma.exp())[..., None] * K], -1)  # diag(beta)[V, diag(Gamma) K]
    work = torch.promote_types(K.dtype, torch.float32)  # torch has no half-precision triangular solve
    UW = torch.linalg.solve_triangular(I_plus_A.to(work), T_rhs.to(work), upper=False, unitriangular=True)
    UW = UW.to(K.dtype)
    U, W = UW[..., : V.shape[-1]], UW[..., V.shape[-1] :]
    Delta = U - W @ S0  # the pseudo-values
    intra = (Q @ K.transpose(-1, -2)) * D  # D is zero where the causal mask is False: no softmax, no future
    O = gamma.exp()[..., None] * (Q @ S0) + intra @ Delta
    tail = (gamma[..., -1:] - gamma).exp()  # Gamma_C / Gamma_i
    S = gamma[..., -1, None, None].exp() * S0 + (tail[..., None] * K).transpose(-1, -2) @ Delta
    return O, S


@catalogued("extra:delta-rule", "extra:gated-delta-rule")
def delta_rule_chunked(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    beta: Tensor,
    g: Tensor | None = None,
    S0: Tensor | None = None,
    chunk_size: int = 64,
) -> tuple[Tensor, Tensor]:
    """The (gated) delta rule in chunks, with the WY / UT representation inside each chunk.

    Inside a chunk of ``c`` tokens with carried state ``S_0`` (module docstring):
    ``(I + A) [U, W] = diag(beta) [V, diag(Gamma) K]`` with
    ``A_{ri} = beta_r (Gamma_r / Gamma_i) k_r . k_i`` for ``i < r``; pseudo-values
    ``Delta = U - W S_0``; outputs ``diag(Gamma) Q S_0 + (Q K^T * D * M) Delta``; next state
    ``Gamma_c S_0 + K^T diag(Gamma_c / Gamma) Delta``. The last chunk may be shorter.

    Args:
        Q: the queries ``q_t`` (rows).
        K: the keys ``k_t``.
        V: the values ``v_t``.
        beta: the writing strengths ``beta_t``.
        g: the log-decays ``g_t <= 0``, or None (DeltaNet: no decay).
        S0: the initial state (default zeros).
        chunk_size: ``C``, the tokens per chunk (any integer >= 1; it need not divide n).

    Shape:
        Q, K ``(..., n, d_k)``; V ``(..., n, d_v)``; beta, g ``(..., n)``; S0 ``(..., d_k, d_v)``.
        Returns O ``(..., n, d_v)`` and the final state ``(..., d_k, d_v)``.

    Returns:
        ``(O, S_n)``, equal to :func:`delta_rule_recurrent`'s to rounding.

    Raises:
        ValueError: for shapes that do not fit, mixed dtypes, a positive g, chunk_size < 1, or an output
            that overflows with finite inputs.
    """
    check_integers("delta_rule_chunked", minimum=1, chunk_size=chunk_size)
    g, S = _check_sequence(Q, K, V, beta, g, S0)
    outputs = []
    for start in range(0, K.shape[-2], chunk_size):
        part = slice(start, start + chunk_size)
        O, S = _chunk(Q[..., part, :], K[..., part, :], V[..., part, :], beta[..., part], g[..., part], S)
        outputs.append(O)
    O = torch.cat(outputs, -2) if outputs else V.new_zeros(V.shape)
    return _refuse_overflow(O, S, Q, K, V, beta, g, S0)


@catalogued(
    "extra:delta-rule", title="The delta rule (DeltaNet): S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T"
)
def delta_rule(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    beta: Tensor,
    S0: Tensor | None = None,
    *,
    form: DeltaForm = "chunked",
    chunk_size: int = 64,
) -> tuple[Tensor, Tensor]:
    """The delta rule (DeltaNet), ``S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T``, ``o_t = S_t^T q_t``.

    Args:
        Q: the queries ``q_t`` (rows).
        K: the keys ``k_t``.
        V: the values ``v_t``.
        beta: the writing strengths ``beta_t``.
        S0: the initial state (default zeros).
        form: ``"chunked"`` (:func:`delta_rule_chunked`) or ``"recurrent"`` (:func:`delta_rule_recurrent`).
        chunk_size: ``C`` for the chunked form.

    Shape:
        Q, K ``(..., n, d_k)``; V ``(..., n, d_v)``; beta ``(..., n)``; S0 ``(..., d_k, d_v)``.
        Returns O ``(..., n, d_v)`` and the final state ``(..., d_k, d_v)``.

    Returns:
        ``(O, S_n)``.

    Raises:
        ValueError: for an unknown form, or as :func:`delta_rule_chunked`.
    """
    _check_form(form)
    if form == "recurrent":
        return delta_rule_recurrent(Q, K, V, beta, None, S0)
    return delta_rule_chunked(Q, K, V, beta, None, S0, chunk_size)


@catalogued(
    "extra:gated-delta-rule",
    title="The gated delta rule (Gated DeltaNet): S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T",
)
def gated_delta_rule(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    beta: Tensor,
    g: Tensor,
    S0: Tensor | None = None,
    *,
    form: DeltaForm = "chunked",
    chunk_size: int = 64,
) -> tuple[Tensor, Tensor]:
    """The gated delta rule, ``S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T``, ``alpha_t = exp(g_t)``.

    Args:
        Q: the queries ``q_t`` (rows).
        K: the keys ``k_t``.
        V: the values ``v_t``.
        beta: the writing strengths ``beta_t``.
        g: the log-decays ``g_t <= 0``.
        S0: the initial state (default zeros).
        form: ``"chunked"`` (:func:`delta_rule_chunked`) or ``"recurrent"`` (:func:`delta_rule_recurrent`).
        chunk_size: ``C`` for the chunked form.

    Shape:
        Q, K ``(..., n, d_k)``; V ``(..., n, d_v)``; beta, g ``(..., n)``; S0 ``(..., d_k, d_v)``.
        Returns O ``(..., n, d_v)`` and the final state ``(..., d_k, d_v)``.

    Returns:
        ``(O, S_n)``.

    Raises:
        ValueError: for an unknown form, a missing g, or as :func:`delta_rule_chunked`.
    """
    _check_form(form)
    if g is None:
        raise ValueError("gated_delta_rule needs the log-decays g of shape (..., n); use delta_rule without a gate")
    if form == "recurrent":
        return delta_rule_recurrent(Q, K, V, beta, g, S0)
    return delta_rule_chunked(Q, K, V, beta, g, S0, chunk_size)


@catalogued("extra:delta-rule")
def least_squares_step(S: Tensor, k: Tensor, v: Tensor, beta: Tensor) -> Tensor:
    """One gradient-descent step of size beta on ``L(S) = 1/2 ||S^T k - v||^2``: ``S - beta k (S^T k - v)^T``.

    This is the delta rule's update written as online learning: the gradient of ``L`` is
    ``k (S^T k - v)^T``, so the step equals :func:`delta_rule_step`'s new state.

    Args:
        S: the state (a linear map from keys to values).
        k: the key.
        v: the value the state should return for ``k``.
        beta: the step size.

    Shape:
        S ``(..., d_k, d_v)``; k ``(..., d_k)``; v ``(..., d_v)``; beta ``(...)``; returns S's shape.

    Returns:
        The state after the step.

    Raises:
        ValueError: for shapes that do not fit or mixed dtypes.
    """
    _check_vectors(S, k=k, v=v, beta=beta)
    _check_sequence(k[..., None, :], k[..., None, :], v[..., None, :], beta[..., None], None, S)
    residual = (k[..., None, :] @ S)[..., 0, :] - v  # S^T k - v
    return S - beta[..., None, None] * k[..., :, None] * residual[..., None, :]


def l2_normalise(x: Tensor, eps: float = L2_EPS) -> Tensor:
    """Scale each row to unit L2 norm as FLA and ``transformers`` do: ``x / sqrt(||x||^2 + eps)``.

    Args:
        x: the rows.
        eps: added to the squared norm.

    Shape:
        x ``(..., d)``; returns the same shape.

    Returns:
        The normalised rows (norm slightly below 1 for ``eps > 0``).

    Raises:
        ValueError: for a non-positive eps.
    """
    as_tensor(x, "x")
    check_positive("l2_normalise", eps=eps)
    if x.shape[-1] == 0:
        return x
    # ||x|| as max|x_i| ||x / max|x_i| ||, and hypot(||x||, sqrt(eps)) = sqrt(||x||^2 + eps): nothing is squared
    # at the scale of x (float32 overflows at 1e19 squared)
    top = x.abs().amax(-1, keepdim=True)
    top = torch.where(top > 0, top, torch.ones((), dtype=x.dtype, device=x.device))
    norm = top * torch.linalg.vector_norm(x / top, dim=-1, keepdim=True)
    return x / torch.hypot(norm, torch.full((), math.sqrt(eps), dtype=x.dtype, device=x.device))


class DeltaNetState(NamedTuple):
    """What :meth:`DeltaNetLayer.decode` carries between calls.

    Args:
        conv: the last ``short_conv - 1`` projected ``[q; k; v]`` rows before the convolution
            ``(B, short_conv - 1, channels)``, or None without a short convolution.
        S: the per-head states ``(B, h, d_k, d_v)``.
    """

    conv: Tensor | None
    S: Tensor


@catalogued("extra:delta-rule", "extra:gated-delta-rule")
class DeltaNetLayer(nn.Module):
    """A causal token mixer: DeltaNet or Gated DeltaNet with per-head projections, ``(B, n, d) -> (B, n, d)``.

    Per token: ``q, k, v = W_Q x, W_K x, W_V x`` (optionally through a causal depthwise
    convolution of ``short_conv`` taps and SiLU, over the concatenation ``[q; k; v]``), split
    into ``h`` heads (:func:`~attnsurvey.query_related.multihead.split_heads`); ``q`` and ``k``
    L2-normalised per head (:func:`l2_normalise`) and ``q`` scaled by ``1/sqrt(d_k)``;
    ``beta = sigmoid(W_beta x)`` per head; with ``gated``, ``g = -exp(A_log) softplus(W_a x +
    dt_bias)`` per head (Mamba-2's parametrisation, ``g <= 0``). The heads run the rule
    (:func:`delta_rule_chunked` or :func:`delta_rule_recurrent`); with ``output_gate`` each
    head's output is RMS-normalised and multiplied by ``SiLU(W_G x)``; heads are merged and
    projected by ``W_O``.

    With ``d_k = d_v = d_model / n_heads`` (the default), ``short_conv=None`` and
    ``output_gate=False`` the layer has ``4 d_model^2 + n_heads d_model`` parameters
    (``W_Q, W_K, W_V, W_O`` and ``W_beta``); ``gated`` adds ``n_heads d_model + 2 n_heads``
    (``W_a``, ``A_log``, ``dt_bias``).

    Args:
        d_model: the width.
        n_heads: ``h``.
        gated: Gated DeltaNet (True) or DeltaNet (False).
        short_conv: the taps of the short convolution, or None.
        output_gate: the gated RMSNorm on each head's output.
        qk_norm: ``"l2"`` or None (queries and keys as projected).
        d_k: the per-head key size (default ``d_model / n_heads``).
        d_v: the per-head value size (default ``d_model / n_heads``).
        chunk_size: ``C`` of the chunked form.
        norm_eps: the epsilon of the output RMSNorm.
        device: where to build the parameters.
        dtype: their dtype.

    Shape:
        x ``(B, n, d_model)``; returns ``(B, n, d_model)``.

    Raises:
        ValueError: for sizes below 1, ``n_heads`` not dividing ``d_model`` (without d_k and d_v),
            or an unknown qk_norm.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        gated: bool,
        short_conv: int | None = None,
        output_gate: bool = False,
        qk_norm: Literal["l2"] | None = "l2",
        d_k: int | None = None,
        d_v: int | None = None,
        chunk_size: int = 64,
        norm_eps: float = 1e-6,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_integers("DeltaNetLayer", minimum=1, d_model=d_model, n_heads=n_heads, chunk_size=chunk_size)
        check_integers("DeltaNetLayer", minimum=1, allow_none=True, short_conv=short_conv, d_k=d_k, d_v=d_v)
        check_positive("DeltaNetLayer", norm_eps=norm_eps)
        if qk_norm not in ("l2", None):
            raise ValueError(f"qk_norm must be 'l2' or None, got {qk_norm!r}")
        if (d_k is None or d_v is None) and d_model % n_heads:
            raise ValueError(f"n_heads={n_heads} must divide d_model={d_model} (or give d_k and d_v)")
        self.h, self.gated, self.qk_norm, self.chunk_size = n_heads, gated, qk_norm, chunk_size
        self.d_k = d_model // n_heads if d_k is None else d_k
        self.d_v = d_model // n_heads if d_v is None else d_v
        kw: dict[str, Any] = {"device": device, "dtype": dtype}
        hk, hv = n_heads * self.d_k, n_heads * self.d_v
        self.W_Q = nn.Linear(d_model, hk, bias=False, **kw)
        self.W_K = nn.Linear(d_model, hk, bias=False, **kw)
        self.W_V = nn.Linear(d_model, hv, bias=False, **kw)
        self.W_O = nn.Linear(hv, d_model, bias=False, **kw)
        self.W_beta = nn.Linear(d_model, n_heads, bias=False, **kw)
        self.W_a = nn.Linear(d_model, n_heads, bias=False, **kw) if gated else None
        # A in [1, 16] and dt in [0.001, 0.1], as Mamba-2 and Gated DeltaNet initialise them
        self.A_log = nn.Parameter(torch.empty(n_heads, **kw).uniform_(0, math.log(16))) if gated else None
        dt = torch.empty(n_heads, **kw).uniform_(math.log(1e-3), math.log(0.1)).exp()
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt))) if gated else None  # softplus^{-1}(dt)
        channels = 2 * hk + hv
        self.conv = nn.Conv1d(channels, channels, short_conv, groups=channels, bias=False, **kw) if short_conv else None
        self.W_G = nn.Linear(d_model, hv, bias=False, **kw) if output_gate else None
        self.norm = nn.RMSNorm(self.d_v, eps=norm_eps, **kw) if output_gate else None

    def new_state(self, batch: int) -> DeltaNetState:
        """An empty decoding state: zero convolution history and zero per-head states.

        Args:
            batch: ``B``.

        Returns:
            A :class:`DeltaNetState` on the layer's device and dtype.

        Raises:
            ValueError: for a negative batch.
        """
        check_integers("DeltaNetLayer.new_state", minimum=0, batch=batch)
        w = self.W_Q.weight
        conv = None if self.conv is None else w.new_zeros(batch, self.conv.kernel_size[0] - 1, self.conv.in_channels)
        return DeltaNetState(conv, w.new_zeros(batch, self.h, self.d_k, self.d_v))

    def _mix(self, x: Tensor, state: DeltaNetState, form: DeltaForm) -> tuple[Tensor, DeltaNetState]:
        qkv = torch.cat([self.W_Q(x), self.W_K(x), self.W_V(x)], -1)
        conv_state = None
        if self.conv is not None and state.conv is not None:
            history = torch.cat([state.conv, qkv], -2)  # the causal window: earlier rows first, zeros at the start
            conv_state = history[..., history.shape[-2] - state.conv.shape[-2] :, :]
            qkv = F.silu(F.conv1d(history.transpose(-1, -2), self.conv.weight, groups=self.conv.groups)).transpose(
                -1, -2
            )
        hk = self.h * self.d_k
        q, k, v = (split_heads(part, self.h) for part in qkv.split([hk, hk, self.h * self.d_v], -1))
        if self.qk_norm == "l2":
            q, k = l2_normalise(q), l2_normalise(k)
        q = q / math.sqrt(self.d_k)
        beta = torch.sigmoid(self.W_beta(x)).transpose(-1, -2)  # (B, h, n)
        g = None
        if self.W_a is not None and self.A_log is not None and self.dt_bias is not None:
            g = (-self.A_log.exp() * F.softplus(self.W_a(x) + self.dt_bias)).transpose(-1, -2)
        if form == "recurrent":
            o, S = delta_rule_recurrent(q, k, v, beta, g, state.S)
        else:
            o, S = delta_rule_chunked(q, k, v, beta, g, state.S, self.chunk_size)
        if self.W_G is not None and self.norm is not None:
            o = self.norm(o) * F.silu(split_heads(self.W_G(x), self.h))
        return self.W_O(merge_heads(o)), DeltaNetState(conv_state, S)

    def _check_x(self, x: Tensor) -> None:
        as_tensor(x, "x")
        d = self.W_Q.in_features
        if x.dim() != 3 or x.shape[-1] != d:
            raise ValueError(f"x must have shape (B, n, d_model={d}), got {tuple(x.shape)}")

    def forward(self, x: Tensor, form: DeltaForm = "chunked") -> Tensor:
        """Mix the tokens causally, from an empty state.

        Args:
            x: the inputs.
            form: ``"chunked"`` or ``"recurrent"`` (the same outputs to rounding).

        Shape:
            x ``(B, n, d_model)``; returns ``(B, n, d_model)``.

        Returns:
            The outputs; row ``t`` depends on rows ``<= t`` only.

        Raises:
            ValueError: for a wrong shape or an unknown form.
        """
        self._check_x(x)
        _check_form(form)
        return self._mix(x, self.new_state(x.shape[0]), form)[0]

    def decode(self, x: Tensor, state: DeltaNetState | None = None) -> tuple[Tensor, DeltaNetState]:
        """Continue from a state: the outputs of the next rows and the state after them (recurrent form).

        Args:
            x: the next rows (one token when decoding).
            state: the state after the rows before (default: empty).

        Shape:
            x ``(B, n, d_model)``; returns ``(B, n, d_model)`` and the new state.

        Returns:
            ``(outputs, state)``.

        Raises:
            ValueError: for a wrong shape.
        """
        self._check_x(x)
        state = self.new_state(x.shape[0]) if state is None else state
        return self._mix(x, state, "recurrent")


__all__ = [
    "FORMS",
    "L2_EPS",
    "DeltaForm",
    "DeltaNetLayer",
    "DeltaNetState",
    "delta_rule",
    "delta_rule_chunked",
    "delta_rule_recurrent",
    "delta_rule_step",
    "gated_delta_rule",
    "l2_normalise",
    "least_squares_step",
]
