"""Which kernel the attention core runs (dispatch_reason), graph breaks, and its edge cases."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F_

from attnsurvey import attention as at
from attnsurvey import masking as mk
from attnsurvey.query_related.multihead import MultiHeadAttention, multi_head_attention
from attnsurvey.query_related.torch_mha import TorchMultiheadAttention

from .helpers import rand

D64 = torch.float64


def qkv(n_q=4, n_f=5, d=6):
    return (
        rand(2, 3, n_q, d, seed=0, dtype=D64),
        rand(2, 3, n_f, d, seed=1, dtype=D64),
        rand(2, 3, n_f, d, seed=2, dtype=D64),
    )


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({}, "need_weights"),
        ({"need_weights": False, "score": lambda q, k: q @ k.mT}, "score"),
        ({"need_weights": False, "align": "sparsemax"}, "align"),
        ({"need_weights": False, "dropout_p": 0.5, "generator": torch.Generator()}, "generator"),
        ({"need_weights": False, "empty": True}, "empty"),
    ],
)
def test_dispatch_reason_names_what_keeps_attend_off_the_sdpa_kernel(kwargs, reason, monkeypatch):
    assert at.dispatch_reason(**kwargs).startswith(reason)
    # the oracle: whether F.scaled_dot_product_attention really runs
    calls = []
    real = F_.scaled_dot_product_attention
    monkeypatch.setattr(F_, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    Q, K, V = qkv(n_f=0 if kwargs.pop("empty", False) else 5)
    at.attend(Q, K, V, **kwargs)
    assert not calls


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"mask": rand(4, 5, seed=3) > 0, "bias": rand(4, 5, seed=4, dtype=D64)},
        {"is_causal": True, "scale": 0.5, "score": "multiplicative"},
        {"dropout_p": 0.3},
    ],
)
def test_dispatch_reason_is_none_exactly_when_sdpa_runs(kwargs, monkeypatch):
    assert at.dispatch_reason(kwargs.get("score"), need_weights=False, dropout_p=kwargs.get("dropout_p", 0.0)) is None
    calls = []
    real = F_.scaled_dot_product_attention
    monkeypatch.setattr(F_, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    at.attend(*qkv(), need_weights=False, **kwargs)
    assert calls == [1]


def test_zero_graph_breaks_in_masked_attend_and_the_multi_head_forward():
    dynamo = pytest.importorskip("torch._dynamo")
    Q, K, V = (torch.randn(2, 4, 8, 16) for _ in range(3))
    kpm = mk.key_padding_mask(torch.tensor([8, 3]), 8)
    dynamo.reset()
    explained = dynamo.explain(lambda Q, K, V, m: at.attend(Q, K, V, m, need_weights=False))(
        Q, K, V, kpm[:, None, None, :]
    )
    assert explained.graph_break_count == 0, explained.break_reasons
    mha = MultiHeadAttention(32, 4)
    explained = dynamo.explain(lambda X, m: mha(X, key_padding_mask=m))(torch.randn(2, 8, 32), kpm)
    assert explained.graph_break_count == 0, explained.break_reasons
    dynamo.reset()


def test_masked_nan_stays_inert_on_the_kernel_path_for_key_and_query_masks():
    Q, K, V = qkv()
    K[..., 4, :], V[..., 3, :] = float("nan"), float("inf")
    kpm = torch.tensor([True, True, True, False, False])
    c, _ = at.attend(Q, K, V, key_padding_mask=kpm.expand(2, 3, 5), need_weights=False)
    ref = F_.scaled_dot_product_attention(Q[..., :], K[..., :3, :], V[..., :3, :])
    torch.testing.assert_close(c, ref)
    per_query = torch.ones(4, 5, dtype=torch.bool)
    per_query[:2, 3:] = False  # queries 0, 1 may not see the bad rows; 2, 3 may
    c, _ = at.attend(Q, K, V, per_query[None, None], need_weights=False)
    torch.testing.assert_close(c[..., :2, :], ref[..., :2, :])
    assert torch.isnan(c[..., 2:, :]).all()


def test_d_k_zero_gives_the_mean_of_the_allowed_values_as_sdpa():
    Q, K, V = torch.zeros(2, 3, 4, 0, dtype=D64), torch.zeros(2, 3, 5, 0, dtype=D64), rand(2, 3, 5, 2, dtype=D64)
    mask = torch.tensor([True, True, False, True, False])
    for need in (True, False):
        c, _ = at.attend(Q, K, V, need_weights=need)
        torch.testing.assert_close(c, V.mean(-2, keepdim=True).expand(2, 3, 4, 2))
        torch.testing.assert_close(c, F_.scaled_dot_product_attention(Q, K, V))
        c, _ = at.attend(Q, K, V, mask, need_weights=need)
        torch.testing.assert_close(c, V[..., mask, :].mean(-2, keepdim=True).expand(2, 3, 4, 2))


@pytest.mark.parametrize("align", ["hard", "softmax", "sparsemax", "uniform"])
def test_an_empty_key_set_gives_empty_weights(align):
    a = at.align_scores(torch.zeros(2, 3, 0), None, align)
    assert a.shape == (2, 3, 0)
    assert at.argmax_align(torch.zeros(2, 3, 0)).shape == (2, 3, 0)


def test_key_padding_mask_refuses_fractional_lengths():
    with pytest.raises(ValueError, match="whole numbers"):
        mk.key_padding_mask(torch.tensor([1.5, 2.0]), 3)
    assert torch.equal(mk.key_padding_mask(torch.tensor([1.0, 2.0]), 3), mk.key_padding_mask(torch.tensor([1, 2]), 3))


@pytest.mark.parametrize("convert", [lambda t: t.tolist(), lambda t: t.numpy()])
def test_lists_and_arrays_are_refused_with_one_type_error(convert):
    e = rand(2, 3, 4)
    calls = [
        lambda: at.align_scores(convert(e)),
        lambda: at.argmax_align(convert(e)),
        lambda: mk.masked_mean(convert(e)),
        lambda: MultiHeadAttention(4, 2)(convert(e)),
        lambda: TorchMultiheadAttention(4, 2)(convert(e), e, e),
        lambda: multi_head_attention(convert(e), e, e, *(torch.eye(4),) * 4, 2),
    ]
    for call in calls:
        with pytest.raises(TypeError, match="must be a torch.Tensor"):
            call()
