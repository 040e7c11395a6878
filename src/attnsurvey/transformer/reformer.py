"""Reformer: LSH attention and reversible residual layers (Kitaev et al., 2020).

*LSH attention.* Queries and keys are shared (``K = Q / ||Q||``), so a
token's most similar keys are the tokens closest to it in angle. A random
rotation hashes every vector into one of ``n_buckets`` buckets,
``hash(x) = argmax([x R; -x R])``; nearby vectors tend to share a bucket.
Tokens are sorted by bucket, cut into chunks of ``m``, and each chunk attends
to itself and the previous chunk, only within a bucket: cost ``O(n m)``
instead of ``O(n^2)``. A token attends to itself only if nothing else is
available (its self score is set to ``-1e5``).

*Reversible layers.* ``y_1 = x_1 + F(x_2)``, ``y_2 = x_2 + G(y_1)`` can be
inverted exactly, ``x_2 = y_2 - G(y_1)``, ``x_1 = y_1 - F(x_2)``, so the
backward pass recomputes each layer's input from its output instead of
storing activations for every layer.

Shapes: ``...`` leading batch axes, n tokens, d shared query/key size, d_v value size, m chunk size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from .._checks import as_tensor, check_dim_equal, check_index_range, check_min_rank
from ..attention import attend
from ..catalog import catalogued
from ..masking import require_boolean_mask, zero_masked

CHAPTER = "chapters/ch03_3_4_transformer_variants.ipynb"

SELF_SCORE = -1e5


def self_score(dtype: torch.dtype) -> float:
    """The score of a token with itself in shared-QK attention.

    It is ``-1e5``, or half the dtype's minimum where -1e5 does not fit (float16),
    so it stays above the mask fill.

    Args:
        dtype: the dtype of the scores.

    Returns:
        The self-score as a Python float.
    """
    return max(SELF_SCORE, torch.finfo(dtype).min / 2)


def random_rotations(d: int, n_buckets: int, generator: torch.Generator | None = None) -> Tensor:
    """A random projection ``R`` for :func:`lsh_hash`.

    Args:
        d: the width of the hashed vectors.
        n_buckets: the number of buckets, 1 or even.
        generator: the random generator (None: torch's global one).

    Shape:
        - Output: ``(d, n_buckets // 2)``.

    Returns:
        The projection ``R``.

    Raises:
        ValueError: unless n_buckets is 1 or even.
    """
    if n_buckets < 1 or (n_buckets > 1 and n_buckets % 2):
        raise ValueError(f"n_buckets must be 1 or an even number, got n_buckets={n_buckets}")
    return torch.randn(d, max(n_buckets // 2, 1), generator=generator)


@catalogued(
    "extra:reformer-lsh",
    title="Reformer LSH attention: angular hashing, sort, chunk, attend within buckets (shared QK)",
)
def lsh_hash(X: Tensor, R: Tensor, n_buckets: int) -> Tensor:
    """Angular LSH buckets ``argmax([x R; -x R])`` for the rows of X.

    With ``n_buckets = 1`` every vector lands in bucket 0.

    Args:
        X: the vectors to hash.
        R: the random projection (see :func:`random_rotations`).
        n_buckets: the number of buckets.

    Shape:
        - X: ``(..., n, d)``; R: ``(d, n_buckets/2)``.
        - Output: ``(..., n)`` integers in ``[0, n_buckets)``.

    Returns:
        The bucket of every row.

    Raises:
        ValueError: if R does not have shape ``(d, n_buckets/2)``.
        TypeError: if X is not a floating-point tensor.
    """
    if n_buckets == 1:
        return torch.zeros(X.shape[:-1], dtype=torch.long, device=X.device)
    if R.shape != (X.shape[-1], n_buckets // 2):
        raise ValueError(f"R must have shape (d, n_buckets/2) = {(X.shape[-1], n_buckets // 2)}, got {tuple(R.shape)}")
    if not X.is_floating_point():
        raise TypeError(f"X must be a floating-point tensor for LSH hashing (rotations are real), got dtype={X.dtype}")
    proj = X @ R.to(X.dtype)
    return torch.cat([proj, -proj], dim=-1).argmax(-1)


def _shared_scores(Qc: Tensor, Kc: Tensor) -> Tensor:
    # each key row's length, computed after dividing the row by its largest |entry| so that the squares cannot
    # overflow (a row of entries near 1e20 has a float32 length, but Kc.norm() would return inf and zero the key)
    peak = Kc.abs().amax(-1, keepdim=True).clamp_min(torch.finfo(Kc.dtype).tiny)
    Kn = Kc / (peak * (Kc / peak).norm(dim=-1, keepdim=True)).clamp_min(1e-6)
    return Qc @ Kn.transpose(-1, -2) / math.sqrt(Qc.shape[-1])


@catalogued("extra:reformer-lsh")
def shared_qk_attention(QK: Tensor, V: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Full shared-QK attention, the target LSH attention approximates.

    Keys are the unit-normalised copies of the queries. A token's score with itself
    is ``-1e5`` (used only when nothing else is allowed).

    Args:
        QK: the queries.
        V: the values.
        mask: boolean, ``True`` = may attend.

    Shape:
        - QK: ``(..., n, d)``; V: ``(..., n, d_v)``; mask: ``(..., n, n)``.
        - Output: ``(c (..., n, d_v), a (..., n, n))``.

    Returns:
        ``(c, a)``: the contexts and the weights.

    Raises:
        ValueError: on shape mismatches or a mask that is not boolean.
        TypeError: if QK or V is not a floating-point tensor.
    """
    require_boolean_mask(mask, "shared_qk_attention")
    as_tensor(QK, "QK")
    as_tensor(V, "V")
    check_min_rank(QK, 2, "QK", "(..., n, d)")
    check_dim_equal(QK.shape[-2], V.shape[-2], "shared-QK attention", "n of QK", "n of V")
    QK, V = zero_masked(QK, mask), zero_masked(V, mask)  # a padded token holding NaN is inert in the gradients too
    n = QK.shape[-2]
    eye = torch.eye(n, dtype=torch.bool, device=QK.device)

    def score(Q: Tensor, K: Tensor) -> Tensor:
        return _shared_scores(Q, K).masked_fill(eye, self_score(Q.dtype))

    return attend(QK, QK, V, None if mask is None else (mask if mask.dim() > 2 else mask[None]), score)


@catalogued("extra:reformer-lsh")
def lsh_attention(
    QK: Tensor,
    V: Tensor,
    n_buckets: int,
    chunk_size: int,
    R: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """LSH attention (one hash round): sort by bucket, chunk, attend within bucket to this and the previous chunk.

    With one bucket and ``m = n`` it is exactly :func:`shared_qk_attention`;
    ``n = 0`` gives empty results.

    Args:
        QK: the shared queries/keys.
        V: the values.
        n_buckets: the number of buckets, 1 or even.
        chunk_size: the chunk length ``m``; must divide ``n``.
        R: the rotations for :func:`lsh_hash` (drawn with ``generator`` if None).
        generator: the random generator used to draw ``R``.

    Shape:
        - QK: ``(..., n, d)``; V: ``(..., n, d_v)``; R: ``(d, n_buckets/2)``.
        - Output: ``(c (..., n, d_v), buckets (..., n))``.

    Returns:
        ``(c, buckets)``: the contexts and each token's bucket.

    Raises:
        ValueError: if ``m`` does not divide ``n``, QK has rank < 2, the ``n`` of QK and V
            differ, ``R`` has the wrong shape or ``n_buckets`` is neither 1 nor even.
        TypeError: if QK or V is not a floating-point tensor.
    """
    as_tensor(QK, "QK")
    as_tensor(V, "V")
    check_min_rank(QK, 2, "QK", "(..., n, d)")
    check_dim_equal(QK.shape[-2], V.shape[-2], "LSH attention", "n of QK", "n of V")
    n, d = QK.shape[-2], QK.shape[-1]
    if chunk_size < 1 or n % chunk_size:
        raise ValueError(f"chunk size m={chunk_size} must divide the sequence length n={n}")
    if R is None:
        R = random_rotations(d, n_buckets, generator)
    buckets = lsh_hash(QK, R, n_buckets)
    if n == 0:  # no tokens: empty contexts
        return V.new_zeros(*V.shape), buckets
    pos = torch.arange(n, device=QK.device).expand_as(buckets)
    order = (buckets * n + pos).argsort(dim=-1)  # sort by bucket, then position
    gather = lambda T, idx: T.gather(-2, idx[..., None].expand(*idx.shape, T.shape[-1]))  # noqa: E731
    sq, sv = gather(QK, order), gather(V, order)
    sb, sp = buckets.gather(-1, order), pos.gather(-1, order)
    c, m = n // chunk_size, chunk_size
    cq = sq.reshape(*sq.shape[:-2], c, m, d)
    cv = sv.reshape(*sv.shape[:-2], c, m, V.shape[-1])
    cb, cp = sb.reshape(*sb.shape[:-1], c, m), sp.reshape(*sp.shape[:-1], c, m)
    # keys of a chunk: the previous chunk, then the chunk itself
    kq = torch.cat([cq.roll(1, dims=-3), cq], dim=-2)
    kv = torch.cat([cv.roll(1, dims=-3), cv], dim=-2)
    kb = torch.cat([cb.roll(1, dims=-2), cb], dim=-1)
    kp = torch.cat([cp.roll(1, dims=-2), cp], dim=-1)
    allowed = cb[..., :, None] == kb[..., None, :]
    first = torch.zeros(c, 1, 2 * m, dtype=torch.bool, device=QK.device)
    first[0, :, :m] = True  # chunk 0 has no previous chunk (roll would wrap around)
    allowed = allowed & ~first
    same = cp[..., :, None] == kp[..., None, :]

    def score(Q: Tensor, K: Tensor) -> Tensor:  # (..., c, m, 2m): shared-QK scores, a token's own score lowered
        return _shared_scores(Q, K).masked_fill(same, self_score(Q.dtype))

    ctx, _ = attend(cq, kq, kv, allowed, score, need_weights=False)
    out_sorted = ctx.reshape(*sv.shape)
    out = torch.empty_like(out_sorted).scatter_(-2, order[..., None].expand_as(out_sorted), out_sorted)
    return out, buckets


def same_bucket_attention(QK: Tensor, V: Tensor, buckets: Tensor) -> tuple[Tensor, Tensor]:
    """Brute-force reference: shared-QK attention restricted to pairs in the same bucket, ``O(n^2)``.

    Args:
        QK: the shared queries/keys.
        V: the values.
        buckets: each token's bucket (e.g. from :func:`lsh_hash`).

    Shape:
        - QK: ``(..., n, d)``; V: ``(..., n, d_v)``; buckets: ``(..., n)``.
        - Output: ``(c (..., n, d_v), a (..., n, n))``.

    Returns:
        ``(c, a)``: the contexts and the weights.

    Raises:
        TypeError: if buckets is not an integer tensor.
        ValueError: as :func:`shared_qk_attention`, or if buckets is not ``(..., n)`` (QK without its width).
    """
    check_index_range(buckets, None, "buckets", "same_bucket_attention (bucket ids)")
    as_tensor(QK, "QK")
    if tuple(buckets.shape) != tuple(QK.shape[:-1]):
        raise ValueError(f"buckets must have shape (..., n) = {tuple(QK.shape[:-1])}, got {tuple(buckets.shape)}")
    mask = buckets[..., :, None] == buckets[..., None, :]
    return shared_qk_attention(QK, V, mask)


@catalogued(
    "extra:reversible-layers",
    title="Reversible residual layers: y1 = x1 + F(x2), y2 = x2 + G(y1), inverted in the backward pass",
)
def reversible_forward(x1: Tensor, x2: Tensor, f: nn.Module, g: nn.Module) -> tuple[Tensor, Tensor]:
    """A reversible residual block: ``y_1 = x_1 + F(x_2)``, ``y_2 = x_2 + G(y_1)``.

    Args:
        x1: the first half ``x_1``.
        x2: the second half ``x_2``.
        f: the module ``F``.
        g: the module ``G``.

    Shape:
        - x1, x2: ``(..., d/2)``.
        - Output: ``(y_1, y_2)``, each ``(..., d/2)``.

    Returns:
        ``(y_1, y_2)``.
    """
    y1 = x1 + f(x2)
    return y1, x2 + g(y1)


@catalogued("extra:reversible-layers")
def reversible_inverse(y1: Tensor, y2: Tensor, f: nn.Module, g: nn.Module) -> tuple[Tensor, Tensor]:
    """The exact inverse of :func:`reversible_forward`: ``x_2 = y_2 - G(y_1)``, ``x_1 = y_1 - F(x_2)``.

    Args:
        y1: the first output half ``y_1``.
        y2: the second output half ``y_2``.
        f: the module ``F``.
        g: the module ``G``.

    Shape:
        - y1, y2: ``(..., d/2)``.
        - Output: ``(x_1, x_2)``, each ``(..., d/2)``.

    Returns:
        ``(x_1, x_2)``.
    """
    x2 = y2 - g(y1)
    return y1 - f(x2), x2


def _undo_residual(fn: nn.Module, inp: Tensor, out: Tensor, d_out: Tensor, d_inp: Tensor) -> tuple[Tensor, Tensor]:
    """Invert one residual half-step ``out = other + fn(inp)`` inside the backward pass.

    Recomputes ``fn(inp)`` with gradients on and back-propagates ``d_out`` through
    it (which also accumulates the gradients of fn's parameters); returns the
    recovered ``other = out - fn(inp)`` and ``d_inp`` plus the gradient that
    reaches ``inp`` through ``fn``.
    """
    with torch.enable_grad():
        inp_ = inp.detach().requires_grad_(True)
        fn_out = fn(inp_)
        torch.autograd.backward(fn_out, d_out)
    with torch.no_grad():
        grad = inp_.grad  # None when fn ignores its input: then no gradient reaches inp through fn
        return out - fn_out, d_inp if grad is None else d_inp + grad


class _ReversibleFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, blocks: Sequence[tuple[nn.Module, nn.Module]], *params: Tensor) -> Tensor:
        with torch.no_grad():
            x1, x2 = x.chunk(2, dim=-1)
            for f, g in blocks:
                x1, x2 = reversible_forward(x1, x2, f, g)
            y = torch.cat([x1, x2], dim=-1)
        ctx.blocks = blocks
        ctx.save_for_backward(y)  # only the final output is kept
        return y

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Tensor) -> tuple[Tensor | None, ...]:
        (dy,) = grad_outputs  # one output, so one incoming gradient (variadic as torch declares it)
        (y,) = ctx.saved_tensors
        y1, y2 = y.chunk(2, dim=-1)
        dy1, dy2 = dy.chunk(2, dim=-1)
        for f, g in reversed(ctx.blocks):
            x2, dy1 = _undo_residual(g, y1, y2, dy2, dy1)  # y2 = x2 + G(y1)
            x1, dy2 = _undo_residual(f, x2, y1, dy1, dy2)  # y1 = x1 + F(x2)
            y1, y2 = x1, x2
        return (torch.cat([dy1, dy2], dim=-1), None, *([None] * len(ctx.needs_input_grad[2:])))


@catalogued("extra:reversible-layers")
class ReversibleSequence(nn.Module):
    """A stack of reversible blocks ``(F_i, G_i)`` acting on ``x = [x_1; x_2]`` (last axis split in half).

    With ``memory_saving=True`` forward stores only the final output for backward and
    reconstructs every layer's input on the way back; with ``False`` it runs plain
    autograd (for comparison). Both give the same output and gradients.

    Args:
        blocks: the pairs ``(F_i, G_i)``, each module mapping ``(..., d/2)`` to ``(..., d/2)``.
        memory_saving: reconstruct inputs in backward (True) or use plain autograd (False).

    Shape:
        - x: ``(..., d)`` with ``d`` even.
        - Output: ``(..., d)``.

    Raises:
        TypeError: if x is not a floating-point tensor.
        ValueError: if the width ``d`` is odd.
    """

    def __init__(self, blocks: Sequence[tuple[nn.Module, nn.Module]], memory_saving: bool = True) -> None:
        super().__init__()
        self.fs = nn.ModuleList(f for f, _ in blocks)
        self.gs = nn.ModuleList(g for _, g in blocks)
        self.memory_saving = memory_saving

    def forward(self, x: Tensor) -> Tensor:
        as_tensor(x, "x")
        check_min_rank(x, 1, "x", "(..., d)")
        if x.shape[-1] % 2:
            raise ValueError(f"a reversible layer splits the width in two halves; got odd width {x.shape[-1]}")
        blocks = list(zip(self.fs, self.gs))
        if self.memory_saving and torch.is_grad_enabled():
            return _ReversibleFunction.apply(x, blocks, *self.parameters())
        x1, x2 = x.chunk(2, dim=-1)
        for f, g in blocks:
            x1, x2 = reversible_forward(x1, x2, f, g)
        return torch.cat([x1, x2], dim=-1)

    def inverse(self, y: Tensor) -> Tensor:
        """Recover the input from the output, layer by layer."""
        as_tensor(y, "y")
        check_min_rank(y, 1, "y", "(..., d)")
        if y.shape[-1] % 2:
            raise ValueError(f"a reversible layer splits the width in two halves; got odd width {y.shape[-1]}")
        y1, y2 = y.chunk(2, dim=-1)
        for f, g in reversed(list(zip(self.fs, self.gs))):
            y1, y2 = reversible_inverse(y1, y2, f, g)
        return torch.cat([y1, y2], dim=-1)


def saved_activation_bytes(fn: Callable[..., object], *args: object) -> int:
    """Bytes of tensors autograd saves for backward while running ``fn(*args)`` (parameters excluded).

    Args:
        fn: the function to run.
        args: its positional arguments.

    Returns:
        The number of bytes saved for backward.
    """
    params: set[int] = set()  # data pointers of the parameters of the module arguments
    total = 0

    def pack(t: Tensor) -> Tensor:
        nonlocal total
        if not isinstance(t, nn.Parameter) and t.data_ptr() not in params:
            total += t.numel() * t.element_size()
        return t

    for a in args:
        if isinstance(a, nn.Module):
            params.update(p.data_ptr() for p in a.parameters())
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*args)
    return total
