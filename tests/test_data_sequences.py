"""Tests for the synthetic transduction tasks of Chapter 1 (reverse, copy, sort)."""

from __future__ import annotations

import pytest
import torch

from attnsurvey.data.sequences import BOS, FIRST_SYMBOL, PAD, target_positions, transduction_batch


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("task", ["reverse", "copy", "sort"])
def test_targets_match_python_oracle(task):
    b = transduction_batch(50, (1, 9), vocab_size=7, task=task, generator=gen())
    oracle = {"reverse": lambda xs: xs[::-1], "copy": lambda xs: list(xs), "sort": sorted}[task]
    for i in range(50):
        n = int(b.lengths[i])
        xs = b.src[i, :n].tolist()
        assert all(FIRST_SYMBOL <= x < 7 for x in xs)
        assert b.tgt_out[i, :n].tolist() == oracle(xs)
        assert torch.all(b.src[i, n:] == PAD) and torch.all(b.tgt_out[i, n:] == PAD)


def test_teacher_forcing_inputs_are_targets_shifted_right():
    b = transduction_batch(8, 5, generator=gen(1))
    assert torch.all(b.tgt_in[:, 0] == BOS)
    assert torch.equal(b.tgt_in[:, 1:], b.tgt_out[:, :-1])


def test_lengths_cover_the_range_and_batch_is_padded_to_longest():
    b = transduction_batch(400, (3, 6), generator=gen(2))
    assert set(b.lengths.tolist()) == {3, 4, 5, 6}
    assert b.src.shape == (400, 6)
    fixed = transduction_batch(4, 5, generator=gen(2))
    assert torch.all(fixed.lengths == 5) and fixed.src.shape == (4, 5)


def test_ground_truth_alignment_reproduces_targets():
    for task in ("reverse", "copy", "sort"):
        b = transduction_batch(20, (2, 8), task=task, generator=gen(3))
        pos = target_positions(task, b.src, b.lengths)
        valid = pos >= 0
        gathered = torch.gather(b.src, 1, pos.clamp_min(0))
        assert torch.equal(gathered[valid], b.tgt_out[valid])
        assert torch.equal(valid, b.tgt_out != PAD)
    rev = target_positions("reverse", torch.ones(1, 4, dtype=torch.long) * 3, torch.tensor([4]))
    assert rev.tolist() == [[3, 2, 1, 0]]  # the anti-diagonal


def test_seeded_generator_makes_batches_reproducible():
    a = transduction_batch(6, (2, 9), generator=gen(7))
    b = transduction_batch(6, (2, 9), generator=gen(7))
    c = transduction_batch(6, (2, 9), generator=gen(8))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a.src, c.src)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="unknown task 'rotate'"):
        transduction_batch(2, 3, task="rotate")
    with pytest.raises(ValueError, match="vocab_size must exceed 2"):
        transduction_batch(2, 3, vocab_size=2)
    with pytest.raises(ValueError, match="1 <= min <= max"):
        transduction_batch(2, (5, 3))
    with pytest.raises(ValueError, match="1 <= min <= max"):
        transduction_batch(2, 0)
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        transduction_batch(0, 3)


def test_reversal_batch_targets_are_the_reversed_inputs():
    from attnsurvey.data.sequences import reversal_batch

    x, y = reversal_batch(5, 7, 10, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (5, 7)
    assert int(x.min()) >= 0 and int(x.max()) < 10
    for b in range(5):
        assert y[b].tolist() == x[b].tolist()[::-1]
    with pytest.raises(ValueError, match="vocab >= 2"):
        reversal_batch(2, 3, 1, torch.Generator())
