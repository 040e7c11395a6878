"""The exercise checks of chapter 6.5 accept the right answers and reject plausible wrong ones."""

from __future__ import annotations

import math

import pytest
import torch

from attnsurvey.beyond import latent as L
from attnsurvey.beyond import layer_caches as LC
from attnsurvey.beyond.kv_cache import SlidingWindowCache
from attnsurvey.exercises import beyond_latent as ex


def _madds(t, d_c, d_h, d_R, form):
    return t * d_h * d_c + t * (d_h + d_R) if form == "naive" else d_h * d_c + t * (d_c + d_R)


def test_score_count_by_hand_at_deepseek_v2_sizes():
    naive, absorbed = (ex.score_multiply_adds(1000, 512, 128, 64, f) for f in ("naive", "absorbed"))
    assert naive == 1000 * (128 * 512 + 192) and absorbed == 128 * 512 + 1000 * 576


def test_score_count_equals_the_products_of_the_package_forms():
    """The absorbed count is the product sizes of absorbed_query (once) and of [q~; q^R] . [c; k^R] (t times)."""
    h, d_h, d_c, d_R, t = 1, 4, 6, 2, 5
    q_C = torch.zeros(h, 1, d_h)
    folded = L.absorbed_query(q_C, torch.zeros(h * d_h, d_c))
    assert folded.shape[-1] == d_c  # the fold costs d_h * d_c, and the scores t * (d_c + d_R)
    assert ex.score_multiply_adds(t, d_c, d_h, d_R, "absorbed") == d_h * d_c + t * (folded.shape[-1] + d_R)


def test_score_madds_check_accepts_the_solution():
    ex.check_score_madds(_madds)
    ex.hidden_check_score_madds(_madds)


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (lambda t, d_c, d_h, d_R, f: t * (d_h + d_R) if f == "naive" else _madds(t, d_c, d_h, d_R, f), "cache of keys"),
        (lambda t, d_c, d_h, d_R, f: _madds(t, d_c, d_h, d_R, f) - t * d_R, "two parts"),
        (
            lambda t, d_c, d_h, d_R, f: t * (d_c + d_R) if f == "absorbed" else _madds(t, d_c, d_h, d_R, f),
            "once per step",
        ),
        (
            lambda t, d_c, d_h, d_R, f: t * (d_c + d_R) + t * d_h * d_c
            if f == "absorbed"
            else _madds(t, d_c, d_h, d_R, f),
            "how often",
        ),
    ],
)
def test_score_madds_check_rejects_plausible_wrong_answers(wrong, hint):
    with pytest.raises(AssertionError, match=hint):
        ex.check_score_madds(wrong)
    with pytest.raises(AssertionError):
        ex.hidden_check_score_madds(wrong)


def _scores(q_C, q_R, c, k_R, W_UK, scale_width=None):
    h, _, d_h = q_C.shape
    width = d_h + q_R.shape[-1] if scale_width is None else scale_width(c, q_R)
    return (q_C @ W_UK.reshape(h, d_h, -1) @ c.T + q_R @ k_R.T) / math.sqrt(width)


def test_latent_scores_check_accepts_the_solution():
    ex.check_latent_scores(_scores)
    ex.hidden_check_latent_scores(_scores)


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (
            lambda q_C, q_R, c, k_R, W: _scores(q_C, q_R, c, k_R, W)
            - q_R @ k_R.T / math.sqrt(q_C.shape[-1] + q_R.shape[-1]),
            "two parts",
        ),
        (lambda *a: _scores(*a, scale_width=lambda c, q_R: c.shape[-1] + q_R.shape[-1]), "which width"),
        (lambda *a: _scores(*a, scale_width=lambda c, q_R: 1), "not scaled"),
        # W_UK's heads taken as columns of the wrong reshape: (d_h, h) instead of (h, d_h)
        (
            lambda q_C, q_R, c, k_R, W: (
                q_C @ W.reshape(q_C.shape[-1], q_C.shape[0], -1).transpose(0, 1) @ c.T + q_R @ k_R.T
            )
            / math.sqrt(q_C.shape[-1] + q_R.shape[-1]),
            "which rows",
        ),
    ],
)
def test_latent_scores_check_rejects_plausible_wrong_answers(wrong, hint):
    with pytest.raises(AssertionError, match=hint):
        ex.check_latent_scores(wrong)


def _measured_counts(window: int | None = None) -> list[int]:
    e = ex.EX3
    kinds = LC.layer_schedule(e["n_layers"], e["local_per_global"])
    torch.manual_seed(0)
    stack = LC.HybridDecoder(8, 2, e["n_kv_heads"], 16, kinds, e["window"]).eval()
    caches = stack.new_caches(1, e["T"])
    if window is not None:  # a planted bug: ring buffers of another width
        caches = [SlidingWindowCache(1, 1, window, 4) if isinstance(c, SlidingWindowCache) else c for c in caches]
    counts = []
    with torch.no_grad():
        for _ in range(e["T"]):
            stack(torch.randn(1, 1, 8), caches)
            counts.append(LC.cache_elements(caches))
    return counts


def test_stack_counts_are_the_measured_counts_and_the_check_accepts_them():
    counts = _measured_counts()
    assert counts == ex.stack_counts()
    fraction = counts[-1] / (2 * 4 * ex.EX3["T"] * ex.EX3["n_layers"])
    assert math.isclose(fraction, (9 * 4 + 3 * 11) / (12 * 11))  # by hand
    ex.check_stack_counts(counts, fraction)
    ex.hidden_check_stack_counts(counts, fraction)


def test_stack_counts_check_rejects_plausible_wrong_answers():
    right = ex.stack_counts()
    frac = ex.stack_fraction()
    T, n_layers = ex.EX3["T"], ex.EX3["n_layers"]
    wrong = {
        "itself included": (_measured_counts(window=ex.EX3["window"] + 1), frac),
        "global layers only": ([8 * t * 3 for t in range(1, T + 1)], frac),
        "all-global": ([8 * t * n_layers for t in range(1, T + 1)], frac),
        "what it saves": (right, 1 - frac),
        "divide the last count": (right, 3 / 12),
        "one count per decoded token": (right[:-1], frac),
    }
    for hint, (counts, fraction) in wrong.items():
        with pytest.raises(AssertionError, match=hint):
            ex.check_stack_counts(counts, fraction)
    with pytest.raises(AssertionError):
        ex.hidden_check_stack_counts(right, 3 / 12)
