"""Non-finite scores and degenerate inputs across components: infinities in the sparse maps, dtype-aware
fills of the pointer, float16 and integer inputs of the Reformer, memory length 0 of Transformer-XL, empty batches."""

from __future__ import annotations

import pytest
import torch

from attnsurvey.general_mechanisms.sparse_maps import entmax15, sparsemax
from attnsurvey.transformer import reformer, transformer_xl

from .helpers import rand

INF = float("inf")


@pytest.mark.catalog("extra:sparsemax", "extra:entmax15")
@pytest.mark.parametrize("fn", [sparsemax, entmax15])
def test_sparse_maps_define_infinite_scores_and_agree_with_the_mask_path(fn):
    e = torch.tensor([[0.5, INF, 0.1], [1.0, -INF, 2.0], [-INF, -INF, -INF], [INF, 3.0, INF]], requires_grad=True)
    a = fn(e)
    assert torch.equal(a[0], torch.tensor([0.0, 1.0, 0.0]))  # one-hot on +inf
    torch.testing.assert_close(
        a[1], fn(torch.tensor([1.0, 0.0, 2.0]), torch.tensor([True, False, True]))
    )  # -inf = masked
    assert torch.equal(a[2], torch.zeros(3))  # a row of -inf is a fully-masked row
    assert torch.equal(a[3], torch.tensor([0.5, 0.0, 0.5]))  # several +inf share the weight
    a.sum().backward()
    assert torch.isfinite(e.grad).all()
    x = torch.tensor([0.3, float("nan"), 0.2])
    assert torch.isnan(fn(x)).any()  # NaN at an allowed position is not hidden
    assert torch.isfinite(fn(x, torch.tensor([True, False, True]))).all()  # but inert where masked


@pytest.mark.catalog("extra:reformer-lsh")
def test_reformer_works_in_float16_and_rejects_integer_inputs():
    QK, V = rand(1, 8, 4).half(), rand(1, 8, 3, seed=1).half()
    c, a = reformer.shared_qk_attention(QK, V)
    assert torch.isfinite(c).all() and torch.isfinite(a).all()
    assert reformer.self_score(torch.float16) > torch.finfo(torch.float16).min
    assert reformer.self_score(torch.float32) == reformer.SELF_SCORE
    out, _ = reformer.lsh_attention(
        QK.float(), V.float(), 2, 4, R=reformer.random_rotations(4, 2, torch.Generator().manual_seed(0))
    )
    assert torch.isfinite(out).all()
    with pytest.raises(TypeError, match="floating-point"):
        reformer.lsh_hash(torch.ones(2, 3, 4, dtype=torch.int64), torch.randn(4, 1), 2)


@pytest.mark.catalog("extra:transformer-xl")
def test_transformer_xl_memory_length_zero_keeps_no_memory():
    torch.manual_seed(0)
    m = transformer_xl.TransformerXLAttention(8, 2, mem_len=0)
    X = rand(2, 5, 8)
    _, mem, _ = m(X)
    assert mem.shape == (2, 0, 8)
    _, mem3, _ = transformer_xl.TransformerXLAttention(8, 2, mem_len=3)(X, rand(2, 4, 8, seed=1))
    assert mem3.shape == (2, 3, 8) and torch.equal(mem3, X[:, -3:])
    with pytest.raises(ValueError, match="mem_len must be >= 0"):
        transformer_xl.TransformerXLAttention(8, 2, mem_len=-1)


@pytest.mark.catalog("extra:pointer-network")
def test_pointer_log_probs_keep_allowed_positions_exact():
    from attnsurvey.general_mechanisms.pointer import pointer_log_probs

    s = torch.tensor([[0.0, -1000.0, 5.0]])
    mask = torch.tensor([[True, True, False]])
    lp = pointer_log_probs(s, mask)
    torch.testing.assert_close(
        lp[0, :2], torch.log_softmax(torch.tensor([0.0, -1000.0]), -1)
    )  # exact at -1000, not clipped to the dtype's fill value
    assert lp[0, 2] == torch.finfo(torch.float32).min
    assert torch.all(pointer_log_probs(s, torch.zeros(1, 3, dtype=torch.bool)) == torch.finfo(torch.float32).min)


def test_empty_batches_and_tiny_widths():
    from attnsurvey.general_mechanisms import alignment as al
    from attnsurvey.transformer.relative import gaussian_local_bias

    e = torch.zeros(0, 5)
    assert al.local_align(e, torch.zeros(0), 1.0).shape == (0, 5)
    assert al.window_mask(5, torch.zeros(0), 1).shape == (0, 5)
    G = gaussian_local_bias(torch.tensor([1.0]), torch.tensor([1e-30]), 3)
    assert not torch.isnan(G).any() and G[0, 1] == 0 and torch.isinf(G[0, 0])
