"""alpha-entmax with a tensor alpha: a learned scalar alpha and one alpha per row, as in the
``entmax`` package, with values and gradients (in e and in alpha) checked against ``entmax.entmax_bisect``
and by ``torch.autograd.gradcheck`` in float64."""

from __future__ import annotations

import entmax
import pytest
import torch

from attnsurvey._checks import InputTypeError
from attnsurvey.general_mechanisms import sparse_maps as sm


def scores(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("value", [0.6, 1.3, 1.5, 2.0, 3.0])
def test_learned_scalar_alpha_matches_entmax_values_and_gradients(value):
    e = scores(3, 7)
    w = scores(3, 7, seed=1)
    ours_e, ref_e = e.clone().requires_grad_(), e.clone().requires_grad_()
    ours_a = torch.tensor(value, dtype=torch.float64, requires_grad=True)
    ref_a = torch.tensor(value, dtype=torch.float64, requires_grad=True)
    a, r = sm.entmax_bisect(ours_e, ours_a), entmax.entmax_bisect(ref_e, ref_a, n_iter=100)
    torch.testing.assert_close(a, r, rtol=0, atol=1e-12)
    (a * w).sum().backward()
    (r * w).sum().backward()
    torch.testing.assert_close(ours_e.grad, ref_e.grad, rtol=0, atol=1e-10)
    torch.testing.assert_close(ours_a.grad, ref_a.grad, rtol=1e-8, atol=1e-10)


def test_one_alpha_per_row_matches_entmax_in_both_layouts():
    e = scores(2, 3, 6)
    alpha = torch.tensor([[1.2, 1.7, 2.4], [0.8, 1.5, 3.0]], dtype=torch.float64)
    w = scores(2, 3, 6, seed=2)
    ref_a = alpha[..., None].clone().requires_grad_()  # the entmax package's layout: size 1 along dim
    r = entmax.entmax_bisect(e, ref_a, n_iter=100)
    (r * w).sum().backward()
    for given in (alpha, alpha[..., None]):  # one per row (e's shape without dim), and the package's layout
        ours_a = given.clone().requires_grad_()
        a = sm.entmax_bisect(e, ours_a)
        torch.testing.assert_close(a, r, rtol=0, atol=1e-12)
        (a * w).sum().backward()
        torch.testing.assert_close(ours_a.grad.reshape(alpha.shape), ref_a.grad[..., 0], rtol=1e-8, atol=1e-10)
    # broadcast: one alpha per query row shared over the batch, and along another dim
    per_query = torch.tensor([1.2, 1.7, 2.4], dtype=torch.float64)
    torch.testing.assert_close(
        sm.entmax_bisect(e, per_query), entmax.entmax_bisect(e, per_query.expand(2, 3)[..., None], n_iter=100)
    )
    torch.testing.assert_close(
        sm.entmax_bisect(e.transpose(-1, -2), alpha, dim=-2),
        entmax.entmax_bisect(e, alpha[..., None], n_iter=100).transpose(-1, -2),
    )


def test_gradcheck_in_e_and_alpha_float64():
    e = scores(4, 5).requires_grad_()
    per_row = torch.tensor([0.6, 1.0, 1.4, 2.5], dtype=torch.float64, requires_grad=True)  # alpha = 1: the limit
    assert torch.autograd.gradcheck(lambda x, a: sm.entmax_bisect(x, a), (e, per_row))
    scalar = torch.tensor(1.7, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([True, True, False, True, True])
    assert torch.autograd.gradcheck(lambda x, a: sm.entmax_bisect(x, a, mask), (e, scalar))
    near_one = torch.tensor(1.0 + 1e-7, dtype=torch.float64, requires_grad=True)  # the limit form, |alpha - 1| small
    assert torch.autograd.gradcheck(lambda x, a: sm.entmax_bisect(x, a), (e, near_one), atol=1e-5)


def test_alpha_one_in_a_tensor_is_the_softmax():
    e = scores(3, 5)
    a = sm.entmax_bisect(e, torch.tensor([1.0, 2.0, 1.0], dtype=torch.float64))
    torch.testing.assert_close(a[0], torch.softmax(e[0], -1))
    torch.testing.assert_close(a[1], sm.sparsemax(e[1]), rtol=0, atol=1e-10)


def test_tensor_alpha_of_another_dtype_and_a_float_tensor_below_one():
    e = scores(2, 5)
    # the old message said "alpha must be > 0" for tensor(0.2): a type test folded into the range test
    got = sm.entmax_bisect(e, torch.tensor(0.2))
    torch.testing.assert_close(got, entmax.entmax_bisect(e, torch.tensor(0.2, dtype=torch.float64), n_iter=100))


@pytest.mark.parametrize(
    ("alpha", "kind", "words"),
    [
        (torch.tensor(0.0), ValueError, "finite and > 0"),
        (torch.tensor([1.5, float("nan")]), ValueError, "nan"),
        (torch.tensor(2), InputTypeError, "dtype=torch.int64"),
        ("1.5", InputTypeError, "builtins.str"),
        (torch.ones(3), ValueError, "one alpha per row"),
        (torch.ones(2, 5), ValueError, "size 1 along dim"),
    ],
)
def test_bad_tensor_alpha_is_named(alpha, kind, words):
    with pytest.raises(kind, match="alpha") as info:
        sm.entmax_bisect(scores(2, 5), alpha)
    assert words in str(info.value)


def test_loss_refuses_a_tensor_alpha_clearly():
    with pytest.raises(InputTypeError, match="Python number"):
        sm.entmax_bisect_loss(scores(2, 5), torch.tensor([0, 1]), torch.tensor(1.5))
