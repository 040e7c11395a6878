"""The Qwen3-Next conformance adapter (attnsurvey.conformance.transformers_qwen3next): float64 agreement to
rounding once transformers' float32 steps run in float64, and planted mapping mistakes that the checks reject."""

from __future__ import annotations

import pytest
import torch

from attnsurvey import conformance as C

pytest.importorskip("transformers")
from transformers.models.qwen3_next import modeling_qwen3_next as qn  # noqa: E402

from attnsurvey.conformance import transformers_qwen3next as tq  # noqa: E402

ROUNDING = 1e-12


class _Float64Torch:
    """``torch`` with ``float32`` read as ``float64``: the library's own code, with its float32 casts widened."""

    float32 = torch.float64

    def __getattr__(self, name):
        return getattr(torch, name)


@pytest.fixture
def float64_library(monkeypatch):
    monkeypatch.setattr(qn, "torch", _Float64Torch())
    monkeypatch.setattr(torch.Tensor, "float", lambda self: self)  # A_log.float(), a.float() in the layer's forward


@pytest.mark.catalog("extra:gated-delta-rule")
@pytest.mark.parametrize("eps", [tq.RMS_EPS, 1e-6])
def test_qwen3next_agrees_to_rounding_once_its_float32_steps_run_in_float64(float64_library, eps):
    """Every forward and decoding check agrees to float64 rounding, also at Qwen3-Next's own rms_norm_eps."""
    X = tq.rand(tq.B, tq.N, tq.D, seed=40)
    for kw in ({}, {"linear_num_key_heads": tq.H_V}):
        layer, config = tq.qwen3next_layer(41, rms_norm_eps=eps, **kw)
        theirs = layer(X)
        mine = tq.deltanet_from_qwen3next(layer, chunk_size=tq.CHUNK)
        for form in ("chunked", "recurrent"):
            assert C.max_error(mine(X, form=form), theirs) < ROUNDING, (kw, form)
        ours, theirs_decoded, state, cache = tq.decode_both(layer, config, X)
        assert C.max_error(ours, theirs) < ROUNDING and C.max_error(theirs_decoded, theirs) < ROUNDING
        assert state.S.shape == cache.recurrent_states[0].shape == (tq.B, tq.H_V, tq.D_K, tq.D_V)
        assert C.max_error(state.S, cache.recurrent_states[0]) < ROUNDING


def _differs(run) -> C.Result:
    result = C.evaluate(C.Check("transformers", "gated-delta", "planted", run))
    assert result.status == "differs" and not result.explained and result.max_error > 1e3 * C.TOLERANCE, result
    return result


@pytest.mark.catalog("extra:gated-delta-rule")
def test_planted_mapping_mistakes_are_rejected():
    X = tq.rand(tq.B, tq.N, tq.D, seed=42)
    layer, _ = tq.qwen3next_layer(43)
    theirs = layer(X)
    assert C.evaluate(C.Check("transformers", "gated-delta", "ok", lambda: (tq.deltanet_from_qwen3next(layer)(X), theirs))).status == "conforms"  # fmt: skip

    def swapped_beta_and_alpha():
        mine = tq.deltanet_from_qwen3next(layer)
        with torch.no_grad():  # the b rows read as a rows and back
            W_b = mine.W_beta.weight.clone()
            mine.W_beta.weight.copy_(mine.W_a.weight)
            mine.W_a.weight.copy_(W_b)
        return mine(X), theirs

    def no_l2_norm():
        mine = tq.deltanet_from_qwen3next(layer)
        mine.qk_norm = None
        return mine(X), theirs

    def value_heads_not_grouped():  # q/k head i read by value heads i and i + h_k instead of 2i and 2i + 1
        mine = tq.deltanet_from_qwen3next(layer)
        order = torch.arange(tq.H_V).reshape(2, -1).T.reshape(-1)  # 0, 2, 1, 3
        with torch.no_grad():
            hk = tq.H_V * tq.D_K
            for W in (mine.W_Q.weight, mine.W_K.weight, mine.conv.weight[:hk], mine.conv.weight[hk : 2 * hk]):
                W.copy_(W.reshape(tq.H_V, tq.D_K, *W.shape[1:])[order].reshape(W.shape))
        return mine(X), theirs

    for planted in (swapped_beta_and_alpha, no_l2_norm, value_heads_not_grouped):
        _differs(planted)


@pytest.mark.catalog("extra:gated-delta-rule")
def test_the_state_check_rejects_a_transposed_state():
    """With d_k = d_v both layouts have one shape: the cached states agree as stored and differ once transposed."""
    X = tq.rand(tq.B, tq.N, tq.D, seed=45)
    layer, config = tq.qwen3next_layer(46, linear_key_head_dim=tq.D_V)
    _, _, state, cache = tq.decode_both(layer, config, X)
    theirs = cache.recurrent_states[0]
    assert C.evaluate(C.Check("transformers", "delta-cache", "ok", lambda: (state.S, theirs))).status == "conforms"
    _differs(lambda: (state.S.transpose(-1, -2), theirs))


def test_the_adapter_refuses_what_it_cannot_map():
    layer, _ = tq.qwen3next_layer(44, hidden_act="gelu")
    with pytest.raises(ValueError, match="activation='gelu'"):
        tq.deltanet_from_qwen3next(layer)
