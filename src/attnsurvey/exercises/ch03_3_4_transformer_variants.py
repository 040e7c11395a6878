"""Self-checks for the exercises of chapter §3.3.2 Transformer variants (``ch03_3_4_transformer_variants``).

Each ``check_ex<k>`` raises ``AssertionError`` with a hint on a wrong answer and
returns a short confirmation string on a right one; the references are computed
here from the definitions, never taken from the reader.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..transformer import local, reformer


def check_ex1(flops: Callable[[int, int, int], tuple[int, int]]) -> str:
    """Ex. 1: ``flops(n, k, d)`` is the pair (full, Linformer) of multiply-adds for one head.

    Full: ``Q K^T`` and ``A V``, ``2 n^2 d``. Linformer: ``E K`` and ``F V``
    (``k n d`` each) plus ``Q (EK)^T`` and ``A (FV)`` (``n k d`` each), ``4 n k d``.
    """
    for n, k, d in [(1024, 128, 64), (300, 7, 5), (16, 16, 1)]:
        got = tuple(int(v) for v in flops(n, k, d))
        want = (2 * n * n * d, 4 * n * k * d)
        if got[0] != want[0]:
            raise AssertionError(f"n, k, d = {(n, k, d)}: your full count {got[0]} is not right (count Q K^T and A V)")
        if got[1] != want[1]:
            raise AssertionError(
                f"n, k, d = {(n, k, d)}: your Linformer count {got[1]} is not right "
                "(did you count the projections E K and F V?)"
            )
    return "correct: both counts are right"


def check_ex2(band: Callable[[int, int], Tensor]) -> str:
    """Ex. 2: ``band(n, w)`` is the boolean local-window mask ``|i - j| <= w``."""
    for n, w in [(5, 0), (9, 2), (6, 10), (7, 1)]:
        got = band(n, w)
        want = local.local_window_mask(n, w)
        if not (isinstance(got, Tensor) and got.dtype == torch.bool):
            raise AssertionError("return a boolean tensor (True = may attend)")
        if not torch.equal(got, want):
            raise AssertionError(f"n = {n}, w = {w}: the band must keep |i - j| <= w (is the bound inclusive?)")
    return "correct: the band is |clip(j - i)| <= w"


def _lsh_reference(X: Tensor, V: Tensor, n_buckets: int, chunk: int, seeds: range) -> float:
    full, _ = reformer.shared_qk_attention(X, V)
    errs = []
    for s in seeds:
        R = reformer.random_rotations(X.shape[-1], n_buckets, torch.Generator().manual_seed(s))
        c, _ = reformer.lsh_attention(X, V, n_buckets, chunk, R=R)
        errs.append(float((c - full).norm() / full.norm()))
    return sum(errs) / len(errs)


def check_ex3(lsh_error: Callable[[Tensor, Tensor, int, int], float], larger_chunk_helps: bool) -> str:
    """Ex. 3: ``lsh_error(X, V, n_buckets, chunk)`` is the mean relative error over hash seeds 0-4.

    The error of one hash is ``||c_lsh - c_full|| / ||c_full||`` against full
    *shared-QK* attention (LSH's own exact limit). The check compares with its
    own computation on clustered data, then compares ``larger_chunk_helps``
    with whether chunks of 256 give a lower mean error than chunks of 8.
    """
    g = torch.Generator().manual_seed(11)
    cent = torch.randn(8, 16, generator=g) * 3.0
    cluster = torch.randint(0, 8, (256,), generator=g)
    X = (cent[cluster] + 0.5 * torch.randn(256, 16, generator=g))[None]
    V = (torch.randn(8, 8, generator=g)[cluster] + 0.3 * torch.randn(256, 8, generator=g))[None]
    errs = {}
    for chunk in (8, 256):
        want = _lsh_reference(X, V, 8, chunk, range(5))
        got = float(lsh_error(X, V, 8, chunk))
        if not abs(got - want) < 1e-5:
            raise AssertionError(
                f"chunk {chunk}: your error {got:.4f} is not right (relative error against shared-QK full attention, "
                "mean over the rotations drawn with seeds 0-4)"
            )
        errs[chunk] = want
    truth = errs[256] < errs[8]
    if bool(larger_chunk_helps) != truth:
        raise AssertionError(
            "larger_chunk_helps does not follow from your lsh_error on the check's data: compare the two errors again"
        )
    return "correct: lsh_error is right, and larger_chunk_helps follows from it"


def hidden_check_ex1(flops: Callable[[int, int, int], tuple[int, int]]) -> None:
    """Hidden test of Ex. 1: other sizes, counted product by product here. Raises ``AssertionError``."""
    for n, k, d in ((5000, 3, 17), (1, 1, 1), (64, 256, 8)):
        qk, av = n * n * d, n * n * d
        ek, fv, q_ek, a_fv = k * n * d, k * n * d, n * k * d, n * k * d
        got = tuple(int(v) for v in flops(n, k, d))
        if got != (qk + av, ek + fv + q_ek + a_fv):
            raise AssertionError(f"n, k, d = {(n, k, d)}: your counts are not right")


def hidden_check_ex2(band: Callable[[int, int], Tensor]) -> None:
    """Hidden test of Ex. 2: other sizes (n = 1, 12; w = 0, 3, 11), against |i - j| <= w. Raises ``AssertionError``."""
    for n, w in ((1, 0), (12, 3), (12, 11), (4, 3)):
        i = torch.arange(n)
        want = (i[:, None] - i[None, :]).abs() <= w
        got = band(n, w)
        if not (isinstance(got, Tensor) and torch.equal(got, want)):
            raise AssertionError(f"n = {n}, w = {w}: the band is not right")


def hidden_check_ex3(lsh_error: Callable[[Tensor, Tensor, int, int], float], larger_chunk_helps: bool) -> None:
    """Hidden test of Ex. 3: ``lsh_error`` with 4 buckets on other clustered data, and the answer a truth value.

    Raises ``AssertionError``.
    """
    if not isinstance(larger_chunk_helps, bool):
        raise AssertionError("larger_chunk_helps is True or False")
    g = torch.Generator().manual_seed(12)
    cent = torch.randn(4, 8, generator=g) * 3.0
    cluster = torch.randint(0, 4, (128,), generator=g)
    X = (cent[cluster] + 0.5 * torch.randn(128, 8, generator=g))[None]
    V = torch.randn(1, 128, 4, generator=g)
    for chunk in (16, 128):
        if not abs(float(lsh_error(X, V, 4, chunk)) - _lsh_reference(X, V, 4, chunk, range(5))) < 1e-6:
            raise AssertionError(f"4 buckets, chunks of {chunk}, other data: your error is not right")
