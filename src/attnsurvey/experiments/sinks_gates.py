"""Where does a causal model put its spare attention? Plain softmax, a learned sink logit, an output gate.

Chapter 6.6's experiment. A small causal model of chapter 6.2's kind (token
embedding, sinusoidal positions, pre-norm :class:`~attnsurvey.transformer.model.Encoder`
layers under a causal mask, a linear read-out) learns the triggered-copy
sequences of :func:`~attnsurvey.data.next_token.triggered_copy_batch`. Three variants
differ only in the self-attention module of every layer:

* ``"softmax"``: :class:`~attnsurvey.query_related.multihead.MultiHeadAttention`;
* ``"sink"``: :class:`~attnsurvey.beyond.sinks.SinkAttention` (a learned sink logit per head);
* ``"gate"``: :class:`~attnsurvey.beyond.sinks.GatedAttention` (an elementwise output gate).

After training, :func:`sink_measures` reads (a) the weight the first layer puts on
the first token and (b) the loss beyond a window when the model attends only to a
rolling window (the dense :func:`~attnsurvey.masking.sink_mask` with no sink, as a
window cache that has evicted the first token) or to the window plus the first token
(StreamingLLM's cache, positions kept as in the text).

Shapes: B sequences, n tokens, h heads, vocab symbols.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Final, TypedDict, Unpack

import torch
import torch.nn.functional as F_
from torch import Tensor, nn

from .._checks import Default, option_defaults, with_defaults
from ..beyond.sinks import GatedAttention, SinkAttention, output_gate
from ..data.next_token import triggered_copy_batch
from ..data.sequences import IGNORE
from ..masking import causal_mask, sink_mask
from ..query_related.multihead import MultiHeadAttention
from ..training import seed_everything, train
from ..transformer.model import Encoder
from .long_positions import PositionTagger

VARIANTS = ("softmax", "sink", "gate")


class _LayerGatedAttention(GatedAttention):
    """:class:`~attnsurvey.beyond.sinks.GatedAttention` with the call of a layer's self-attention, ``(X, X, mask)``."""

    # ignore: the layer passes X twice; the gate reads the first
    def forward(  # type: ignore[override]
        self, X: Tensor, X_kv: Tensor | None = None, mask: Tensor | None = None, **options: Any
    ) -> tuple[Tensor, Tensor | None]:
        return super().forward(X, mask, **options)


def _gated_like_plain(d_model: int, h: int) -> _LayerGatedAttention:
    """A gated module whose shared projections start as the plain module's, drawn the same way.

    The gate's weights are drawn off torch's global generator (inside ``fork_rng``), so the
    generator leaves this module where :class:`MultiHeadAttention` leaves it and the layers
    built after it (the FFN) start as in the other variants.
    """
    plain = MultiHeadAttention(d_model, h)
    with torch.random.fork_rng(devices=[]):
        gated = _LayerGatedAttention(d_model, h)
    gated.load_state_dict(plain.state_dict(), strict=False)  # W_Q, W_K, W_V, W_O; W_G stays
    return gated


def _attention_factory(variant: str, d_model: int, h: int) -> Callable[[], nn.Module]:
    factories: dict[str, Callable[[], nn.Module]] = {
        "softmax": lambda: MultiHeadAttention(d_model, h),
        "sink": lambda: SinkAttention(d_model, h),
        "gate": lambda: _gated_like_plain(d_model, h),
    }
    if variant not in factories:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    return factories[variant]


class WindowTagger(PositionTagger):
    """Chapter 6.2's causal tagger (sinusoidal positions) with a chosen attention variant and a mask per call.

    Args:
        vocab: the vocabulary size.
        variant: one of :data:`VARIANTS`.
        d_model: the model width.
        h: the number of heads.
        d_ff: the FFN width.
        n_layers: the number of layers.

    Shape:
        - tokens: ``(B, n)`` integers; mask: boolean ``(n, n)``, ``True`` = may attend (default causal).
        - Output: ``(logits (B, n, vocab), [weights (B, h, n, n) per layer])``.

    Raises:
        ValueError: for an unknown variant.
    """

    def __init__(self, vocab: int, variant: str, d_model: int = 32, h: int = 4, d_ff: int = 64, n_layers: int = 1):
        super().__init__(vocab, "sinusoidal", d_model, h, d_ff)
        factory = _attention_factory(variant, d_model, h)
        self.variant = variant
        self.encoder = Encoder(n_layers, d_model, h, d_ff, norm_first=True, self_attn_factory=factory)

    # ignore: returns every layer's weights, and takes a mask
    def forward(self, tokens: Tensor, mask: Tensor | None = None) -> tuple[Tensor, list[Tensor]]:  # type: ignore[override]
        n = tokens.shape[-1]
        mask = causal_mask(n, device=tokens.device) if mask is None else mask
        X = self.position(self.embed(tokens))  # tokens: every row finite, so the layers trust it (as PositionTagger's)
        H, weights = self.encoder(X, mask[None], _finite_inputs=True)  # (1, n, n): one mask for the batch
        return self.readout(H), weights


