"""The step look-up task of ch03_2_2: a decoder step near, not on, the target position."""

from __future__ import annotations

import pytest
import torch

from attnsurvey.data.position_lookup import lookup_batch, step_lookup_batch


def test_shapes_and_labels_by_brute_force():
    n_f, C = 9, 5
    F, q, s, t, y = step_lookup_batch(300, n_f, C, 2, torch.Generator().manual_seed(0), noise=0.0)
    assert F.shape == (300, n_f, C + n_f) and q.shape == (300, n_f)
    assert s.shape == t.shape == y.shape == (300,)
    for i in range(300):
        tokens = [int(F[i, l, :C].argmax()) for l in range(n_f)]
        assert int(q[i].argmax()) == int(t[i]) and float(q[i].sum()) == 1.0
        assert int(y[i]) == tokens[int(t[i])]
        assert 0 <= int(s[i]) < n_f and abs(int(s[i]) - int(t[i])) <= 2


def test_every_shift_occurs_and_zero_shift_is_the_target():
    n_f = 12
    _, _, s, t, _ = step_lookup_batch(4000, n_f, 4, 3, torch.Generator().manual_seed(1))
    middle = (t >= 3) & (t <= n_f - 4)  # no clipping there: every shift in -3..3 is possible
    assert sorted(set((t - s)[middle].tolist())) == list(range(-3, 4))
    _, _, s0, t0, _ = step_lookup_batch(50, n_f, 4, 0, torch.Generator().manual_seed(2))
    assert torch.equal(s0, t0)


def test_features_are_those_of_lookup_batch():
    F, q, _, t, y = step_lookup_batch(20, 6, 3, 1, torch.Generator().manual_seed(3))
    F2, q2, t2, y2 = lookup_batch(20, 6, 3, torch.Generator().manual_seed(3))
    for a, b in ((F, F2), (q, q2), (t, t2), (y, y2)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("shift", [-1, 6])
def test_max_shift_outside_the_sequence_is_an_error(shift):
    with pytest.raises(ValueError, match="max_shift"):
        step_lookup_batch(4, 6, 3, shift)
