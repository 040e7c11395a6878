"""Greedy and beam-search decoding for any autoregressive model (beyond the survey).

A decoder defines ``p(y_1..y_m) = prod_t p(y_t | y_<t)``. Greedy decoding
takes the most probable token at each step; beam search keeps the
``beam_width`` best prefixes (by summed log-probability) at every step. Width 1
is greedy; a width as large as the number of prefixes is exhaustive search.

The model is a callable ``step_log_probs(prefixes)``: prefixes ``(B, k, t)``
integer tokens (``B`` examples, ``k`` hypotheses each, starting with the begin
token) in, next-token log-probabilities ``(B, k, V)`` out, or the pair
``(log_probs (B, k, V), attention (B, k, n_x))`` when it also reports the
attention over the ``n_x`` source positions that produced them (needed only for
the coverage penalty).

Two ways to end a sequence:

* **Fixed length** (``eos=None``): every hypothesis has exactly ``length``
  tokens, as when the output length is known in advance.
* **End-of-sequence token** (``eos`` given): a hypothesis that emits ``eos`` is
  finished and set aside; the search stops when no unfinished hypothesis is
  left or after ``length`` tokens (the maximum length). Hypotheses still open
  at the maximum length are finished there too (as GNMT, fairseq and Hugging
  Face's beam search do), and the finished hypothesis with the highest score
  ``s(Y, X) = log P(Y | X) / lp(Y) + cp(X; Y)`` wins (Wu et al. 2016, GNMT),
  with the length penalty :func:`length_penalty` and the coverage penalty
  :func:`coverage_penalty`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from .._checks import as_tensor, require_tensor
from ..catalog import catalogued
from ..masking import check_boolean

CHAPTER = "chapters/ch06_4_trained_transformer.ipynb"

#: ``prefixes (B, k, t) -> log_probs (B, k, V)`` or ``(log_probs (B, k, V), attention (B, k, n_x))``.
StepFn = Callable[[Tensor], Tensor | tuple[Tensor, Tensor]]

#: The constant 5 of GNMT's length penalty ``((5 + |Y|) / (5 + 1))^alpha``.
LP_OFFSET = 5.0


@catalogued(
    "extra:length-penalty",
    title="Decoding with an end token: finished hypotheses, GNMT length penalty lp(Y) and coverage penalty cp(X; Y)",
)
def length_penalty(lengths: Tensor, alpha: float) -> Tensor:
    """GNMT's length penalty ``lp(Y) = (5 + |Y|)^alpha / (5 + 1)^alpha`` (Wu et al. 2016).

    A hypothesis is ranked by ``log P(Y | X) / lp(Y)``: the log-probability is
    negative and shrinks with every token, and dividing it by a penalty that
    grows with ``|Y|`` offsets that. ``alpha = 0`` gives ``lp = 1`` (no
    normalisation); ``alpha = 1`` divides by a length plus a constant.

    Args:
        lengths: ``|Y|``, the number of tokens of each hypothesis (the end token included).
        alpha: the exponent, ``alpha >= 0``.

    Shape:
        lengths: any shape ``S``.

    Returns:
        ``lp(Y)`` as float64, shape ``S``.

    Raises:
        ValueError: if ``alpha`` is negative or not finite, or a length is negative.
        TypeError: if ``lengths`` is not a tensor.
    """
    _check_alpha(alpha)
    require_tensor(lengths, "lengths")
    if lengths.numel() and bool((lengths < 0).any()):
        raise ValueError(f"length_penalty: lengths |Y| must be >= 0, got a length of {lengths.min().item()}")
    n = lengths.to(torch.float64)
    return ((LP_OFFSET + n) / (LP_OFFSET + 1.0)) ** alpha


@catalogued("extra:length-penalty")
def coverage_penalty(coverage: Tensor, beta: float, source_mask: Tensor | None = None) -> Tensor:
    """GNMT's coverage penalty ``cp(X; Y) = beta * sum_i log(min(sum_j p_ij, 1.0))`` (Wu et al. 2016).

    ``p_ij`` is the attention weight of output step ``j`` on source position
    ``i``; ``coverage`` holds the sums ``sum_j p_ij``. A source position that
    the output has attended to in total at least once costs nothing; one that
    it has barely looked at costs ``beta * log`` of its coverage (``-inf`` for
    coverage 0). Masked source positions (padding) cost nothing.

    Args:
        coverage: ``sum_j p_ij`` per source position.
        beta: the weight, ``beta >= 0`` (0 switches the penalty off).
        source_mask: boolean, ``True`` = may attend (a real source position); ``None``: all real.

    Shape:
        coverage: ``(..., n_x)``; source_mask: broadcastable to it.

    Returns:
        ``cp`` as float64, shape ``(...)``: 0 or negative.

    Raises:
        ValueError: if ``beta`` is negative or not finite, ``coverage`` holds a negative or NaN
            entry (sums of attention weights are >= 0), or ``source_mask`` is not boolean or
            does not broadcast to ``coverage`` without changing its shape.
        TypeError: if ``coverage`` is not a floating-point tensor (a list, NumPy array or
            integer tensor).
    """
    _check_weight(beta, "beta")
    as_tensor(coverage, "coverage")
    if coverage.dim() < 1:
        raise ValueError(f"coverage_penalty needs coverage of shape (..., n_x), got {tuple(coverage.shape)}")
    if bool((coverage < 0).any()) or bool(coverage.isnan().any()):
        raise ValueError(
            f"coverage_penalty needs coverage >= 0 (sums of attention weights), got a negative or NaN entry "
            f"in coverage of shape {tuple(coverage.shape)}"
        )
    if source_mask is not None:
        check_boolean(source_mask, "source_mask", "a real source position")
        try:
            fits = torch.broadcast_shapes(source_mask.shape, coverage.shape) == coverage.shape
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(
                f"coverage_penalty needs source_mask broadcastable to coverage (..., n_x) = {tuple(coverage.shape)}, "
                f"got source_mask {tuple(source_mask.shape)}"
            )
    return _coverage_penalty(coverage, beta, source_mask)


def _coverage_penalty(coverage: Tensor, beta: float, source_mask: Tensor | None = None) -> Tensor:
    """:func:`coverage_penalty` on trusted inputs (inside the search loops)."""
    term = coverage.to(torch.float64).clamp(max=1.0).log()
    if source_mask is not None:
        if source_mask.dtype != torch.bool:
            raise ValueError(f"source_mask must be boolean (True = a real source position), got {source_mask.dtype}")
        term = torch.where(source_mask, term, torch.zeros((), dtype=torch.float64))
    if beta == 0.0:
        return torch.zeros(term.shape[:-1], dtype=torch.float64)
    return beta * term.sum(-1)


def _check_alpha(alpha: float) -> None:
    _check_weight(alpha, "alpha (length penalty)")


def _check_weight(value: float, name: str) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def _check(batch: int, length: int, beam_width: int, eos: int | None, alpha: float, beta: float) -> None:
    if batch < 1 or length < 0 or beam_width < 1:
        raise ValueError(
            f"need batch >= 1, length >= 0, beam_width >= 1; got batch={batch}, length={length}, beam_width={beam_width}"
        )
    if eos is not None and length < 1:
        raise ValueError(f"with an end token the maximum length must be >= 1, got length={length}")
    _check_alpha(alpha)
    _check_weight(beta, "beta (coverage penalty)")


def _step(
    step_log_probs: StepFn, prefixes: Tensor, eos: int | None, need_attention: bool
) -> tuple[Tensor, Tensor | None]:
    out = step_log_probs(prefixes)
    lp, attn = out if isinstance(out, tuple) else (out, None)
    if lp.dim() != 3 or lp.shape[:2] != prefixes.shape[:2]:
        raise ValueError(
            f"step_log_probs must return (B, k, V) for prefixes {tuple(prefixes.shape)}, got {tuple(lp.shape)}"
        )
    if eos is not None and not 0 <= eos < lp.shape[-1]:
        raise ValueError(f"the end token eos={eos} is not in the vocabulary of V={lp.shape[-1]} tokens")
    if need_attention:
        if attn is None:
            raise ValueError("beta > 0 (coverage penalty) needs step_log_probs to return (log_probs, attention)")
        if attn.dim() != 3 or attn.shape[:2] != prefixes.shape[:2]:
            raise ValueError(
                f"the attention of step_log_probs must be (B, k, n_x) for prefixes {tuple(prefixes.shape)}, "
                f"got {tuple(attn.shape)}"
            )
    return lp.to(torch.float64), (attn.to(torch.float64) if need_attention and attn is not None else None)


def _score(
    log_p: Tensor, n: Tensor | int, coverage: Tensor | None, alpha: float, beta: float, mask: Tensor | None
) -> Tensor:
    s = log_p / length_penalty(torch.as_tensor(n), alpha)
    if coverage is not None and beta > 0:
        s = s + _coverage_penalty(coverage, beta, mask)
    return s


def _check_source_mask(source_mask: Tensor | None, batch: int) -> None:
    if source_mask is None:
        return
    if source_mask.dtype != torch.bool:
        raise ValueError(f"source_mask must be boolean (True = a real source position), got {source_mask.dtype}")
    if source_mask.dim() != 2 or source_mask.shape[0] != batch:
        raise ValueError(f"source_mask must be (B, n_x) with B={batch}, got {tuple(source_mask.shape)}")


@catalogued("extra:trained-transformer", "extra:length-penalty")
@torch.no_grad()
def greedy_search(
    step_log_probs: StepFn,
    bos: int,
    batch: int,
    length: int,
    *,
    eos: int | None = None,
    alpha: float = 0.0,
    beta: float = 0.0,
    source_mask: Tensor | None = None,
    pad: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Greedy decoding: ``y_t = argmax p(y_t | y_<t)`` until the end token or ``length`` tokens.

    Without ``eos`` every sequence has exactly ``length`` tokens. With ``eos`` a
    sequence ends with the first ``eos`` it emits (kept in the output), or is cut
    at ``length`` tokens; positions after its end hold ``pad``. The penalties do
    not change the greedy choice, only the returned score.

    Args:
        step_log_probs: the model (see the module docstring).
        bos: the begin token every prefix starts with.
        batch: ``B``, the number of examples decoded together.
        length: the number of tokens (``eos=None``) or the maximum number, ``eos`` included.
        eos: the end-of-sequence token, or ``None`` for fixed-length decoding.
        alpha: length-penalty exponent of :func:`length_penalty` (``>= 0``; 0 = none).
        beta: coverage-penalty weight of :func:`coverage_penalty` (``>= 0``; 0 = none).
        source_mask: boolean, ``True`` = may attend (a real source position, for the coverage penalty); ``None``: all real.
        pad: the token after a sequence's end (default ``eos``).

    Shape:
        source_mask: ``(B, n_x)``.

    Returns:
        ``(tokens (B, length), score (B,))``: the score is
        ``log P(Y) / lp(Y) + cp(X; Y)`` in float64 (the log-probability when
        ``alpha = beta = 0``).

    Raises:
        ValueError: for ``batch < 1``, ``length < 0`` (``< 1`` with ``eos``), a
            negative ``alpha`` or ``beta``, ``eos`` outside the vocabulary, a
            callable returning the wrong shape, or ``beta > 0`` without attention.
    """
    _check(batch, length, 1, eos, alpha, beta)
    _check_source_mask(source_mask, batch)
    fill = (eos if pad is None else pad) if eos is not None else 0
    seq = torch.full((batch, 1, 1), bos, dtype=torch.long)
    total = torch.zeros(batch, dtype=torch.float64)
    n = torch.zeros(batch, dtype=torch.long)
    done = torch.zeros(batch, dtype=torch.bool)
    coverage: Tensor | None = None
    for _ in range(length):
        if bool(done.all()):
            break
        lp, attn = _step(step_log_probs, seq, eos, beta > 0)
        best, tok = lp[:, 0].max(-1)
        tok = tok.masked_fill(done, fill)
        total = total + best.masked_fill(done, 0.0)
        if attn is not None:
            step_attn = attn[:, 0].masked_fill(done[:, None], 0.0)
            coverage = step_attn if coverage is None else coverage + step_attn
        n = n + (~done).long()
        if eos is not None:
            done = done | (tok == eos)
        seq = torch.cat([seq, tok[:, None, None]], dim=-1)
    tokens = torch.full((batch, length), fill, dtype=torch.long)
    tokens[:, : seq.shape[-1] - 1] = seq[:, 0, 1:]
    return tokens, _score(total, n, coverage, alpha, beta, source_mask)