class SinkTask(TypedDict, total=False):
    """The options of :func:`train_variant` and :func:`sink_measures` (defaults: :data:`SINK_TASK`).

    n: the sequence length; vocab, lag, p_trigger: the triggered-copy task; steps, batch, lr:
    Adam steps, sequences per batch, learning rate; d_model, h, d_ff, n_layers: the
    model; window: the rolling window of the evaluation; start: the first query whose
    first-token weight is counted.
    """

    n: Annotated[int, Default(24)]
    vocab: Annotated[int, Default(8)]
    lag: Annotated[int, Default(4)]
    p_trigger: Annotated[float, Default(0.3)]
    steps: Annotated[int, Default(200)]
    batch: Annotated[int, Default(16)]
    lr: Annotated[float, Default(1e-2)]
    d_model: Annotated[int, Default(32)]
    h: Annotated[int, Default(4)]
    d_ff: Annotated[int, Default(64)]
    n_layers: Annotated[int, Default(1)]
    window: Annotated[int, Default(8)]
    start: Annotated[int, Default(8)]


#: The value of every :class:`SinkTask` option that a call leaves out.
SINK_TASK: Final[SinkTask] = option_defaults(SinkTask)


def _loss(model: WindowTagger, batch: tuple[Tensor, Tensor]) -> Tensor:
    x, y = batch
    return F_.cross_entropy(model(x)[0].flatten(0, 1), y.flatten(), ignore_index=IGNORE)


def train_variant(variant: str, seed: int, **task: Unpack[SinkTask]) -> WindowTagger:
    """Train a :class:`WindowTagger` of one variant on triggered-copy sequences under the causal mask.

    Args:
        variant: one of :data:`VARIANTS`.
        seed: fixes the initial weights and the batches (the same for every variant).
        task: options of :class:`SinkTask` (defaults in :data:`SINK_TASK`).

    Returns:
        The model, in eval mode.

    Raises:
        ValueError: for an unknown variant or option values the task refuses.
    """
    t = with_defaults(task, SINK_TASK, "SinkTask")
    g = seed_everything(seed)
    model = WindowTagger(t["vocab"], variant, t["d_model"], t["h"], t["d_ff"], t["n_layers"])
    data = (
        triggered_copy_batch(t["batch"], t["n"], t["vocab"], g, lag=t["lag"], p_trigger=t["p_trigger"])
        for _ in range(t["steps"])
    )
    train(model, _loss, data, lr=t["lr"])
    return model


def _test_sequences(seed: int, n_test: int, t: SinkTask) -> tuple[Tensor, Tensor]:
    """The test sequences of the measures: ``n_test`` triggered-copy sequences from their own generator."""
    g = torch.Generator().manual_seed(seed)
    return triggered_copy_batch(n_test, t["n"], t["vocab"], g, lag=t["lag"], p_trigger=t["p_trigger"])


@torch.no_grad()
def _losses(logits: Tensor, y: Tensor, copy: Tensor, other: Tensor) -> tuple[float, float]:
    """Mean cross-entropy of ``logits`` ``(B, n, vocab)`` at the positions ``copy`` and ``other`` (boolean ``(B, n)``)."""
    ce = F_.cross_entropy(logits.transpose(1, 2), y.clamp_min(0), reduction="none")  # (B, n)
    return float(ce[copy].mean()), float(ce[other].mean())


@torch.no_grad()
def sink_measures(
    model: WindowTagger, seed: int = 2000, n_test: int = 64, **task: Unpack[SinkTask]
) -> dict[str, float]:
    """What a trained model does with its first token, on ``n_test`` fresh test sequences.

    Queries are counted from position ``start`` on and split into *copy* queries (the
    current token is the trigger: the next token is a copy from the past) and *other*
    queries (nothing in the past helps). From the first layer's weights:

    * ``first_weight``: the weight on key 0, mean over the other queries and the heads;
      ``first_weight_top``: the same for the head with the largest such mean;
      ``first_weight_copy``: the mean over the copy queries and the heads;
      ``uniform_first``: the mean over the other queries of ``1 / (t + 1)``, the weight
      on key 0 of weights spread evenly over the visible keys;
    * ``row_sum``: the summed weight over the keys, mean over the other queries and the
      heads (1 without a sink slot).

    Losses, at the queries from position ``window`` on, under three masks applied in every
    layer: ``*_full`` the causal mask; ``*_evicted`` a rolling window of ``window`` keys
    (:func:`~attnsurvey.masking.sink_mask` with no sink); ``*_kept`` the window plus key 0
    (one sink); ``copy_*`` at the copy queries, ``other_*`` at the other queries.

    Args:
        model: a trained :class:`WindowTagger`.
        seed: the seed of the test sequences.
        n_test: the number of test sequences.
        task: options of :class:`SinkTask` (the task's ``n``, ``vocab``, ``lag``, ``p_trigger``,
            ``window``, ``start``).

    Returns:
        ``{name: value}``.
    """
    t = with_defaults(task, SINK_TASK, "SinkTask")
    n, w, start = t["n"], t["window"], t["start"]
    x, y = _test_sequences(seed, n_test, t)
    pos = torch.arange(n)
    copy, other = (x == 0) & (y != IGNORE), (x != 0) & (y != IGNORE)
    causal_logits, weights = model(x)  # one run under the causal mask serves the weights and the "full" losses
    a0 = weights[0][..., 0]  # (B, h, n): the first layer's weight on key 0
    a_sum = weights[0].sum(-1)  # (B, h, n)
    late_other, late_copy = other & (pos >= start), copy & (pos >= start)
    per_head = a0.permute(1, 0, 2)[:, late_other].mean(-1)  # (h,)
    out = {
        "first_weight": float(per_head.mean()),
        "first_weight_top": float(per_head.max()),
        "first_weight_copy": float(a0.permute(1, 0, 2)[:, late_copy].mean()),
        "uniform_first": float((1.0 / (pos + 1.0)).expand(n_test, n)[late_other].mean()),
        "row_sum": float(a_sum.permute(1, 0, 2)[:, late_other].mean()),
    }
    beyond = pos >= w
    logits = {
        "full": causal_logits,
        "evicted": model(x, sink_mask(n, 0, w))[0],
        "kept": model(x, sink_mask(n, 1, w))[0],
    }
    for name, z in logits.items():
        out[f"copy_{name}"], out[f"other_{name}"] = _losses(z, y, copy & beyond, other & beyond)
    return out


