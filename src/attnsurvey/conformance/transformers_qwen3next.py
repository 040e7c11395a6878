"""Conformance adapter for the gated delta rule: ``transformers``' Qwen3-Next linear-attention layer.

``Qwen3NextGatedDeltaNet`` is built from a tiny configuration with random weights (nothing is
downloaded). Without the ``flash-linear-attention`` and ``causal-conv1d`` packages it runs its
PyTorch reference path (``torch_chunk_gated_delta_rule`` for a sequence,
``torch_recurrent_gated_delta_rule`` for one cached token, ``causal_conv1d_fn`` /
``causal_conv1d_update``), which these checks exercise. The adapter
(:func:`deltanet_from_qwen3next`) maps its weights onto the book's
:class:`~attnsurvey.beyond.delta_rule.DeltaNetLayer` with ``gated=True``, a short convolution
and the output gate:

* ``in_proj_qkvz`` packs, for each query/key head group, that head's ``q`` and ``k`` rows, then
  the ``v`` and ``z`` rows of the value heads it serves; they become ``W_Q, W_K, W_V, W_G``;
* ``in_proj_ba`` packs, per group, the ``b`` rows (``beta = sigmoid(b)``) and then the ``a``
  rows (``g = -exp(A_log) softplus(a + dt_bias)``); they become ``W_beta`` and ``W_a``;
* the causal depthwise convolution with SiLU runs over the channels ``[q; k; v]``, as the
  book's ``conv``; ``A_log``, ``dt_bias``, the gated RMSNorm's gain and ``out_proj`` copy over.

The conventions, named:

* head grouping: Qwen3-Next has fewer query/key heads than value heads; query/key head ``i``
  serves the ``h_v / h_k`` consecutive value heads from ``i h_v / h_k`` (``repeat_interleave``).
  The book's layer has one query/key head per value head, so the adapter repeats the rows of
  ``W_Q``, ``W_K`` and their convolution channels; the function is the same, with more
  parameters;
* normalisation of ``q`` and ``k``: both are divided by ``sqrt(||x||^2 + 1e-6)`` (FLA's
  ``l2norm``, the book's :func:`~attnsurvey.beyond.delta_rule.l2_normalise`), after the
  convolution; ``q`` is then scaled by ``1/sqrt(d_k)``;
* the output gate: each value head's output is RMS-normalised with one gain shared by all heads
  and multiplied by ``SiLU(z)``, as the book's ``output_gate=True``;
* the recurrent state: both keep ``S`` as ``d_k x d_v`` per head and read it as ``o_t = S_t^T q_t``
  (Qwen3-Next caches ``(B, h_v, d_k, d_v)``, the book's :class:`~attnsurvey.beyond.delta_rule.DeltaNetState`
  holds ``(B, h, d_k, d_v)``); a check compares the cached states directly, with ``d_k != d_v`` so
  that a transposed state could not pass.

``transformers`` runs the rule, the decay ``g`` and the gated RMSNorm in float32 even for
float64 inputs. With Qwen3-Next's ``rms_norm_eps = 1e-6`` the two sides differ here by just above
the tolerance; our conjecture (the step was not traced) is that the RMSNorm magnifies that
float32 rounding for a head whose output is small next to its values (by up to
``1/sqrt(eps)``). The tiny configuration therefore sets ``rms_norm_eps = 1e-3``
(:data:`RMS_EPS`), and they agree to about 1e-7. With the library's
float32 steps run in float64 they agree to float64 rounding at either epsilon
(``tests/test_conformance_qwen3next.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor

from ..beyond.delta_rule import DeltaForm, DeltaNetLayer, DeltaNetState
from . import Check, Pair, library
from .torch_target import rand
from .transformers_common import random_init

#: The tiny layer: width, value heads h_v, query/key heads h_k, d_k, d_v, convolution taps.
D, H_V, H_K, D_K, D_V, TAPS = 16, 4, 2, 3, 5, 4
#: The epsilon of the gated RMSNorm (Qwen3-Next's default is 1e-6; see the module docstring).
RMS_EPS = 1e-3
#: The inputs: batch, sequence length; the chunk size makes the last chunk shorter.
B, N, CHUNK = 2, 11, 4


def deltanet_from_qwen3next(layer: Any, chunk_size: int = 64) -> DeltaNetLayer:
    """The book's Gated DeltaNet layer with the weights of a ``transformers`` ``Qwen3NextGatedDeltaNet``.

    Args:
        layer: a ``Qwen3NextGatedDeltaNet`` (any object with its projections, ``conv1d``, ``A_log``,
            ``dt_bias``, ``norm`` and sizes).
        chunk_size: ``C`` of the book's chunked form.

    Shape:
        the module maps ``(B, n, hidden_size)`` to ``(B, n, hidden_size)``.

    Returns:
        A new :class:`~attnsurvey.beyond.delta_rule.DeltaNetLayer` on the layer's dtype, in eval mode.

    Raises:
        ValueError: for a convolution activation other than SiLU, a convolution bias, or value heads
            that are not a multiple of the query/key heads.
    """
    h_v, h_k, d_k, d_v = layer.num_v_heads, layer.num_k_heads, layer.head_k_dim, layer.head_v_dim
    if layer.activation != "silu" or layer.conv1d.bias is not None or h_v % h_k:
        raise ValueError(
            "deltanet_from_qwen3next needs a SiLU convolution without bias and h_v a multiple of h_k, got "
            f"activation={layer.activation!r}, bias={layer.conv1d.bias is not None}, h_v={h_v}, h_k={h_k}"
        )
    r = h_v // h_k  # value heads per query/key head
    W = layer.out_proj.weight
    mine = DeltaNetLayer(
        layer.hidden_size, h_v, gated=True, short_conv=layer.conv_kernel_size, output_gate=True,
        d_k=d_k, d_v=d_v, chunk_size=chunk_size, norm_eps=layer.norm.variance_epsilon, dtype=W.dtype,
    )  # fmt: skip
    qkvz = layer.in_proj_qkvz.weight.reshape(h_k, 2 * d_k + 2 * r * d_v, -1)  # group i: [q_i; k_i; v_i..; z_i..]
    ba = layer.in_proj_ba.weight.reshape(h_k, 2 * r, -1)  # group i: [b of its value heads; a of them]
    conv = layer.conv1d.weight  # (channels, 1, taps): [q of h_k heads; k of h_k heads; v of h_v heads]

    def per_value_head(rows: Tensor) -> Tensor:  # (h_k, d_k, ...) -> (h_v d_k, ...), head i repeated r times
        return rows.repeat_interleave(r, 0).flatten(0, 1)

    q_conv, k_conv = (conv[j * h_k * d_k : (j + 1) * h_k * d_k].reshape(h_k, d_k, 1, -1) for j in (0, 1))
    gated: Any = mine  # built gated, with the convolution and the output gate: none of its optional parts is None
    pairs = {
        mine.W_Q.weight: per_value_head(qkvz[:, :d_k]),
        mine.W_K.weight: per_value_head(qkvz[:, d_k : 2 * d_k]),
        mine.W_V.weight: qkvz[:, 2 * d_k : 2 * d_k + r * d_v].reshape(h_v * d_v, -1),
        gated.W_G.weight: qkvz[:, 2 * d_k + r * d_v :].reshape(h_v * d_v, -1),
        mine.W_beta.weight: ba[:, :r].reshape(h_v, -1),
        gated.W_a.weight: ba[:, r:].reshape(h_v, -1),
        gated.conv.weight: torch.cat([per_value_head(q_conv), per_value_head(k_conv), conv[2 * h_k * d_k :]]),
        mine.A_log: layer.A_log,
        mine.dt_bias: layer.dt_bias,
        gated.norm.weight: layer.norm.weight,
        mine.W_O.weight: W,
    }
    with torch.no_grad():
        for ours, theirs in pairs.items():
            ours.copy_(theirs)
    return mine.eval()


@contextmanager
def _quiet_fallback() -> Iterator[None]:
    """Hold back the library's notice that it runs its PyTorch reference path (the path these checks read)."""
    log = logging.getLogger("transformers.integrations.hub_kernels")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def run_layer(layer: Any, X: Tensor, cache: Any = None) -> Tensor:
    """The library layer's outputs for ``X`` (continuing ``cache`` if given), without its fallback notice.

    Args:
        layer: a ``Qwen3NextGatedDeltaNet``.
        X: the inputs.
        cache: a ``DynamicCache`` or None.

    Shape:
        X ``(B, n, hidden_size)``; returns the same shape.

    Returns:
        The layer's outputs.
    """
    with _quiet_fallback():
        out: Tensor = layer(X, cache=cache)
    return out


