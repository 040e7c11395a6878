"""Exercise checks for chapter 6, exact attention in linear memory (``attnsurvey.beyond.tiled`` and ``io_model``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from unittest import mock

import torch

from ..beyond import io_model
from ..beyond.io_model import flash_io
from ._answers import run_answer, whole_number

CHAPTER = "chapters/ch06_tiled_attention.ipynb"


def _lse(*values: float) -> float:
    return float(torch.logsumexp(torch.tensor(values, dtype=torch.float64), 0))


def check_merge_lse(merge_lse: Callable[[float, float, float], float]) -> None:
    """Exercise 1: ``merge_lse(L_old, m_t, l_t)``: the log-sum-exp after one more tile, from ``L`` alone.

    ``L_old`` is the log-sum-exp of the scores seen so far (``-inf`` before the
    first tile), ``(m_t, l_t)`` the maximum and the sum ``sum exp(e - m_t)`` of the
    new tile. Compared to a relative 1e-6 on cases with small and with large
    scores, so a formula that exponentiates a score overflows and fails.
    Raises ``AssertionError`` with a hint that names no formula.
    """
    cases = [(0.0, 1.0, 2.0), (-math.inf, 0.5, 3.0), (2.0, -1.0, 1.0), (950.0, 951.0, 4.0)]
    for L_old, m_t, l_t in cases:
        want = _lse(L_old, m_t + math.log(l_t))
        got = float(run_answer(merge_lse, L_old, m_t, l_t, what=f"merge_lse({L_old}, {m_t}, {l_t})"))
        if math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9):
            continue
        if math.isclose(got, max(L_old, m_t + math.log(l_t)), rel_tol=1e-6, abs_tol=1e-9):
            raise AssertionError("that keeps the larger part only; the smaller one still adds to the sum")
        if math.isclose(got, L_old + math.log(l_t), rel_tol=1e-6, abs_tol=1e-9) or math.isclose(
            got, max(L_old, m_t) + math.log(l_t), rel_tol=1e-6, abs_tol=1e-9
        ):
            raise AssertionError(
                "the tile's sum l_t is relative to its own maximum m_t: bring both parts to one reference"
            )
        if not math.isfinite(got):
            raise AssertionError(f"merge_lse({L_old}, {m_t}, {l_t}) is not finite: avoid exponentiating a large number")
        raise AssertionError(f"merge_lse({L_old}, {m_t}, {l_t}) is not right")
    print("log-sum-exp merge check passed")


def check_streaming_logsumexp(stream: Callable[[Iterator[float]], tuple[float, float]]) -> None:
    """Exercise 2: ``stream(scores)`` reads the scores one at a time and returns ``(m, l)``.

    Must satisfy ``m = max(scores)`` and ``m + log(l) = logsumexp(scores)``, to a
    relative 1e-6 (a stream computed in float32 is right). One case has only
    negative scores, so a running maximum that starts at 0 instead of -inf fails.
    The scores arrive as an iterator, so an answer that reads them twice (the
    maximum first, then the sum) sees no scores the second time and fails.
    """
    g = torch.Generator().manual_seed(0)
    cases = [
        [0.0],
        [1.0, 2.0, 3.0],
        [3.0, 2.0, 1.0],
        [-5.0, -3.0],
        (torch.randn(50, generator=g) * 20).tolist(),
        [1000.0, 999.0, -1000.0],
    ]
    for scores in cases:
        m, l = (float(v) for v in stream(iter(scores)))
        if l == 0:
            raise AssertionError(
                f"for scores {scores[:5]}...: l is 0; the scores come from an iterator, which can be read only once "
                "(does your code go over them twice?)"
            )
        if not math.isclose(m, max(scores), rel_tol=1e-6):
            raise AssertionError(
                f"for scores {scores[:5]}: m should be the largest score {max(scores)}, got {m} "
                "(what does the running maximum start from?)"
            )
        want = float(torch.logsumexp(torch.tensor(scores, dtype=torch.float64), 0))
        if not (l > 0 and math.isfinite(l) and math.isclose(m + math.log(l), want, rel_tol=1e-6, abs_tol=1e-6)):
            raise AssertionError(
                f"for scores {scores[:5]}...: m + log l = {m + math.log(l) if l > 0 else l}, logsumexp = {want}; "
                "did you rescale l when the maximum grew?"
            )
    print("streaming log-sum-exp check passed")


def causal_tiles(n: int, block_q: int, block_k: int) -> int:
    """Tiles the causal forward of :func:`attnsurvey.beyond.tiled.tiled_attend` visits for ``n`` tokens."""
    return sum(math.ceil(min(n, qs + block_q) / block_k) for qs in range(0, n, block_q))


def check_causal_tiles(answer: int, n: int = 4096, block_q: int = 256, block_k: int = 1024) -> None:
    """Exercise 3: the number of tiles visited with ``is_causal=True`` (tiles entirely above the diagonal are skipped)."""
    want = causal_tiles(n, block_q, block_k)
    full = math.ceil(n / block_q) * math.ceil(n / block_k)
    if whole_number(answer, "a number of tiles") != want:
        raise AssertionError(
            f"got {answer}, of {full} tiles; try your way of counting on the picture at the top of the chapter "
            "(16 x 16 scores, tiles of 4 x 4: 10 tiles visited), then on tiles of 256 queries x 1024 keys"
        )
    print("causal tiles check passed")


def hidden_check_merge_lse(merge_lse: Callable[[float, float, float], float]) -> None:
    """Hidden test of Exercise 1: scores near -800 and 800 (exp under- and overflows), a tile 900 below the rest.

    The reference adds the two parts as exact fractions of a common power of e. Raises ``AssertionError``.
    """
    for L_old, m_t, l_t in [(-800.0, -801.5, 7.0), (800.0, -100.0, 2.0), (5.0, 5.0, 1.0), (-math.inf, -700.0, 1.5)]:
        top = max(L_old, m_t)
        want = top + math.log(math.exp(L_old - top) + l_t * math.exp(m_t - top))
        got = float(run_answer(merge_lse, L_old, m_t, l_t, what=f"merge_lse({L_old}, {m_t}, {l_t})"))
        if not math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9):
            raise AssertionError(f"merge_lse({L_old}, {m_t}, {l_t}) is not right")


def hidden_check_streaming_logsumexp(stream: Callable[[Iterator[float]], tuple[float, float]]) -> None:
    """Hidden test of Exercise 2: 2000 scores near -1000, and a stream whose maximum comes last, each as an iterator.

    Raises ``AssertionError``.
    """
    g = torch.Generator().manual_seed(2)
    for scores in ((torch.randn(2000, generator=g) - 1000.0).tolist(), [float(x) for x in range(-50, 51)]):
        m, l = (float(v) for v in stream(iter(scores)))
        want = float(torch.logsumexp(torch.tensor(scores, dtype=torch.float64), 0))
        if not (l > 0 and math.isfinite(l) and math.isclose(m + math.log(l), want, rel_tol=1e-6, abs_tol=1e-6)):
            raise AssertionError(f"{len(scores)} scores: m + log l is not the log-sum-exp")


def hidden_check_causal_tiles(answer: int, n: int = 4096, block_q: int = 256, block_k: int = 1024) -> None:
    """Hidden test of Exercise 3: the count against a tile-by-tile enumeration (a tile is visited when its first key
    is not after its last query). Raises ``AssertionError``."""
    visited = sum(1 for qs in range(0, n, block_q) for ks in range(0, n, block_k) if ks <= min(n, qs + block_q) - 1)
    if whole_number(answer, "a number of tiles") != visited:
        raise AssertionError(
            "count the tiles one by one: a key tile is skipped only when all of it lies after the query tile"
        )


def _hbm_reads_wrong(
    reads: Callable[[int, int, int, int], int], cases: list[tuple[int, int, int, int]]
) -> tuple | None:
    """The first ``(n_q, n_f, d, M)`` where ``reads`` differs from the instrumented count, or None.

    The answer runs with :func:`attnsurvey.beyond.io_model.algorithm1_schedule` replaced by a
    function that fails, so a count taken from ``io_model`` (``flash_io``, ``flash_forward``)
    is refused: the exercise asks for a derivation.
    """
    refused = AssertionError("hbm_reads must derive the count, not take it from attnsurvey.beyond.io_model")
    for n_q, n_f, d, M in cases:
        want = flash_io(n_q, d, M, n_f=n_f)["reads"]
        with mock.patch.object(io_model, "algorithm1_schedule", side_effect=refused):
            got = run_answer(reads, n_q, n_f, d, M, what=f"hbm_reads({n_q}, {n_f}, {d}, {M})")
        if whole_number(got, "a number of elements") != want:
            return n_q, n_f, d, M
    return None


def check_hbm_reads(reads: Callable[[int, int, int, int], int]) -> None:
    """Exercise 4: ``reads(n_q, n_f, d, M)`` is the number of elements Algorithm 1 reads from slow memory.

    Compared with the instrumented count of :func:`attnsurvey.beyond.io_model.flash_io`
    (``n_q`` queries, ``n_f`` keys, ``d_k = d_v = d``, the paper's block sizes) on sizes where
    every block is full and ``n_q != n_f``, so the chapter's square count with ``n`` put for
    both lengths fails. Raises ``AssertionError`` with a hint that does not give the count.
    """
    wrong = _hbm_reads_wrong(reads, [(4096, 2048, 64, 65536), (1024, 4096, 64, 16384), (2048, 2048, 32, 32768)])
    if wrong is not None:
        raise AssertionError(
            f"hbm_reads{wrong} differs from the instrumented count: which blocks does each step of the "
            "inner loop load, and how many times does the outer loop run over all the queries?"
        )
    print("slow-memory reads check passed")


def hidden_check_hbm_reads(reads: Callable[[int, int, int, int], int]) -> None:
    """Hidden test of Exercise 4: sizes where ``M`` is not a multiple of ``4 d`` and the last key block is short.

    Raises ``AssertionError``.
    """
    if _hbm_reads_wrong(reads, [(1000, 700, 64, 20000), (777, 1500, 16, 5000), (64, 64, 64, 262144)]) is not None:
        raise AssertionError("round the block size and the number of blocks up to whole numbers")
