"""Exercise checks for chapter 6.5, smaller caches (``attnsurvey.beyond.latent``, ``attnsurvey.beyond.layer_caches``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from ..beyond import layer_caches as LC
from ..query_related.multihead import split_heads
from ._answers import real_number, run_answer, whole_number

CHAPTER = "chapters/ch06_5_latent_and_shared_caches.ipynb"

#: Exercise 1: the layers the visible check tries, (t, d_c, d_h, d_R).
EX1_CASES = [(4096, 512, 128, 64), (1, 512, 128, 64), (100, 64, 16, 8), (7, 24, 32, 6)]


def score_multiply_adds(t: int, d_c: int, d_h: int, d_R: int, form: str) -> int:
    """Multiply-adds of one head's scores for one new query against ``t`` cached positions of an MLA cache.

    ``"naive"``: up-project the ``t`` cached latents to keys (``t * d_h * d_c``), then ``t`` dot
    products of width ``d_h + d_R``. ``"absorbed"``: fold ``W_UK`` into the query once
    (``d_h * d_c``), then ``t`` dot products of width ``d_c + d_R`` against the cache itself.
    """
    if form == "naive":
        return t * d_h * d_c + t * (d_h + d_R)
    return d_h * d_c + t * (d_c + d_R)


def _madds_hint(score_madds: Callable[..., int], case: tuple[int, int, int, int]) -> str | None:
    t, d_c, d_h, d_R = case
    for form in ("naive", "absorbed"):
        got = whole_number(
            run_answer(score_madds, t, d_c, d_h, d_R, form, what=f"score_madds(..., {form!r})"), "a count"
        )
        want = score_multiply_adds(t, d_c, d_h, d_R, form)
        if got == want:
            continue
        if form == "naive" and got == t * (d_h + d_R):
            return "naive: that is the count for a cache of keys; this cache holds latents, not keys"
        if got == want - t * d_R:
            return f"{form}: the scores have two parts; one of them is missing"
        if form == "absorbed" and got == t * (d_c + d_R):
            return "absorbed: the folded query has to be computed too, once per step"
        if form == "absorbed" and got == t * (d_c + d_R) + t * d_h * d_c:
            return "absorbed: how often must W_UK be folded into one query?"
        return f"score_madds(t={t}, d_c={d_c}, d_h={d_h}, d_R={d_R}, form={form!r}) is not right"
    return None


def check_score_madds(score_madds: Callable[..., int]) -> None:
    """Exercise 1: ``score_madds(t, d_c, d_h, d_R, form)``: multiply-adds of one head's scores in one decoding step.

    One new query, ``t`` cached positions holding ``c`` and ``k^R``, ``form`` ``"naive"`` or ``"absorbed"``.
    Raises ``AssertionError`` with a hint that names no count.
    """
    for case in EX1_CASES:
        hint = _madds_hint(score_madds, case)
        if hint:
            raise AssertionError(hint)
    print("score count check passed")


def hidden_check_score_madds(score_madds: Callable[..., int]) -> None:
    """Hidden test of Exercise 1: other sizes (d_R = 2, d_c < d_h). Raises ``AssertionError``."""
    for t, d_c, d_h, d_R in [(3, 8, 64, 2), (65536, 1024, 192, 64)]:
        for form in ("naive", "absorbed"):
            if int(score_madds(t, d_c, d_h, d_R, form)) != score_multiply_adds(t, d_c, d_h, d_R, form):
                raise AssertionError(f"score_madds({t}, {d_c}, {d_h}, {d_R}, {form!r}) is not right")


def _scores_case(
    seed: int, h: int, n: int, d_c: int, d_h: int, d_R: int
) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    """Random float64 (q_C, q_R, c, k_R, W_UK) and the naive form's scores (keys materialised, then scaled)."""
    g = torch.Generator().manual_seed(seed)
    q_C = torch.randn(h, 1, d_h, generator=g, dtype=torch.float64)
    q_R = torch.randn(h, 1, d_R, generator=g, dtype=torch.float64)
    c = torch.randn(n, d_c, generator=g, dtype=torch.float64)
    k_R = torch.randn(n, d_R, generator=g, dtype=torch.float64)
    W_UK = torch.randn(h * d_h, d_c, generator=g, dtype=torch.float64)
    k_C = split_heads(c @ W_UK.T, h)  # (h, n, d_h)
    want = (q_C @ k_C.transpose(-1, -2) + q_R @ k_R.T) / math.sqrt(d_h + d_R)
    return (q_C, q_R, c, k_R, W_UK), want


def _scores(latent_scores: Callable[..., torch.Tensor], args: tuple, want: torch.Tensor) -> torch.Tensor:
    got = torch.as_tensor(run_answer(latent_scores, *args, what="latent_scores")).to(torch.float64)
    if tuple(got.shape) != tuple(want.shape):
        raise AssertionError(
            f"return one score per head and cached position, shape {tuple(want.shape)}, got {tuple(got.shape)}"
        )
    return got