def qwen3next_layer(seed: int, **kw: Any) -> tuple[Any, Any]:
    """A float64 ``Qwen3NextGatedDeltaNet`` (layer 0 of a tiny configuration) with random weights.

    Args:
        seed: the seed of the weights.
        **kw: configuration entries that override the tiny sizes.

    Returns:
        ``(layer, configuration)``: the layer in float64 and eval mode.
    """
    conf = library("transformers.models.qwen3_next.configuration_qwen3_next")
    model = library("transformers.models.qwen3_next.modeling_qwen3_next")
    sizes = {
        "hidden_size": D, "linear_num_value_heads": H_V, "linear_num_key_heads": H_K, "linear_key_head_dim": D_K,
        "linear_value_head_dim": D_V, "linear_conv_kernel_dim": TAPS, "num_hidden_layers": 1,
        "layer_types": ["linear_attention"], "vocab_size": 8, "intermediate_size": 8, "moe_intermediate_size": 8,
        "num_experts": 2, "num_experts_per_tok": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4,
        "rms_norm_eps": RMS_EPS,
    }  # fmt: skip
    config = conf.Qwen3NextConfig(**{**sizes, **kw})
    return random_init(model.Qwen3NextGatedDeltaNet(config, layer_idx=0), seed), config


def decode_both(
    layer: Any, config: Any, X: Tensor, chunk_size: int = CHUNK
) -> tuple[Tensor, Tensor, DeltaNetState, Any]:
    """Decode ``X`` with both caches: a prompt of 3 tokens, then one token at a time.

    Args:
        layer: a ``Qwen3NextGatedDeltaNet``.
        config: its configuration (for ``DynamicCache``).
        X: the inputs.
        chunk_size: the book's chunk size.

    Shape:
        X ``(B, n, hidden_size)`` with ``n >= 3``; the outputs ``(B, n, hidden_size)``.

    Returns:
        ``(book outputs, library outputs, the book's state, the library's cache layer)``.
    """
    mine = deltanet_from_qwen3next(layer, chunk_size)
    cache = library("transformers.cache_utils").DynamicCache(config=config)
    ours, theirs, state = [], [], None
    for start, stop in [(0, 3), *((t, t + 1) for t in range(3, X.shape[1]))]:
        out, state = mine.decode(X[:, start:stop], state)
        ours.append(out)
        theirs.append(run_layer(layer, X[:, start:stop], cache))
    assert state is not None
    return torch.cat(ours, 1), torch.cat(theirs, 1), state, cache.layers[0]