@torch.no_grad()
def first_weight_by_position(
    model: WindowTagger, seed: int = 2000, n_test: int = 64, **task: Unpack[SinkTask]
) -> list[float]:
    """The first layer's weight on key 0 at each query position ``t >= start``, mean over the other queries and heads.

    The queries and test sequences of :func:`sink_measures` (``first_weight`` is the
    mean of these values weighted by how many other queries each position has).

    Args:
        model: a trained :class:`WindowTagger`.
        seed: the seed of the test sequences.
        n_test: the number of test sequences.
        task: options of :class:`SinkTask`.

    Returns:
        One value per position ``start, ..., n - 1``.
    """
    t = with_defaults(task, SINK_TASK, "SinkTask")
    x, _ = _test_sequences(seed, n_test, t)
    a0 = model(x)[1][0][..., 0].mean(1)  # (B, n): mean over heads
    return [float(a0[x[:, p] != 0, p].mean()) for p in range(t["start"], t["n"])]


@torch.no_grad()
def gate_openness(
    model: WindowTagger, seed: int = 2000, n_test: int = 64, **task: Unpack[SinkTask]
) -> dict[str, float]:
    """How far a gated model's first layer opens its output gates, at the copy and at the other queries.

    The gates ``sigmoid(W_G x + b)`` of :func:`~attnsurvey.beyond.sinks.output_gate`, from the
    layer input the attention module receives (after the pre-norm), on the test sequences of
    :func:`sink_measures`: the mean over the heads and the coordinates, and over the queries
    from position ``start`` on.

    Args:
        model: a trained :class:`WindowTagger` of the ``"gate"`` variant.
        seed: the seed of the test sequences.
        n_test: the number of test sequences.
        task: options of :class:`SinkTask`.

    Returns:
        ``{"gate_copy": mean gate at the copy queries, "gate_other": mean gate at the other queries}``.

    Raises:
        ValueError: if ``model`` is not of the ``"gate"`` variant.
    """
    attn = model.encoder.layers[0].self_attn
    if not isinstance(attn, GatedAttention):
        raise ValueError(f"gate_openness needs a model of the 'gate' variant, got variant={model.variant!r}")
    t = with_defaults(task, SINK_TASK, "SinkTask")
    x, y = _test_sequences(seed, n_test, t)
    seen: list[Tensor] = []
    hook = attn.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    try:
        model(x)
    finally:
        hook.remove()
    gate = output_gate(seen[0], attn.W_G, attn.h).mean((-3, -1))  # (B, n): mean over heads and coordinates
    late = (y != IGNORE) & (torch.arange(t["n"]) >= t["start"])
    return {"gate_copy": float(gate[late & (x == 0)].mean()), "gate_other": float(gate[late & (x != 0)].mean())}


def run_seed(
    seed: int, models: dict[tuple[str, int], WindowTagger] | None = None, **task: Unpack[SinkTask]
) -> dict[str, float]:
    """Train every variant on one seed and measure it: ``{"<variant> <measure>": value}`` (for ``over_seeds``).

    Args:
        seed: the training seed, shared by the variants.
        models: if a dict, every trained model is stored in it under ``(variant, seed)``.
        task: options of :class:`SinkTask`.

    Returns:
        The measures of :func:`sink_measures`, keyed ``"<variant> <measure>"``.
    """
    out: dict[str, float] = {}
    for variant in VARIANTS:
        model = train_variant(variant, seed, **task)
        if models is not None:
            models[variant, seed] = model
        out.update({f"{variant} {k}": v for k, v in sink_measures(model, **task).items()})
    return out


__all__ = [
    "SINK_TASK",
    "VARIANTS",
    "SinkTask",
    "WindowTagger",
    "first_weight_by_position",
    "gate_openness",
    "run_seed",
    "sink_measures",
    "train_variant",
]
