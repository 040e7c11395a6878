"""Each self-check of chapter 6.6 accepts the solution and rejects plausible wrong answers."""

from __future__ import annotations

import pytest

from attnsurvey.exercises import beyond_sinks as ex
from attnsurvey.experiments.sinks_gates import sink_measures, train_variant


def right_gradient(p: float, gc: float) -> float:
    return -p * gc


def test_sink_gradient():
    ex.check_sink_gradient(right_gradient)
    ex.hidden_check_sink_gradient(right_gradient)
    for wrong, hint in (
        (lambda p, gc: p * gc, "sign"),  # the sign lost
        (lambda p, gc: -(1 - p) * gc, "share"),  # the keys' share instead of the sink's
        (lambda p, gc: -gc, "not right"),  # the factor forgotten
        (lambda p, gc: -p * (1 - p) * gc, "not right"),  # a sigmoid's derivative
    ):
        with pytest.raises(AssertionError, match=hint):
            ex.check_sink_gradient(wrong)


def right_positions(t: int, n_sink: int, window: int) -> list[int]:
    if t <= n_sink + window:
        return list(range(t))
    return list(range(n_sink)) + list(range(t - window, t))


def test_cached_positions():
    ex.check_cached_positions(right_positions)
    ex.hidden_check_cached_positions(right_positions)
    wrong_answers = (
        (lambda t, s, w: list(range(max(0, t - w), t)), "first tokens"),  # no sinks
        (lambda t, s, w: list(range(min(s, t))) + list(range(max(0, t - w), t)), "twice"),  # sinks doubled early
        (lambda t, s, w: right_positions(t, s, w + 1), "not right"),  # the window one too wide
        (lambda t, s, w: list(range(min(s, t))) + list(range(max(s, t - w + 1), t)), "not right"),  # one too narrow
        (
            lambda t, s, w: list(range(t)) if t <= w else list(range(s)) + list(range(t - w, t)),
            "twice",
        ),  # evicts once w tokens are in
        (ex.streaming_positions, "reference"),  # the check's own helper handed back
    )
    for wrong, hint in wrong_answers:
        with pytest.raises(AssertionError, match=hint):
            ex.check_cached_positions(wrong)
    for k in (3, 4, 5):  # a narrow window, an early eviction, the helper: caught by the hidden cases too
        with pytest.raises(AssertionError):
            ex.hidden_check_cached_positions(wrong_answers[k][0])


def test_window_losses():
    model = train_variant("softmax", 0)  # the chapter's seed-0 model: the check recomputes with it
    m = sink_measures(model, window=ex.EX3_WINDOW)
    right = (m["copy_evicted"], m["copy_kept"])
    ex.check_window_losses(right, model)
    ex.hidden_check_window_losses(right, model)
    default = sink_measures(model)
    for wrong, hint in (
        ((default["copy_evicted"], default["copy_kept"]), "chapter's window"),  # the window left at its default
        (right[::-1], "order"),
        ((m["other_evicted"], m["other_kept"]), "not the copy losses"),  # the other positions
        ((m["copy_full"], m["copy_kept"]), "not the copy losses"),  # the causal mask, not the window
        (None, "pair"),
    ):
        with pytest.raises(AssertionError, match=hint):
            ex.check_window_losses(wrong, model)