@catalogued("extra:trained-transformer", "extra:length-penalty")
@torch.no_grad()
def beam_search(
    step_log_probs: StepFn,
    bos: int,
    batch: int,
    length: int,
    beam_width: int = 4,
    *,
    eos: int | None = None,
    alpha: float = 0.0,
    beta: float = 0.0,
    source_mask: Tensor | None = None,
    pad: int | None = None,
    finalize_at_length: bool = True,
) -> tuple[Tensor, Tensor]:
    """Beam search: keep the ``beam_width`` prefixes with the highest summed log-probability.

    At each step every kept prefix is extended by every token and the
    ``beam_width`` best extensions (over all prefixes of an example) survive.
    Without ``eos`` the search runs ``length`` steps and returns the best kept
    sequence. With ``eos``, a surviving extension that ends in ``eos`` is
    finished and set aside (the beam has one prefix fewer); the search stops
    when no prefix is left or after ``length`` steps. The prefixes still kept after
    ``length`` steps are finished there (``finalize_at_length=True``, as GNMT,
    fairseq and Hugging Face do) and compete with those that ended in ``eos``; the
    hypothesis with the highest score ``log P(Y) / lp(Y) + cp(X; Y)`` wins. With
    ``finalize_at_length=False`` they count only for an example with no hypothesis
    ended in ``eos`` (the behaviour before; a hypothesis cut at the limit is then
    a last resort).
    With ``beam_width = 1`` it is :func:`greedy_search`; with
    ``beam_width >= V^length`` no prefix is ever dropped and the search is exhaustive.

    Args:
        step_log_probs: the model (see the module docstring).
        bos: the begin token every prefix starts with.
        batch: ``B``, the number of examples decoded together.
        length: the number of tokens (``eos=None``) or the maximum number, ``eos`` included.
        beam_width: ``k``, the number of prefixes kept per example (``>= 1``).
        eos: the end-of-sequence token, or ``None`` for fixed-length decoding.
        alpha: length-penalty exponent of :func:`length_penalty` (``>= 0``; 0 = none).
        beta: coverage-penalty weight of :func:`coverage_penalty` (``>= 0``; 0 = none).
        source_mask: boolean, ``True`` = may attend (a real source position, for the coverage penalty); ``None``: all real.
        pad: the token after a sequence's end (default ``eos``).
        finalize_at_length: with ``eos``, the prefixes open at the maximum length are
            candidates beside the ended ones (default); False: only where none ended.

    Shape:
        source_mask: ``(B, n_x)``.

    Returns:
        ``(tokens (B, length), score (B,))``: the winning hypothesis (``eos``
        included, then ``pad``) and its score ``log P(Y) / lp(Y) + cp(X; Y)`` in
        float64 (the log-probability when ``alpha = beta = 0``).

    Raises:
        ValueError: for ``batch < 1``, ``length < 0`` (``< 1`` with ``eos``),
            ``beam_width < 1``, a negative ``alpha`` or ``beta``, ``eos`` outside
            the vocabulary, a callable returning the wrong shape, or ``beta > 0``
            without attention.
    """
    _check(batch, length, beam_width, eos, alpha, beta)
    _check_source_mask(source_mask, batch)
    fill = (eos if pad is None else pad) if eos is not None else 0
    neg_inf = torch.tensor(-torch.inf, dtype=torch.float64)
    seqs = torch.full((batch, 1, 1), bos, dtype=torch.long)
    raw = torch.zeros(batch, 1, dtype=torch.float64)  # summed log-probability per kept prefix; -inf = empty slot
    coverage: Tensor | None = None  # (B, k, n_x)
    best_score = torch.full((batch,), -torch.inf, dtype=torch.float64)
    best_tokens = torch.full((batch, length), fill, dtype=torch.long)
    found = torch.zeros(batch, dtype=torch.bool)
    mask = None if source_mask is None else source_mask[:, None, :]
    for t in range(length):
        if not bool(torch.isfinite(raw).any()):
            break
        lp, attn = _step(step_log_probs, seqs, eos, beta > 0)
        V = lp.shape[-1]
        cand = (raw[..., None] + lp).reshape(batch, -1)  # (B, k * V)
        top, idx = cand.topk(min(beam_width, cand.shape[-1]), dim=-1)
        parent, tok = idx // V, idx % V
        seqs = torch.cat([seqs.gather(1, parent[..., None].expand(-1, -1, seqs.shape[-1])), tok[..., None]], dim=-1)
        if attn is not None:
            step_cov = attn if coverage is None else coverage + attn
            coverage = step_cov.gather(1, parent[..., None].expand(-1, -1, step_cov.shape[-1]))
        alive = torch.isfinite(top)
        if eos is not None:
            ended = alive & (tok == eos)
            if bool(ended.any()):
                s = _score(top, t + 1, coverage, alpha, beta, mask).masked_fill(~ended, -torch.inf)
                s_best, i_best = s.max(-1)
                better = ended.any(-1) & (~found | (s_best > best_score))
                rows = better.nonzero().flatten()
                best_tokens[rows, : t + 1] = seqs[rows, i_best[rows], 1:]
                best_score = torch.where(better, s_best, best_score)
                found = found | ended.any(-1)
            alive = alive & ~ended
            # an example stops once no kept prefix can beat its best finished hypothesis: log P only falls
            # with each token, lp(Y) <= lp(length) and cp <= 0, so log P / lp(length) bounds every extension
            hopeless = ~alive | (top / length_penalty(torch.tensor(length), alpha) <= best_score[:, None])
            alive = alive & ~(found[:, None] & hopeless.all(-1, keepdim=True))
        raw = torch.where(alive, top, neg_inf)
    # the prefixes still open (at the maximum length) are finished: an example takes its best one where none
    # ended in eos (always, without eos) and, with finalize_at_length, where it scores higher than the best ended
    alive = torch.isfinite(raw)
    if length > 0 and bool(alive.any()):
        steps = seqs.shape[-1] - 1
        s = _score(raw, steps, coverage, alpha, beta, mask).masked_fill(~alive, -torch.inf)
        s_best, i_best = s.max(-1)
        take = alive.any(-1) & (~found | ((s_best > best_score) if finalize_at_length else False))
        rows = take.nonzero().flatten()
        best_tokens[rows, :steps] = seqs[rows, i_best[rows], 1:]
        best_score[rows] = s_best[rows]
    elif length == 0:
        best_score = torch.zeros(batch, dtype=torch.float64)
    return best_tokens, best_score
