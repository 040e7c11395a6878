"""The gpt-oss and Gemma 3 adapters (attnsurvey.conformance.transformers_caches): they agree, and they fail on planted bugs."""

from __future__ import annotations

import pytest
import torch

from attnsurvey import conformance as C
from attnsurvey.beyond.layer_caches import layer_schedule, sliding_window_mask

pytest.importorskip("transformers")
from attnsurvey.conformance import transformers_caches as TC  # noqa: E402  (after the skip)


def _error(pair) -> float:
    return C.max_error(*pair)


@pytest.mark.catalog("extra:attention-sinks")
def test_gpt_oss_sink_conforms_and_a_missing_sink_does_not():
    assert _error(TC.gpt_oss_pair(1)) <= C.ROUNDING_FLOOR
    assert _error(TC.gpt_oss_pair(1, sink=False)) > 1e-3


@pytest.mark.catalog("extra:hybrid-local-global")
@pytest.mark.parametrize("planted", [-1, 1])
def test_gpt_oss_window_conforms_and_one_key_more_or_less_does_not(planted):
    assert _error(TC.gpt_oss_pair(0)) <= C.ROUNDING_FLOOR
    assert _error(TC.gpt_oss_pair(0, book_window=TC.WINDOW + planted)) > 1e-3


@pytest.mark.catalog("extra:hybrid-local-global")
def test_gemma3_local_and_global_layers_agree_once_mapped():
    for layer in (0, 5):
        assert _error(TC.gemma3_pair(layer)) > 1e-3  # the convention: norms and query scaling
        assert _error(TC.gemma3_pair(layer, mapped=True)) < 1e-6  # float32 softmax and norms in the library
    assert _error(TC.gemma3_pair(0, mapped=True, book_window=TC.WINDOW + 1)) > 1e-3


@pytest.mark.catalog("extra:hybrid-local-global")
def test_a_query_sees_the_same_number_of_keys_in_both_libraries():
    masks = pytest.importorskip("transformers.masking_utils")
    for w in (1, 3, 5):
        theirs = TC.library_mask(masks.sliding_window_causal_mask_function(w), 8)
        assert theirs.sum(-1).tolist() == [min(i + 1, w) for i in range(8)]
        assert torch.equal(theirs, sliding_window_mask(8, w))


def test_rope_angles_are_the_library_formula():
    gemma3 = pytest.importorskip("transformers.models.gemma3.modeling_gemma3")
    cfg = gemma3.Gemma3TextConfig(head_dim=TC.D_HEAD, num_hidden_layers=6)
    rotary = gemma3.Gemma3RotaryEmbedding(cfg)
    for kind in ("sliding_attention", "full_attention"):
        cos, sin = rotary(torch.zeros(1, 5, 1), torch.arange(5)[None], kind)
        ours = TC.rope_cos_sin(5, TC.D_HEAD, cfg.rope_parameters[kind]["rope_theta"], repeat=True)
        torch.testing.assert_close(ours[0].float(), cos, rtol=0, atol=1e-6)
        torch.testing.assert_close(ours[1].float(), sin, rtol=0, atol=1e-6)
    assert [k == "full_attention" for k in cfg.layer_types] == [k == "global" for k in layer_schedule(6, 5)]
