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


def right_offsets(t: int, n_sink: int, window: int) -> dict[int, int]:
    if t <= n_sink + window:
        return {p: t - 1 - p for p in range(t)}
    sinks = {p: n_sink + window - 1 - p for p in range(n_sink)}
    return sinks | {p: t - 1 - p for p in range(t - window, t)}


def test_key_offsets():
    ex.check_key_offsets(right_offsets)
    ex.hidden_check_key_offsets(right_offsets)

    def text_offsets(t, s, w):  # the right keys, offsets counted in the text
        return {p: t - 1 - p for p in right_offsets(t, s, w)}

    def late_eviction(t, s, w):  # evicts one token too late, when the cache is already over full
        return {p: t - 1 - p for p in range(t)} if t <= s + w + 1 else right_offsets(t, s, w)

    def query_after_keys(t, s, w):  # the query one place after the newest key
        return {p: o + 1 for p, o in right_offsets(t, s, w).items()}

    def cache_indices(t, s, w):  # the key's index in the cache instead of the offset
        return {p: i for i, p in enumerate(right_offsets(t, s, w))}

    wrong_answers = (
        (text_offsets, "offsets in the text"),
        (late_eviction, "keys held"),
        (query_after_keys, "not right"),
        (cache_indices, "not right"),
        (lambda t, s, w: sorted(right_offsets(t, s, w).values()), "dict"),
        (ex.streaming_offsets, "reference"),  # the check's own helper handed back
    )
    for wrong, hint in wrong_answers:
        with pytest.raises(AssertionError, match=hint):
            ex.check_key_offsets(wrong)
        with pytest.raises(AssertionError):  # the hidden cases catch each too
            ex.hidden_check_key_offsets(wrong)


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
