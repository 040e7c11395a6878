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


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, "mixed"])
@pytest.mark.parametrize("max_norm", [1e-3, 1.0, 1e6])
def test_train_clips_with_the_bits_of_torch_clip_grad_norm(dtype, max_norm):
    """train's gradient clipping (_clip_grad_norm) leaves every gradient with the bits of nn.utils.clip_grad_norm_:
    clipped hard, barely and not at all, one parameter without a gradient, one dtype (its own path) or mixed
    dtypes (torch's function)."""
    from attnsurvey.training import _clip_grad_norm

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3), torch.nn.Linear(3, 2))
    model.double() if dtype == torch.float64 else model[2].double() if dtype == "mixed" else None
    x = torch.randn(4, 5, dtype=model[0].weight.dtype)
    out = model[3](model[2](model[1](model[0](x)).to(model[2].weight.dtype)).to(model[3].weight.dtype))
    out.square().sum().backward()
    model[3].bias.grad = None  # a parameter without a gradient is skipped
    params = list(model.parameters())
    grads = [None if p.grad is None else p.grad.clone() for p in params]
    torch.nn.utils.clip_grad_norm_(params, max_norm)
    want = [None if p.grad is None else p.grad.clone() for p in params]
    for p, g in zip(params, grads, strict=True):
        p.grad = None if g is None else g.clone()
    _clip_grad_norm(params, max_norm)
    got = [p.grad for p in params]
    assert all((a is None and b is None) or torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert max_norm > 1 or not all(torch.equal(a, b) for a, b in zip(got[:3], grads[:3], strict=True))