def checks() -> list[Check]:
    """The gated delta rule checks against ``transformers``' Qwen3-Next linear-attention layer.

    Returns:
        A list of :class:`~attnsurvey.conformance.Check`.
    """
    X = rand(B, N, D, seed=30)
    grouped, config = qwen3next_layer(31)
    ungrouped, _ = qwen3next_layer(32, linear_num_key_heads=H_V)

    def forward(layer: Any, form: DeltaForm) -> Pair:
        return deltanet_from_qwen3next(layer, CHUNK)(X, form=form), run_layer(layer, X)

    def outputs() -> Pair:
        ours, theirs, _, _ = decode_both(grouped, config, X)
        return ours, theirs

    def states() -> Pair:  # d_k = 3, d_v = 5: one layout, one shape
        _, _, ours, theirs = decode_both(grouped, config, X)
        return ours.S, theirs.recurrent_states[0]

    api = "Qwen3NextGatedDeltaNet"
    return [
        Check("transformers", "gated-delta", f"{api} (chunked)", lambda: forward(grouped, "chunked")),
        Check("transformers", "gated-delta", f"{api} (recurrent)", lambda: forward(grouped, "recurrent")),
        Check("transformers", "gated-delta", f"{api} (h_k = h_v)", lambda: forward(ungrouped, "chunked")),
        Check("transformers", "delta-cache", f"{api} + cache (outputs)", outputs),
        Check("transformers", "delta-cache", "DynamicCache recurrent state", states),
    ]
