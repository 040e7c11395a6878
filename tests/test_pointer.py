"""Tests for pointer networks (nndl 8.2.1.5): the alignment is the output."""

from __future__ import annotations

import pytest
import torch

from attnsurvey.data.sorting import sorting_batch, sorting_batches
from attnsurvey.general_mechanisms import pointer as pn
from attnsurvey.training import seed_everything, train

from .helpers import rand

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread avoids oversubscription


@pytest.mark.catalog("extra:pointer-network")
def test_pointer_scores_match_loop():
    H, h = rand(2, 5, 4), rand(2, 3, 6, seed=1)
    W, U, v = rand(7, 4, seed=2), rand(7, 6, seed=3), rand(7, seed=4)
    s = pn.pointer_scores(H, h, W, U, v)
    assert s.shape == (2, 3, 5)
    for b in range(2):
        for m in range(3):
            for n in range(5):
                ref = v @ torch.tanh(W @ H[b, n] + U @ h[b, m])  # nndl Eq. (8.15)
                torch.testing.assert_close(s[b, m, n], ref)


@pytest.mark.catalog("extra:pointer-network")
def test_pointer_log_probs_mask_used_positions():
    s = torch.tensor([[1e4, 0.0, -1e4, 2.0]])
    free = torch.tensor([[False, True, True, True]])
    logp = pn.pointer_log_probs(s, free)
    p = logp.exp()
    torch.testing.assert_close(p.sum(-1), torch.ones(1))
    assert p[0, 0] == 0 and torch.isfinite(logp).all()
    torch.testing.assert_close(p[0, [1, 3]], torch.softmax(torch.tensor([0.0, 2.0]), -1))
    torch.testing.assert_close(pn.pointer_log_probs(s[:, 1:]), torch.log_softmax(s[:, 1:], -1))


@pytest.mark.catalog("extra:pointer-network")
def test_outputs_are_permutations():
    torch.manual_seed(0)
    model = pn.PointerNetwork(1, 8, 8)
    x, targets = sorting_batch(16, 6, torch.Generator().manual_seed(0))
    logp, ptr = model(x)
    assert logp.shape == (16, 6, 6) and ptr.shape == (16, 6)
    assert torch.equal(ptr.sort(-1).values, torch.arange(6).expand(16, 6))  # each input pointed to once
    torch.testing.assert_close(logp.exp().sum(-1), torch.ones(16, 6))
    assert torch.equal(x.squeeze(-1).gather(1, targets), x.squeeze(-1).sort(-1).values)
    loss = pn.pointer_loss(model, (x, targets))
    loss.backward()
    assert torch.isfinite(loss) and model.v.grad is not None


@pytest.mark.catalog("extra:pointer-network")
def test_learns_to_sort_book_example():
    g = seed_everything(0)
    model = pn.PointerNetwork(1, 16, 16)
    hist = train(model, pn.pointer_loss, sorting_batches(120, 64, 3, 3, g), lr=1e-2)
    assert hist.losses[-1] < 0.3 * hist.losses[0]
    with torch.no_grad():
        _, ptr = model(torch.tensor([[[20.0], [5.0], [10.0]]]) / 100)  # 20, 5, 10
        assert ptr.tolist() == [[1, 2, 0]]  # -> 5, 10, 20
        x, t = sorting_batch(300, 3, torch.Generator().manual_seed(5))
        _, ptr = model(x)
    assert (ptr == t).all(-1).float().mean() > 0.85


@pytest.mark.catalog("extra:pointer-network")
def test_bad_inputs():
    model = pn.PointerNetwork(1, 4, 4)
    with pytest.raises(ValueError, match=r"PointerNetwork needs d_x of x == d_x of the module, got d_x of x=2"):
        model(torch.zeros(2, 3, 2))
    with pytest.raises(ValueError, match=r"x must have shape \(B, N, d_x\)"):
        model(torch.zeros(3, 1))
    with pytest.raises(ValueError, match="x is empty: N=0"):
        model(torch.zeros(2, 0, 1))
    with pytest.raises(ValueError, match=r"targets must have shape \(B, N\) = \(2, 3\)"):
        model(torch.zeros(2, 3, 1), torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="n_min <= n_max"):
        next(sorting_batches(1, 4, 5, 3))
    with pytest.raises(ValueError, match="batch >= 1 and n >= 1"):
        sorting_batch(0, 3)