def check_latent_scores(latent_scores: Callable[..., torch.Tensor]) -> None:
    """Exercise 2: ``latent_scores(q_C, q_R, c, k_R, W_UK)``: the scaled scores of every head against the cache.

    q_C ``(h, 1, d_h)``, q_R ``(h, 1, d_R)``, c ``(n, d_c)``, k_R ``(n, d_R)``, W_UK ``(h*d_h, d_c)``;
    returns ``(h, 1, n)``. Compared, to 1e-10, with the naive form's scores. Raises ``AssertionError``
    with a hint that names neither the scale nor the formula.
    """
    h, n, d_c, d_h, d_R = 3, 5, 6, 4, 2
    args, want = _scores_case(2, h, n, d_c, d_h, d_R)
    got = _scores(latent_scores, args, want)
    if torch.allclose(got, want, atol=1e-10):
        print("latent scores check passed")
        return
    rope = args[1] @ args[3].T / math.sqrt(d_h + d_R)
    if torch.allclose(got, want - rope, atol=1e-10):
        raise AssertionError("the scores have two parts; one of them is missing")
    if torch.allclose(got * math.sqrt(d_c + d_R), want * math.sqrt(d_h + d_R), atol=1e-9):
        raise AssertionError("the scale: which width do the naive form's keys have?")
    if torch.allclose(got, want * math.sqrt(d_h + d_R), atol=1e-9):
        raise AssertionError("the scores are not scaled")
    raise AssertionError(
        f"the scores differ from the naive form's (max |yours - reference| = {float((got - want).abs().max()):.3g}); "
        "check which rows of W_UK belong to head i, on which side they act, and how each part of the score is scaled"
    )


def hidden_check_latent_scores(latent_scores: Callable[..., torch.Tensor]) -> None:
    """Hidden test of Exercise 2: one head, and eight heads with d_c > h * d_h. Raises ``AssertionError``."""
    for seed, (h, n, d_c, d_h, d_R) in enumerate([(1, 1, 3, 2, 2), (8, 9, 40, 4, 4)], start=5):
        args, want = _scores_case(seed, h, n, d_c, d_h, d_R)
        if not torch.allclose(_scores(latent_scores, args, want), want, atol=1e-10):
            raise AssertionError(f"h={h}, n={n}: the scores differ from the naive form's")


#: Exercise 3: a stack of 12 layers, three local layers per global one, a window of 4, 11 decoded tokens.
EX3 = {"n_layers": 12, "local_per_global": 3, "window": 4, "T": 11, "n_kv_heads": 1, "d_head": 4}


def stack_counts(share: int = 1, window: int | None = None) -> list[int]:
    """The elements Exercise 3's stack caches after each of its ``T`` steps (from the schedule's formula)."""
    kinds = LC.layer_schedule(EX3["n_layers"], EX3["local_per_global"])
    w = EX3["window"] if window is None else window
    return [
        LC.cache_elements_formula(kinds, t, w, EX3["n_kv_heads"], EX3["d_head"], share) for t in range(1, EX3["T"] + 1)
    ]


def stack_fraction() -> float:
    """Exercise 3's fraction: the stack's cache after ``T`` tokens over an all-global stack's."""
    every = LC.cache_elements_formula(
        ["global"] * EX3["n_layers"], EX3["T"], EX3["window"], EX3["n_kv_heads"], EX3["d_head"]
    )
    return stack_counts()[-1] / every


def check_stack_counts(counts: Sequence[int] | None, fraction: float | None) -> None:
    """Exercise 3: the cache counts of the stack ``EX3`` after each step, and the last one's fraction of all-global.

    Raises ``AssertionError`` with a hint that names no count.
    """
    if counts is None:
        raise AssertionError("set counts to the list of measured counts, one per step")
    got = [whole_number(c, "a count") for c in counts]
    if len(got) != EX3["T"]:
        raise AssertionError(f"one count per decoded token: {EX3['T']} counts")
    if got == stack_counts(window=EX3["window"] + 1):
        raise AssertionError("a local layer's query sees w keys, itself included: how many slots does its ring hold?")
    n_global = EX3["n_layers"] // (EX3["local_per_global"] + 1)
    if got == [2 * EX3["d_head"] * t * n_global for t in range(1, EX3["T"] + 1)]:
        raise AssertionError("the local layers hold caches too: are you counting the global layers only?")
    every = [2 * EX3["d_head"] * t * EX3["n_layers"] for t in range(1, EX3["T"] + 1)]
    if got == every:
        raise AssertionError("those are the counts of an all-global stack: the local layers keep a ring buffer")
    if got != stack_counts():
        raise AssertionError("not right: count the caches after every step of decoding, one token at a time")
    value = real_number(fraction, "fraction")
    if math.isclose(value, 1 - stack_fraction(), rel_tol=1e-9):
        raise AssertionError("fraction is what the stack keeps, not what it saves")
    if not math.isclose(value, stack_fraction(), rel_tol=1e-9):
        raise AssertionError("fraction: divide the last count by what an all-global stack of the same layers holds")
    print("cache count check passed")


def hidden_check_stack_counts(counts: Sequence[int] | None, fraction: float | None) -> None:
    """Hidden test of Exercise 3: the counts from the schedule's formula, and the fraction. Raises ``AssertionError``."""
    if counts is None or [int(c) for c in counts] != stack_counts():
        raise AssertionError("the counts are not those of the stack")
    if fraction is None or not math.isclose(float(fraction), stack_fraction(), rel_tol=1e-9):
        raise AssertionError("the fraction is not right")
