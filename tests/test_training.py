"""Shared training helpers."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnsurvey.training import accuracy, fmt, minibatches, seed_everything, tie_split_accuracy, train


def test_minibatches_cover_every_example_once_per_epoch_reproducibly():
    x, y = torch.arange(10), torch.arange(10) * 2
    batches = list(minibatches((x, y), epochs=2, batch_size=4, generator=torch.Generator().manual_seed(0)))
    assert [len(b[0]) for b in batches] == [4, 4, 2, 4, 4, 2]
    first_epoch = torch.cat([b[0] for b in batches[:3]])
    assert sorted(first_epoch.tolist()) == list(range(10))
    assert all(torch.equal(b[1], b[0] * 2) for b in batches)
    again = list(minibatches((x, y), epochs=2, batch_size=4, generator=torch.Generator().manual_seed(0)))
    assert all(torch.equal(a[0], b[0]) for a, b in zip(batches, again))
    with pytest.raises(ValueError, match="share their first dimension"):
        next(minibatches((x, y[:3]), 1))


def test_train_reduces_loss_and_accuracy_ignores_label():
    g = seed_everything(0)
    x = torch.randn(64, 3, generator=g)
    y = (x[:, 0] > 0).long()
    model = nn.Linear(3, 2)
    hist = train(
        model, lambda m, b: nn.functional.cross_entropy(m(b[0]), b[1]), minibatches((x, y), 30, 16, g), lr=0.05
    )
    assert hist.losses[-1] < hist.losses[0] / 3
    assert accuracy(model(x), y) > 0.9
    logits = torch.tensor([[2.0, 0.0], [0.0, 2.0], [2.0, 0.0]])
    assert accuracy(logits, torch.tensor([0, 0, -1]), ignore_index=-1) == 0.5
    assert fmt(0.123456) == "0.123" and fmt(1234.5, 2) == "1.2e+03"


def test_tie_split_accuracy_by_hand():
    counts = torch.tensor([[3, 1, 0], [2, 2, 0], [1, 1, 1], [0, 5, 5]])
    y = torch.tensor([0, 1, 2, 0])
    # 1 (sole max), 1/2 (two-way tie), 1/3 (three-way tie), 0 (target not among the maxima)
    assert tie_split_accuracy(counts, y) == pytest.approx((1 + 1 / 2 + 1 / 3 + 0) / 4)
    assert tie_split_accuracy(counts.float(), torch.tensor([1, 0, 0, 2])) == pytest.approx(
        (0 + 1 / 2 + 1 / 3 + 1 / 2) / 4
    )
    with pytest.raises(ValueError, match="counts must be"):
        tie_split_accuracy(counts[0], y[:1])
    with pytest.raises(ValueError):
        tie_split_accuracy(counts[:0], y[:0])
