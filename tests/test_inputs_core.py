"""Bad inputs at the public entries of the attention core, the general model, multi-head attention and alignment.

Each bad input must raise a clear ``ValueError``/``TypeError`` from the package itself (never an
``AttributeError`` or an error from inside torch), and each defined edge case must give its
documented value.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnsurvey.attention import (
    align_scores,
    alpha_entmax_align,
    argmax_align,
    dispatch_reason,
    dropout_weights,
    softmax_align,
    uniform_align,
)
from attnsurvey.general_mechanisms.alignment import (
    LocalAttention,
    PredictivePosition,
    ReinforcedAlignment,
    concentration,
    gaussian_emphasis,
    soft_align,
    window_mask,
)
from attnsurvey.general_model import GeneralAttention, KeyValueMemory, OutputModel, TaskModel, align, output_model
from attnsurvey.masking import all_finite, masked_log_softmax, masked_softmax
from attnsurvey.query_related.multihead import (
    MultiHeadAttention,
    SelfAttentionVariant,
    disagreement_regularisation,
    merge_heads,
    split_heads,
)

BAD_SIZES = [0, -1, 2.5]


@pytest.mark.parametrize(
    "fn",
    [softmax_align, uniform_align, argmax_align, align_scores, masked_softmax, masked_log_softmax, soft_align, align],
)
def test_ambiguous_rank2_mask_is_refused(fn):
    e = torch.randn(3, 3, 5)  # B == n_q == 3: a (3, 5) mask could be per query or per example
    with pytest.raises(ValueError, match="ambiguous"):
        fn(e, torch.ones(3, 5, dtype=torch.bool))
    # the unambiguous spellings still run and agree with the per-example reading
    mask = torch.tensor([[True] * 5, [True, True, False, False, False], [False] * 4 + [True]])
    per_example = fn(e, mask[:, None, :])
    assert per_example.shape == e.shape


def test_memory_refuses_ambiguous_mask():
    mem = KeyValueMemory(torch.randn(5, 4), torch.randn(5, 2))
    with pytest.raises(ValueError, match="ambiguous"):
        mem(torch.randn(3, 3, 4), torch.ones(3, 5, dtype=torch.bool))


@pytest.mark.parametrize("bad", [np.zeros((2, 3)), [[0.0, 1.0, 2.0]]])
def test_non_tensor_inputs_raise_type_error(bad):
    for call in (
        lambda: align_scores(bad),
        lambda: argmax_align(bad),
        lambda: dropout_weights(bad, 0.5),
        lambda: split_heads(bad, 1),
        lambda: merge_heads(bad),
        lambda: output_model(torch.randn(3), bad, torch.randn(1)),
    ):
        with pytest.raises(TypeError, match="torch.Tensor"):
            call()
    with pytest.raises(TypeError, match="X must be a torch.Tensor"):
        all_finite(bad)


def test_all_finite_accepts_any_dtype():
    assert all_finite(torch.arange(3)) and not all_finite(torch.tensor([1.0, math.nan]))


def test_module_forwards_refuse_non_tensors():
    model = TaskModel(d_f=3, d_u=2, n_classes=2, d=4)
    with pytest.raises(TypeError, match="F must be"):
        model(torch.randn(2, 4, 3).numpy(), torch.randn(2, 2))
    with pytest.raises(TypeError, match="q must be"):
        model(torch.randn(2, 4, 3), torch.randint(0, 2, (2, 2)))
    with pytest.raises(TypeError, match="K must be"):
        LocalAttention(4, 4, 1.0)(torch.randn(4), torch.randn(5, 4).tolist(), torch.randn(5, 2))
    with pytest.raises(TypeError, match="q must be"):
        ReinforcedAlignment(4, 4)(torch.randn(4).numpy(), torch.randn(5, 4), torch.randn(5, 2))


@pytest.mark.parametrize("bad", BAD_SIZES)
def test_module_sizes_are_checked(bad):
    builders = [
        lambda: GeneralAttention(4, 4, d_v=bad),
        lambda: GeneralAttention(4, bad),
        lambda: OutputModel(bad, 3),
        lambda: OutputModel(3, bad),
        lambda: TaskModel(d_f=bad, d_u=2, n_classes=2),
        lambda: TaskModel(d_f=2, d_u=2, n_classes=bad),
        lambda: TaskModel(d_f=2, d_u=2, n_classes=2, d=bad),
        lambda: MultiHeadAttention(4, 2, d_k=bad),
        lambda: MultiHeadAttention(4, 2, d_v=bad),
        lambda: SelfAttentionVariant(4, 2, d_k=bad),
        lambda: LocalAttention(4, 4, 1.0, d_p=bad),
        lambda: PredictivePosition(bad, 4),
        lambda: PredictivePosition(4, bad),
        lambda: PredictivePosition(4, 4)(torch.randn(4), bad),
    ]
    for build in builders:
        with pytest.raises(ValueError, match="integer >= 1"):
            build()


def test_multihead_d_model_zero_is_refused():
    with pytest.raises(ValueError, match="d_model"):
        MultiHeadAttention(0, 2)


@pytest.mark.parametrize("fn", [window_mask, gaussian_emphasis])
def test_position_helpers_need_an_integer_length(fn):
    with pytest.raises(ValueError, match="n_f"):
        fn(2.5, 1.0, 1.0)


@pytest.mark.parametrize(("alpha", "n_iter"), [(math.nan, 50), (0.0, 50), (-1.0, 50), (1.5, -1), (1.5, 2.5), (1.5, 0)])
def test_alpha_entmax_hyper_parameters(alpha, n_iter):
    with pytest.raises(ValueError, match="alpha|n_iter"):
        alpha_entmax_align(alpha, n_iter)


def test_alpha_entmax_below_one_is_allowed():
    a = alpha_entmax_align(0.5)(torch.randn(2, 5))
    torch.testing.assert_close(a.sum(-1), torch.ones(2))


@pytest.mark.parametrize("p", [math.nan, -1.0, 1.5])
def test_dispatch_reason_dropout_range(p):
    with pytest.raises(ValueError, match="dropout_p"):
        dispatch_reason(dropout_p=p)


def test_concentration_edges():
    for a in (torch.zeros(0, 4), torch.zeros(3, 0), torch.zeros(2, 0, 4)):
        with pytest.raises(ValueError):
            concentration(a)
    with pytest.raises(ValueError, match="eps"):
        concentration(torch.full((2, 4), 0.25), eps=math.nan)
    out = concentration(torch.tensor([[1.0, 0.0], [0.5, 0.5]]))  # hand computed
    assert out["max_weight"] == pytest.approx(0.75)
    assert out["nonzero"] == pytest.approx(1.5)
    assert out["entropy"] == pytest.approx(math.log(2) / 2)


def test_disagreement_with_no_head_is_zero_on_the_graph():
    heads = torch.randn(2, 0, 3, 4, requires_grad=True)
    for kind in ("output", "position"):
        d = disagreement_regularisation(heads, kind)
        torch.testing.assert_close(d, torch.zeros(2))
        assert d.requires_grad
