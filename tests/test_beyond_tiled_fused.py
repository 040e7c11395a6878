"""The fused-tile version of tiled attention: the teaching version's result, gradients and memory bound."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from attnsurvey.beyond.tiled import tiled_attend
from attnsurvey.beyond.tiled_fused import FUSED_BLOCK_K, FUSED_BLOCK_Q, fused_tiled_attend
from attnsurvey.general_model import attend
from attnsurvey.masking import causal_mask

from .helpers import rand


def qkv(b=2, n_q=37, n_f=37, d=16, d_v=None, dtype=torch.float32, seed=0):
    d_v = d if d_v is None else d_v
    return (
        rand(b, n_q, d, seed=seed, dtype=dtype),
        rand(b, n_f, d, seed=seed + 1, dtype=dtype),
        rand(b, n_f, d_v, seed=seed + 2, dtype=dtype),
    )


TILINGS = [
    (37, 37, 8, 5),
    (37, 53, 16, 16),
    (53, 37, 16, 8),
    (64, 64, 64, 64),
    (1, 1, 4, 4),
    (1, 9, 1, 2),
    (9, 1, 3, 1),
]


@pytest.mark.catalog("extra:tiled-attention")
@pytest.mark.parametrize("n_q,n_f,bq,bk", TILINGS)
@pytest.mark.parametrize("is_causal", [False, True])
def test_equals_teaching_version_to_float32_rounding(n_q, n_f, bq, bk, is_causal):
    Q, K, V = qkv(n_q=n_q, n_f=n_f, d_v=12)  # d_v != d_k: the kernel's single head size is padded
    fast = fused_tiled_attend(Q, K, V, is_causal=is_causal, block_q=bq, block_k=bk)
    teach = tiled_attend(Q, K, V, is_causal=is_causal, block_q=bq, block_k=bk)
    torch.testing.assert_close(fast, teach, atol=2e-6, rtol=0)


@pytest.mark.parametrize("n_q,n_f,bq,bk", TILINGS)
@pytest.mark.parametrize("is_causal", [False, True])
def test_gradients_match_float64_autograd_of_attend(n_q, n_f, bq, bk, is_causal):
    Q, K, V = (x.requires_grad_() for x in qkv(n_q=n_q, n_f=n_f, d_v=12, dtype=torch.float64))
    dO = rand(2, n_q, 12, seed=9, dtype=torch.float64)
    fast = fused_tiled_attend(Q, K, V, is_causal=is_causal, block_q=bq, block_k=bk)
    ref = attend(Q, K, V, causal_mask(n_q, n_f) if is_causal else None)[0]
    torch.testing.assert_close(fast, ref, atol=1e-13, rtol=0)
    for a, b in zip(torch.autograd.grad(fast, (Q, K, V), dO), torch.autograd.grad(ref, (Q, K, V), dO), strict=True):
        torch.testing.assert_close(a, b, atol=1e-13, rtol=0)


def test_gradcheck_causal_uneven_tiles():
    Q, K, V = (x.requires_grad_() for x in qkv(b=1, n_q=21, n_f=17, d=8, dtype=torch.float64, seed=3))
    fn = lambda q, k, v: fused_tiled_attend(q, k, v, is_causal=True, block_q=8, block_k=5)
    if not torch.autograd.gradcheck(fn, (Q, K, V)):
        raise AssertionError("gradcheck failed")


def test_batch_broadcast_low_precision_and_defaults():
    Q = rand(3, 1, 40, 16, seed=1)
    K, V = rand(1, 2, 50, 16, seed=2), rand(1, 2, 50, 16, seed=3)
    fast = fused_tiled_attend(Q, K, V, block_q=16, block_k=16)
    torch.testing.assert_close(fast, tiled_attend(Q, K, V), atol=2e-6, rtol=0)
    half = fused_tiled_attend(Q.half(), K.half(), V.half(), is_causal=True)
    assert half.dtype == torch.float16
    torch.testing.assert_close(half, tiled_attend(Q.half(), K.half(), V.half(), is_causal=True))
    assert (FUSED_BLOCK_Q, FUSED_BLOCK_K) == (2048, 2048)


def test_empty_inputs_and_refusals():
    Q, K, V = qkv(n_q=5, n_f=0)
    assert torch.equal(fused_tiled_attend(Q, K, V), torch.zeros(2, 5, 16))
    Q, K, V = qkv(n_q=0, n_f=5)
    assert fused_tiled_attend(Q, K, V).shape == (2, 0, 16)
    Q, K, V = qkv()
    with pytest.raises(ValueError, match="dropout"):
        fused_tiled_attend(Q, K, V, dropout_p=0.1)
    with pytest.raises(TypeError, match="block_q"):
        fused_tiled_attend(Q, K, V, block_q=2.0)
    with pytest.raises(TypeError, match="unknown option"):
        fused_tiled_attend(Q, K, V, is_casual=True)


class _LargestTensor(TorchDispatchMode):
    """Records the largest number of elements of any tensor an operator returns."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize("is_causal", [False, True])
def test_memory_is_linear_in_n(is_causal):
    """No operator returns an n x n tensor: the largest is an input/output (n x d) or one tile (b_q x b_k).

    A count of elements, not a timing or an RSS reading: at n = 2048, d = 16 the n x n scores would
    have 4,194,304 elements, the inputs have 32,768, a 256 x 128 tile 32,768. (The kernel's own
    buffers are per its internal blocks, not per tile or per n.)
    """
    n, d, bq, bk = 2048, 16, 256, 128
    Q, K, V = (x.requires_grad_() for x in qkv(b=1, n_q=n, n_f=n, d=d, seed=5))
    with _LargestTensor() as seen:
        out = fused_tiled_attend(Q, K, V, is_causal=is_causal, block_q=bq, block_k=bk)
        torch.autograd.grad(out, (Q, K, V), torch.ones_like(out))
    if seen.largest > max(n * d, bq * bk):
        raise AssertionError(f"an operator returned {seen.largest} elements, more than max(n d, b_q b_k)")
    with _LargestTensor() as plain:  # the control: plain attention does form the n x n matrix
        attend(Q.detach(), K.detach(), V.detach())
    if plain.largest < n * n:
        raise AssertionError("the control did not see the n x n scores")


def test_an_empty_batch_gives_an_empty_context():
    """torch's CPU flash kernel stops the process (a division by zero) on a batch of size 0: it is never called."""
    Q, K, V = torch.randn(0, 3, 4), torch.randn(0, 5, 4), torch.randn(0, 5, 6)
    assert fused_tiled_attend(Q, K, V).shape == (0, 3, 6)
