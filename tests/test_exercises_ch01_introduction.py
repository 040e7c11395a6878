"""Chapter 1 exercises: each self-check rejects a plausible wrong answer and accepts the solution."""

from __future__ import annotations

import pytest

from attnsurvey.data.sequences import target_positions
from attnsurvey.exercises import ch01_introduction as ex


def hit_rate(weights, src, lengths, task, tolerance=0):
    ideal = target_positions(task, src, lengths)
    valid = ideal >= 0
    hit = (weights.argmax(-1) - ideal).abs() <= tolerance
    return float(hit[valid].float().mean())


def hit_rate_counting_padding(weights, src, lengths, task, tolerance=0):
    ideal = target_positions(task, src, lengths)
    return float(((weights.argmax(-1) - ideal).abs() <= tolerance).float().mean())


def test_ex1_rejects_one_score_per_output_step():
    with pytest.raises(AssertionError):
        ex.check_ex1(12, 0)


def test_ex1_rejects_scores_for_the_bottleneck():
    with pytest.raises(AssertionError):
        ex.check_ex1(144, 12)


def test_ex1_accepts_the_solution():
    assert "correct" in ex.check_ex1(144, 0)


def test_ex2_rejects_a_rate_that_counts_padded_steps():
    with pytest.raises(AssertionError):
        ex.check_ex2(hit_rate_counting_padding)


def test_ex2_rejects_a_rate_that_ignores_the_tolerance():
    with pytest.raises(AssertionError):
        ex.check_ex2(lambda w, s, n, task, tolerance=0: hit_rate(w, s, n, task, 0))


def test_ex2_accepts_the_solution():
    assert "correct" in ex.check_ex2(hit_rate)


def test_ex3_rejects_rates_measured_against_the_wrong_task():
    with pytest.raises(AssertionError):
        ex.check_ex3(0.25, 0.97)  # measured against the reversal alignment by mistake


def test_ex3_accepts_a_diagonal_alignment():
    assert "correct" in ex.check_ex3(0.95, 0.25)


def test_ex2_rejects_the_arg_max_over_the_output_axis():
    def wrong_axis(weights, src, lengths, task, tolerance=0):
        ideal = target_positions(task, src, lengths)
        valid = ideal >= 0
        return float(((weights.argmax(-2) - ideal).abs() <= tolerance)[valid].float().mean())

    with pytest.raises(AssertionError, match="last axis"):
        ex.check_ex2(wrong_axis)


def test_ex2_rejects_transposed_weights():
    with pytest.raises(AssertionError):
        ex.check_ex2(lambda w, s, n, task, tolerance=0: hit_rate(w.transpose(-1, -2), s, n, task, tolerance))


def test_ex2_rejects_the_unfilled_stub_with_a_message():
    with pytest.raises(AssertionError, match="None"):
        ex.check_ex2(lambda w, s, n, task, tolerance=0: None)


def test_ex2_accepts_a_tensor_result_and_its_own_ground_truth():
    import torch

    def from_lengths(weights, src, lengths, task, tolerance=0):
        B, T, _ = weights.shape
        t = torch.arange(T)
        ideal = (lengths[:, None] - 1 - t) if task == "reverse" else t.expand(B, T)
        valid = t[None] < lengths[:, None]
        return ((weights.argmax(-1) - ideal).abs() <= tolerance)[valid].float().mean()

    assert "correct" in ex.check_ex2(from_lengths)


def test_ex3_rejects_the_unfilled_stub_with_a_message():
    with pytest.raises(AssertionError, match="None"):
        ex.check_ex3(None, None)


def test_ex3_points_at_the_tolerance_for_a_rate_measured_at_tolerance_0():
    # the notebook's copying model (seed 1) scores 0.411 on the diagonal at tolerance 0, 0.873 at tolerance 1
    with pytest.raises(AssertionError, match="tolerance=1"):
        ex.check_ex3(0.411, 0.10)


def test_ex3_accepts_tensor_rates():
    import torch

    assert "correct" in ex.check_ex3(torch.tensor(0.873), torch.tensor(0.228))


def test_hidden_ex1_accepts_the_solution_and_rejects_a_boolean():
    ex.hidden_check_ex1(12 * 12, 0)
    ex.check_ex1(144, False)  # the visible check lets False pass for 0 ...
    with pytest.raises(AssertionError, match="not True or False"):
        ex.hidden_check_ex1(144, False)  # ... the hidden one does not
    with pytest.raises(AssertionError):
        ex.hidden_check_ex1(12, 0)


def _mean_of_sequence_rates(weights, src, lengths, task, tolerance=0):
    ideal = target_positions(task, src, lengths)
    hits = (weights.argmax(-1) - ideal).abs() <= tolerance
    return sum(float(hits[b, : int(n)].float().mean()) for b, n in enumerate(lengths)) / len(lengths)


def test_hidden_ex2_accepts_the_solution_and_rejects_a_mean_of_sequence_rates():
    ex.hidden_check_ex2(hit_rate)
    assert "correct" in ex.check_ex2(_mean_of_sequence_rates)  # passes the visible check ...
    with pytest.raises(AssertionError, match="valid output step"):
        ex.hidden_check_ex2(_mean_of_sequence_rates)  # ... not the hidden one


@pytest.fixture(scope="module")
def copier():
    import torch

    from attnsurvey.data.sequences import transduction_batch
    from attnsurvey.experiments.seq2seq import fit_transduction
    from attnsurvey.seq2seq import Seq2Seq
    from attnsurvey.training import seed_everything

    g = seed_everything(1)
    model = Seq2Seq(8, d_emb=16, d_h=32, attention=True)
    fit_transduction(model, 80, g, lengths=(3, 6), batch_size=32, task="copy", lr=2e-2)
    b = transduction_batch(200, 6, 8, task="copy", generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        _, _, w = model.greedy_decode(b.src, 6, b.lengths)
    return model, hit_rate(w, b.src, b.lengths, "copy", 1), hit_rate(w, b.src, b.lengths, "reverse", 1)


def test_hidden_ex3_accepts_the_solution_and_rejects_made_up_rates(copier):
    model, diag, anti = copier
    assert "correct" in ex.check_ex3(diag, anti)
    ex.hidden_check_ex3(diag, anti, model)
    assert "correct" in ex.check_ex3(0.99, 0.01)  # invented rates pass the visible check ...
    with pytest.raises(AssertionError, match="not what copier gives"):
        ex.hidden_check_ex3(0.99, 0.01, model)  # ... not the hidden one


@pytest.mark.parametrize("answer", [(12, 0), (144, 12), (24, 0)], ids=["one-per-step", "bottleneck-counted", "sum"])
def test_ex1_hints_do_not_state_the_counts(answer):
    """A wrong count gets a pointer to the equations, not the count or the rule that gives it."""
    with pytest.raises(AssertionError) as err:
        ex.check_ex1(*answer)
    message = str(err.value)
    for giveaway in ("144", "every source position", "never scores", "fixed before decoding"):
        if giveaway in message:
            raise AssertionError(f"the hint gives the answer away: {message!r}")
