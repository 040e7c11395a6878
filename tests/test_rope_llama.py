"""The book's RoPE attention loaded with the weights of transformers' LLaMA attention gives its outputs.

Models are built from a small ``LlamaConfig`` with random weights (nothing is downloaded).
"""

from __future__ import annotations

import pytest
import torch

from attnsurvey.beyond import positions as pos

from .helpers import rand

llama = pytest.importorskip("transformers.models.llama.modeling_llama")
LlamaConfig = pytest.importorskip("transformers").LlamaConfig


def _llama_layer(h: int = 4, h_kv: int = 2, d_model: int = 32, bias: bool = False):
    config = LlamaConfig(
        hidden_size=d_model,
        num_attention_heads=h,
        num_key_value_heads=h_kv,  # grouped-query attention: 2 query heads per key/value head
        intermediate_size=2 * d_model,
        num_hidden_layers=1,
        vocab_size=16,
        max_position_embeddings=64,
        attention_bias=bias,
    )
    config._attn_implementation = "eager"  # transformers' own softmax(QK^T) V, with the additive mask below
    torch.manual_seed(0)
    return llama.LlamaAttention(config, layer_idx=0).eval(), llama.LlamaRotaryEmbedding(config)


def _llama_output(layer, rotary, X: torch.Tensor) -> torch.Tensor:
    n = X.shape[-2]
    cos, sin = rotary(X, torch.arange(n)[None].expand(X.shape[0], n))
    causal = torch.full((n, n), float("-inf")).triu(1)[None, None]  # additive: -inf above the diagonal
    with torch.no_grad():
        return layer(X, (cos, sin), causal)[0]


@pytest.mark.catalog("extra:rope-rotate-half")
@pytest.mark.parametrize("bias", [False, True], ids=["llama", "with-biases"])
def test_llama_attention_weights_load_into_the_books_rope_attention(bias):
    layer, rotary = _llama_layer(bias=bias)
    X = rand(2, 13, 32, seed=1)
    want = _llama_output(layer, rotary, X)
    for convention in ("interleaved", "half"):
        mine = pos.rotary_from_llama(layer, convention)
        assert (mine.h, mine.h_kv, mine.convention) == (4, 2, convention)
        with torch.no_grad():
            got, weights = mine(X, is_causal=True)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        assert float(weights.triu(1).abs().max()) == 0.0  # causal: no weight on a later key
    # the rotate-half weights in the interleaved layout without the permutation are another model
    wrong = pos.RotarySelfAttention(32, 4, h_kv=2, bias=bias)
    wrong.load_state_dict(pos.rotary_from_llama(layer, "half").state_dict())
    with torch.no_grad():
        assert (wrong(X, is_causal=True)[0] - want).abs().max() > 1e-2


def test_llama_loader_refuses_scaled_rope():
    layer, _ = _llama_layer()
    layer.config.rope_parameters = {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}
    with pytest.raises(ValueError, match="rope_type='linear'"):
        pos.rotary_from_llama(layer)
