"""Findings of the edge-case sweep's third pass in the core files (attention, multi-head, search) and in two
functions whose source a chapter prints (residual_norm, location_score): regression tests, each stating the
expected behaviour. Scores beyond float32's range, once a strict xfail, are now refused by name."""

from __future__ import annotations

import pytest
import torch

from attnsurvey.attention import attend, uniform_align
from attnsurvey.beyond.search import length_penalty
from attnsurvey.general_mechanisms.scoring import location_score
from attnsurvey.query_related import multihead
from attnsurvey.transformer.model import residual_norm


def rng(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def test_attend_with_empty_keys_and_no_weights_returns_the_mean_of_the_values():
    Q, K, V = rng(2, 3, 0), rng(2, 5, 0), rng(2, 5, 4)
    c_with = attend(Q, K, V)[0]
    torch.testing.assert_close(c_with, V.mean(-2, keepdim=True).expand(2, 3, 4))  # the documented d_k = 0 case
    c_without = attend(Q, K, V, need_weights=False)[0]
    torch.testing.assert_close(c_without, c_with)


def test_attend_refuses_scores_beyond_float32_with_a_named_error():
    """Finite float32 Q, K whose scores q . k (~1e40) exceed float32 would give NaN weights (as torch's
    scaled_dot_product_attention does): attend says why instead; float64 computes them."""
    Q, K, V = rng(2, 3, 4) * 1e20, rng(2, 5, 4, seed=1) * 1e20, rng(2, 5, 4, seed=2)
    assert torch.isfinite(attend(Q, K, V)[0]).all()
    for need_weights in (True, False):  # the weights path and the SDPA path
        with pytest.raises(ValueError, match=r"Q \(2, 3, 4\) and K \(2, 5, 4\) overflow torch\.float32"):
            attend(Q.float(), K.float(), V.float(), need_weights=need_weights)
    # a masked key may overflow: it is inert, so the call succeeds (unmasked, it is refused)
    Kf = rng(2, 5, 4, seed=1, dtype=torch.float32)
    Kf[:, 0] = 1e30  # q . k ~ 1e50 for this key only
    keep = torch.tensor([[False, True, True, True, True]]).expand(2, 5)
    assert torch.isfinite(attend(Q.float(), Kf, V.float(), key_padding_mask=keep)[0]).all()
    with pytest.raises(ValueError, match="overflow"):
        attend(Q.float(), Kf, V.float())
    # a NaN in an attended value is not an overflow: NaN comes back, as documented
    V_nan = V.float().clone()
    V_nan[0, 1, 0] = float("nan")
    assert torch.isnan(attend(Q.float() * 1e-20, K.float() * 1e-20, V_nan)[0]).any()


def test_a_finite_context_whose_sum_overflows_is_not_refused():
    """The overflow guard first sums the context (one reduction); finite values near float32's largest, whose sum
    is infinite, take the exact path, which finds finite scores and lets the call through."""
    Q, K = rng(2, 3, 4, dtype=torch.float32), rng(2, 5, 4, seed=1, dtype=torch.float32)
    V = torch.full((2, 5, 4), 1.0e38)  # every context entry is near 1e38: finite, their sum is not
    for need_weights in (True, False):
        c = attend(Q, K, V, need_weights=need_weights)[0]
        assert torch.isfinite(c).all() and not torch.isfinite(c.sum())


@pytest.mark.parametrize("conv", [lambda t: t.tolist(), lambda t: t.numpy()])
def test_uniform_align_refuses_a_list_with_a_named_error(conv):
    with pytest.raises(TypeError, match=r"\be must be a torch.Tensor"):
        uniform_align(conv(rng(2, 5)))


def test_disagreement_regulariser_near_1e20_agrees_with_float64():
    heads = rng(2, 2, 3, 4) * 1e20
    ref = multihead.disagreement_regularisation(heads)
    got = multihead.disagreement_regularisation(heads.float())
    torch.testing.assert_close(got.double(), ref, rtol=1e-4, atol=1e-5)


def test_split_heads_names_a_non_integer_head_count():
    with pytest.raises(ValueError, match="h"):
        multihead.split_heads(rng(2, 3, 5), 2.5)  # type: ignore[arg-type]  # 5 % 2.5 == 0: reaches the reshape


def test_length_penalty_refuses_negative_lengths():
    with pytest.raises(ValueError, match="lengths"):
        length_penalty(torch.tensor([-1, 3]), 0.6)


def test_residual_norm_refuses_a_list_with_a_named_error():
    with pytest.raises(ValueError, match="X must be a torch.Tensor"):
        residual_norm([[1.0, 2.0]], torch.tanh, torch.tanh, True)  # type: ignore[arg-type]


def test_location_score_names_a_fractional_n_f():
    with pytest.raises(ValueError, match="n_f"):
        location_score(rng(2, 3, 4), rng(5, 4), 2.5)  # type: ignore[arg-type]


def test_the_multi_head_stack_refuses_scores_beyond_float32():
    mha = multihead.MultiHeadAttention(8, 2)
    X = rng(2, 5, 8, dtype=torch.float32) * 1e20
    with pytest.raises(ValueError, match=r"overflow torch\.float32"):
        mha(X)
    assert torch.isfinite(mha(X * 1e-20)[0]).all()


def test_shared_qk_keys_of_about_1e20_keep_their_direction_in_float32():
    from attnsurvey.transformer.reformer import shared_qk_attention

    QK, V = rng(2, 6, 4) * 1e20, rng(2, 6, 3, seed=1)
    ref = shared_qk_attention(QK, V)[0]
    got = shared_qk_attention(QK.float(), V.float())[0]  # the key norms (~1e20) were inf: every key was 0
    torch.testing.assert_close(got.double(), ref, rtol=1e-4, atol=1e-5)


def test_multi_hop_attention_refuses_scores_beyond_float32():
    from attnsurvey.query_related.multihop import MultiHopAttention

    torch.manual_seed(0)
    m = MultiHopAttention(4, 4, n_hops=2)
    q0, F = rng(2, 4, dtype=torch.float32), rng(2, 5, 4, seed=1, dtype=torch.float32)
    assert torch.isfinite(m(q0, F)[0]).all()
    with pytest.raises(ValueError, match=r"multi-hop attention: .*overflow torch\.float32"):
        m(q0, F * 1e20)


def test_the_overflow_check_saves_nothing_for_backward():
    """The check reads the context after the fact; autograd must not keep a copy of it (isfinite of a tensor that
    requires grad would save it)."""
    from attnsurvey.attention import CoreSettings, attend_unchecked
    from attnsurvey.transformer.reformer import saved_activation_bytes

    Q, K, V = (rng(1, 16, 8, seed=s).requires_grad_(True) for s in range(3))
    checked = saved_activation_bytes(lambda q, k, v: attend(q, k, v)[0], Q, K, V)
    unchecked = saved_activation_bytes(lambda q, k, v: attend_unchecked(q, k, v, CoreSettings())[0], Q, K, V)
    assert checked == unchecked
    mha = multihead.MultiHeadAttention(8, 2)
    X = rng(1, 16, 8, dtype=torch.float32)
    kept = saved_activation_bytes(mha, X)
    assert kept == saved_activation_bytes(lambda x: mha(x, need_weights=True)[0], X)
