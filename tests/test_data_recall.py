"""Tests for the recall task generators: shapes, seeds, targets by brute force, no leaked answer."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from attnsurvey.data import recall as R
from attnsurvey.data.sequences import IGNORE


def _g(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _same(make: Callable[[torch.Generator], tuple[torch.Tensor, torch.Tensor]]) -> None:
    """The same seed gives the same batch, another seed another one."""
    a, b, c = make(_g(3)), make(_g(3)), make(_g(4))
    assert all(torch.equal(s, t) for s, t in zip(a, b))
    assert not torch.equal(a[0], c[0])


def test_mqar_shapes_seeds_and_brute_force_targets():
    x, y = R.mqar_batch(16, 5, 3, 8, 10, _g())
    assert x.shape == y.shape == (16, 13)
    _same(lambda g: R.mqar_batch(4, 5, 3, 8, 10, g))
    for row_x, row_y in zip(x.tolist(), y.tolist()):
        store = {}
        for i in range(5):
            k, v = row_x[2 * i], row_x[2 * i + 1]
            assert 0 <= k < 8 and 8 <= v < 18 and k not in store  # keys distinct, roles by range
            store[k] = v
        assert row_y[:10] == [IGNORE] * 10  # the loss counts the queries only
        queries = row_x[10:]
        assert len(set(queries)) == 3 and all(q in store for q in queries)
        assert row_y[10:] == [store[q] for q in queries]
        assert all(t not in row_x[10:] for t in row_y[10:])  # no answer in the query part


def test_needle_brute_force_and_no_leak():
    x, y = R.needle_batch(200, 12, 4, 6, 5, _g())
    assert x.shape == y.shape == (200, 12)
    _same(lambda g: R.needle_batch(4, 12, 4, 6, 5, g))
    for row_x, row_y in zip(x.tolist(), y.tolist()):
        keys = [i for i, t in enumerate(row_x[:-1]) if t < 4]
        assert len(keys) == 1 and row_x[-1] == row_x[keys[0]]  # one needle, its key asked at the end
        assert row_y[:-1] == [IGNORE] * 11 and row_y[-1] == row_x[keys[0] + 1]
        assert sum(4 <= t < 10 for t in row_x) == 1  # the value appears once, in the needle
        assert all(t >= 10 for i, t in enumerate(row_x[:-1]) if i not in (keys[0], keys[0] + 1))
    positions = {row.index(row[-1]) for row in x.tolist()}
    assert positions == set(range(10))  # every position 0 .. n-3 is used


@pytest.mark.parametrize("n_distractors", [1, 4, 7])
def test_distractor_brute_force(n_distractors):
    x, y = R.distractor_batch(64, n_distractors, 9, 12, _g(n_distractors))
    m = 1 + n_distractors
    assert x.shape == y.shape == (64, 3 * m + 2)
    _same(lambda g: R.distractor_batch(4, n_distractors, 9, 12, g))
    for row_x, row_y in zip(x.tolist(), y.tolist()):
        items = [tuple(row_x[3 * i : 3 * i + 3]) for i in range(m)]
        a, b = row_x[-2], row_x[-1]
        exact = [v for p, q, v in items if (p, q) == (a, b)]
        assert len(exact) == 1 and row_y[-1] == exact[0] and row_y[:-1] == [IGNORE] * (3 * m + 1)
        assert all(p < 9 and q < 9 and 9 <= v < 21 for p, q, v in items)
        near = [(p, q) for p, q, _ in items if (p, q) != (a, b)]
        assert all((p == a) != (q == b) for p, q in near)  # every distractor shares exactly one half
        assert len(set(near)) == n_distractors
        assert sum(p == a for p, _ in near) == (n_distractors + 1) // 2


def test_bad_sizes_are_named():
    assert R.mqar_batch(2, 5, None, 8, 4, _g())[0].shape == (2, 15)  # None: every stored key is asked
    with pytest.raises(ValueError, match="n_queries <= n_pairs <= n_keys"):
        R.mqar_batch(2, 5, 6, 8, 4, _g())
    with pytest.raises(ValueError, match="n_keys"):
        R.mqar_batch(2, 9, 3, 8, 4, _g())
    with pytest.raises(ValueError, match="n=2"):
        R.needle_batch(2, 2, 4, 4, 4, _g())
    with pytest.raises(ValueError, match="n_distractors=0"):
        R.distractor_batch(2, 0, 4, 4, _g())
    with pytest.raises(ValueError, match="n_keys=2"):
        R.distractor_batch(2, 4, 2, 4, _g())
    with pytest.raises(TypeError, match="batch"):
        R.mqar_batch(2.5, 2, 1, 4, 4, _g())  # type: ignore[arg-type]
