"""Recall experiments for causal token mixers: one tiny model, the mixer swapped, seeds paired.

A :class:`RecallModel` is an embedding, a short causal depthwise convolution
(the same front-end for every mixer, so that two runs differ only in the
mixer), ``n_layers`` pre-norm residual blocks whose token mixer comes from
:data:`MIXERS`, an optional MLP per block, and a linear read-out. It is
trained with fresh batches of a task of :mod:`attnsurvey.data.recall` and
scored by its accuracy at the query positions of a held-out batch.

A mixer is a factory ``(d_model, n_heads) -> module`` whose ``forward(x)``
maps ``(B, n, d_model)`` to ``(B, n, d_model)`` causally. Another mixer plugs
in with one entry, e.g. ``MIXERS["linear"] = LinearAttentionLayer`` (a class
with that signature is its own factory). The differential factory halves the
number of heads, so its parameter count matches softmax attention's (Ye et
al. 2024; :func:`parameter_count` reports it).

For selective attention the dense softmax model is trained once per seed and
evaluated with a selection mixer built from each trained softmax mixer:
:data:`SELECTORS` maps a name to ``(dense SoftmaxMixer, k) -> module``, so a
selection layer can share the dense projections (e.g. load the dense
``state_dict`` into a ``MoBALayer`` that keeps ``k`` blocks). The entry here,
``"window"``, is the dense mixer restricted to the last ``k`` keys
(:func:`~attnsurvey.masking.sink_mask` without sinks); ``"moba"`` is a
:class:`~attnsurvey.beyond.selective.MoBALayer` with the dense weights that reads
``k // MOBA_BLOCK`` blocks of :data:`MOBA_BLOCK` keys (at most ``k`` keys, its own block
included). DSA has no entry: its indexer has weights of its own, which a dense model
has not trained.

Shapes: ``B`` sequences of ``n`` tokens, width ``d_model``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F_
from torch import Tensor, nn

from .._checks import check_integers
from ..beyond.delta_rule import DeltaNetLayer
from ..beyond.differential import DifferentialAttentionLayer
from ..beyond.linear_attention import LinearAttentionLayer
from ..beyond.selective import MoBALayer
from ..data.recall import distractor_batch, mqar_batch, needle_batch
from ..data.sequences import IGNORE
from ..masking import sink_mask
from ..query_related.multihead import MultiHeadAttention
from ..stats import DEFAULT_SEEDS, over_seeds
from ..training import seed_everything, train

MixerFactory = Callable[[int, int], nn.Module]


class SoftmaxMixer(MultiHeadAttention):
    """Causal multi-head softmax self-attention as a token mixer: ``forward(x) -> (B, n, d_model)``.

    The package's :class:`~attnsurvey.query_related.multihead.MultiHeadAttention` under a causal
    mask. ``keep`` (None: all past keys) may be set after training to a function ``n -> mask``
    (boolean ``(n, n)``, ``True`` = may attend) that replaces the causal mask, e.g. a window.

    Args:
        d_model: the model width.
        n_heads: the number of heads (``d_k = d_v = d_model / n_heads``).
        finite_inputs: the caller vouches that ``x`` holds no NaN/Inf (a model of tokens), so the
            stack skips its checks for them (:class:`~attnsurvey.query_related.multihead.HeadsCall`).

    Shape:
        x: ``(B, n, d_model)``; returns ``(B, n, d_model)``.

    Raises:
        ValueError: as :class:`~attnsurvey.query_related.multihead.MultiHeadAttention`.
    """

    def __init__(self, d_model: int, n_heads: int, finite_inputs: bool = False) -> None:
        super().__init__(d_model, n_heads)
        self.keep: Callable[[int], Tensor] | None = None
        self.finite_inputs = finite_inputs

    # ignore: a token mixer maps x alone to the output
    def forward(self, x: Tensor) -> Tensor:  # type: ignore[override]
        mask = None if self.keep is None else self.keep(x.shape[-2])
        out, _ = super().forward(
            x, None, mask, need_weights=False, is_causal=mask is None, _finite_inputs=self.finite_inputs
        )
        return out


#: Token mixers by name: ``(d_model, n_heads) -> module`` with ``forward(x: (B, n, d_model)) -> (B, n, d_model)``.
MIXERS: dict[str, MixerFactory] = {
    "softmax": lambda d_model, n_heads: SoftmaxMixer(d_model, n_heads, finite_inputs=True),  # tokens: finite
    "differential": lambda d_model, n_heads: DifferentialAttentionLayer(
        d_model, max(1, n_heads // 2), finite_inputs=True
    ),
    # the control: the same layer with lambda fixed at 0 (one map, the same heads, norm and size)
    "differential-0": lambda d_model, n_heads: DifferentialAttentionLayer(
        d_model, max(1, n_heads // 2), lambda_init=0.0, learn_lambda=False, finite_inputs=True
    ),
    # recurrent mixers with the same heads and widths (d_k = d_v = d_model / n_heads); the model's shared
    # short convolution stands in for each layer's own, so that they differ from softmax only in the mixer
    "linear": lambda d_model, n_heads: LinearAttentionLayer(d_model, n_heads, feature_map="elu+1", finite_inputs=True),
    "deltanet": lambda d_model, n_heads: DeltaNetLayer(d_model, n_heads, gated=False),
    "gated-deltanet": lambda d_model, n_heads: DeltaNetLayer(d_model, n_heads, gated=True),
}


def _window(dense: nn.Module, k: int) -> nn.Module:
    """The trained dense mixer restricted to its last ``k`` keys (a copy; the dense one is left alone)."""
    if not isinstance(dense, SoftmaxMixer):
        raise TypeError(f"the window selector needs a SoftmaxMixer, got {type(dense).__name__}")
    windowed = copy.deepcopy(dense)
    windowed.keep = lambda n: sink_mask(n, 0, k)
    return windowed


#: The block size of the ``"moba"`` selector.
MOBA_BLOCK = 8


def moba_from_dense(dense: nn.Module, k: int, block_size: int = MOBA_BLOCK) -> MoBALayer:
    """A :class:`~attnsurvey.beyond.selective.MoBALayer` with a trained dense mixer's weights, reading at most ``k`` keys.

    It reads ``max(1, k // block_size)`` blocks of ``block_size`` keys, its own block included
    (so at least the own block when ``k < block_size``); the dense mixer is left alone.

    Args:
        dense: a trained :class:`SoftmaxMixer`.
        k: the most keys a query reads.
        block_size: ``B``, keys per block.

    Returns:
        The MoBA layer, in eval mode.

    Raises:
        TypeError: if ``dense`` is not a :class:`SoftmaxMixer`.
        ValueError: for ``k`` or ``block_size`` below 1.
    """
    if not isinstance(dense, SoftmaxMixer):
        raise TypeError(f"the moba selector needs a SoftmaxMixer, got {type(dense).__name__}")
    check_integers("moba_from_dense", minimum=1, k=k, block_size=block_size)
    layer = MoBALayer(dense.d_model, dense.h, block_size=block_size, top_k=max(1, k // block_size))
    layer.attn.load_state_dict(dense.state_dict())
    return layer.eval()


#: Selection mixers built from a trained dense one: ``(dense SoftmaxMixer, k) -> module`` keeping at most ``k`` keys.
SELECTORS: dict[str, Callable[[nn.Module, int], nn.Module]] = {"window": _window, "moba": moba_from_dense}

#: Task generators by name, and the vocabulary size each needs from its keyword arguments.
TASKS: dict[str, tuple[Callable[..., tuple[Tensor, Tensor]], Callable[[dict[str, Any]], int]]] = {
    "mqar": (mqar_batch, lambda kw: kw["n_keys"] + kw["n_values"]),
    "needle": (needle_batch, lambda kw: kw["n_keys"] + kw["n_values"] + kw["n_filler"]),
    "distractor": (distractor_batch, lambda kw: kw["n_keys"] + kw["n_values"]),
}


class RecallModel(nn.Module):
    """Embedding, short causal convolution, ``n_layers`` pre-norm mixer blocks, read-out.

    Block ``i``: ``x = x + mixer_i(LayerNorm(x))`` then, with ``mlp``, ``x = x + MLP(LayerNorm(x))``.
    The front-end is a depthwise causal convolution of width ``conv`` added to the embedding
    (``conv = 0``: none); it lets a value's position see its key, as in Zoology's models.

    Args:
        vocab: the vocabulary size.
        mixer: a name of :data:`MIXERS` or a factory ``(d_model, n_heads) -> module``.
        d_model: the width.
        n_heads: the heads given to the factory.
        n_layers: the number of blocks.
        conv: the width of the causal convolution (0: no front-end).
        mlp: add an MLP (``4 d_model`` hidden, GELU) to each block.

    Shape:
        x: ``(B, n)`` token ids; returns logits ``(B, n, vocab)``.

    Raises:
        ValueError: for an unknown mixer name or a size that is not a positive integer.
    """

    def __init__(
        self,
        vocab: int,
        mixer: str | MixerFactory,
        d_model: int = 32,
        n_heads: int = 2,
        n_layers: int = 1,
        conv: int = 3,
        mlp: bool = False,
    ) -> None:
        super().__init__()
        check_integers("RecallModel", minimum=1, vocab=vocab, d_model=d_model, n_heads=n_heads, n_layers=n_layers)
        check_integers("RecallModel", minimum=0, conv=conv)
        factory = _factory(mixer)
        self.embed = nn.Embedding(vocab, d_model)
        self.conv = nn.Conv1d(d_model, d_model, conv, groups=d_model, padding=conv - 1) if conv else None
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(n_layers))
        self.mixers = nn.ModuleList(factory(d_model, n_heads) for _ in range(n_layers))
        self.mlps = nn.ModuleList(
            nn.Sequential(
                nn.LayerNorm(d_model), nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
            )
            for _ in range(n_layers if mlp else 0)
        )
        self.head = nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, vocab))

    def forward(self, x: Tensor) -> Tensor:
        h = self.embed(x)
        if self.conv is not None:  # causal: output t reads inputs t - conv + 1 .. t
            h = h + self.conv(h.transpose(1, 2))[..., : x.shape[1]].transpose(1, 2)
        for i, (norm, mixer) in enumerate(zip(self.norms, self.mixers)):
            h = h + mixer(norm(h))
            if self.mlps:
                h = h + self.mlps[i](h)
        return self.head(h)


def _factory(mixer: str | MixerFactory) -> MixerFactory:
    if isinstance(mixer, str):
        if mixer not in MIXERS:
            raise ValueError(f"unknown mixer {mixer!r}; known: {sorted(MIXERS)}")
        return MIXERS[mixer]
    if not callable(mixer):
        raise TypeError(f"mixer must be a name of MIXERS or a factory (d_model, n_heads) -> module, got {mixer!r}")
    return mixer


def _task(
    task: str, task_kwargs: dict[str, Any]
) -> tuple[Callable[[int, torch.Generator], tuple[Tensor, Tensor]], int]:
    """``(batch maker (B, generator) -> (x, y), vocabulary size)`` of a task of :data:`TASKS`."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; known: {sorted(TASKS)}")
    make, vocab = TASKS[task]
    return (lambda B, g: make(B, generator=g, **task_kwargs)), vocab(task_kwargs)


def parameter_count(mixer: str | MixerFactory, vocab: int = 64, **model_kwargs: Any) -> dict[str, int]:
    """The parameters of a :class:`RecallModel` with ``mixer``: all of them and those of the mixers.

    Args:
        mixer: a name of :data:`MIXERS` or a factory.
        vocab: the vocabulary size.
        **model_kwargs: the other arguments of :class:`RecallModel`.

    Returns:
        ``{"model": count, "mixers": count}``.

    Raises:
        ValueError: as :class:`RecallModel`.
    """
    model = RecallModel(vocab, mixer, **model_kwargs)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    return {"model": count(model), "mixers": count(model.mixers)}


def accuracy(model: nn.Module, x: Tensor, y: Tensor) -> float:
    """The share of the asked positions (``y != IGNORE``) whose arg-max prediction is ``y``.

    Args:
        model: maps tokens ``(B, n)`` to logits ``(B, n, vocab)``.
        x: the tokens.
        y: the targets, IGNORE where nothing is asked.

    Shape:
        x, y: ``(B, n)``.

    Returns:
        The accuracy in ``[0, 1]``.

    Raises:
        ValueError: if nothing is asked.
    """
    asked = y != IGNORE
    if not asked.any():
        raise ValueError("accuracy needs at least one asked position (y != IGNORE)")
    with torch.no_grad():
        pred = model(x).argmax(-1)
    return float((pred[asked] == y[asked]).float().mean())


def train_recall(
    mixer: str | MixerFactory,
    task: str,
    task_kwargs: dict[str, Any],
    seed: int,
    steps: int = 80,
    *,
    batch: int = 32,
    lr: float = 1e-2,
    **model_kwargs: Any,
) -> tuple[RecallModel, Callable[[int, torch.Generator], tuple[Tensor, Tensor]]]:
    """Train a :class:`RecallModel` on fresh batches of a task; the seed fixes the weights and the data.

    Args:
        mixer: a name of :data:`MIXERS` or a factory.
        task: a name of :data:`TASKS`.
        task_kwargs: the task generator's sizes (``batch`` and ``generator`` are supplied).
        seed: the seed of the weights and the training batches.
        steps: optimizer steps, one fresh batch each.
        batch: sequences per step.
        lr: Adam's learning rate.
        **model_kwargs: the other arguments of :class:`RecallModel`.

    Shape:
        the batch maker ``(B, generator)`` returns tokens and targets ``(B, n)``.

    Returns:
        ``(model, batch maker)``; the model is in eval mode.

    Raises:
        ValueError: for an unknown task or mixer, or bad sizes.
    """
    check_integers("train_recall", minimum=1, steps=steps, batch=batch)
    make, vocab = _task(task, task_kwargs)
    g = seed_everything(seed)
    model = RecallModel(vocab, mixer, **model_kwargs)
    batches = (make(batch, g) for _ in range(steps))
    loss = lambda m, xy: F_.cross_entropy(m(xy[0]).flatten(0, 1), xy[1].flatten(), ignore_index=IGNORE)  # noqa: E731
    train(model, loss, batches, lr=lr)
    return model, make


def _held_out(
    make: Callable[[int, torch.Generator], tuple[Tensor, Tensor]], seed: int, n: int
) -> tuple[Tensor, Tensor]:
    """A test batch from a generator that the training batches never use."""
    return make(n, torch.Generator().manual_seed(1_000_003 + seed))


def held_out_batch(task: str, task_kwargs: dict[str, Any], seed: int, n_test: int = 256) -> tuple[Tensor, Tensor]:
    """The held-out batch that :func:`run_recall`, :func:`needle_selection` and :func:`distractor_comparison` score.

    Args:
        task: a name of :data:`TASKS`.
        task_kwargs: the task's sizes.
        seed: the seed of the run.
        n_test: the held-out sequences.

    Shape:
        returns x and y ``(n_test, n)``.

    Returns:
        ``(x, y)`` from a generator that the training batches never use.

    Raises:
        ValueError: for an unknown task.
    """
    make, _ = _task(task, task_kwargs)
    return _held_out(make, seed, n_test)


def mixer_inputs(model: RecallModel, x: Tensor) -> list[Tensor]:
    """What each of ``model``'s mixers receives for tokens ``x`` (captured by forward pre-hooks, no gradient).

    Args:
        model: a :class:`RecallModel`.
        x: token ids.

    Shape:
        x: ``(B, n)``; returns one ``(B, n, d_model)`` per layer.

    Returns:
        The inputs of the mixers, in layer order.
    """
    seen: list[Tensor] = []
    hooks = [m.register_forward_pre_hook(lambda _m, args: seen.append(args[0].detach())) for m in model.mixers]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def run_recall(
    mixer: str | MixerFactory,
    task_kwargs: dict[str, Any],
    seed: int,
    steps: int = 80,
    *,
    task: str = "mqar",
    n_test: int = 256,
    **train_kwargs: Any,
) -> float:
    """Train one model (:func:`train_recall`) and return its held-out accuracy at the query positions.

    Args:
        mixer: a name of :data:`MIXERS` or a factory.
        task_kwargs: the task's sizes.
        seed: the seed.
        steps: training steps.
        task: a name of :data:`TASKS`.
        n_test: the held-out sequences.
        **train_kwargs: ``batch``, ``lr`` and the :class:`RecallModel` arguments.

    Returns:
        The accuracy.

    Raises:
        ValueError: as :func:`train_recall`.
    """
    model, make = train_recall(mixer, task, task_kwargs, seed, steps, **train_kwargs)
    return accuracy(model, *_held_out(make, seed, n_test))


def recall_grid(
    mixers: Sequence[str],
    sizes: Sequence[int],
    task_kwargs: dict[str, Any],
    *,
    size_key: str = "n_pairs",
    seeds: Sequence[int] = DEFAULT_SEEDS,
    **run_kwargs: Any,
) -> dict[str, list[float]]:
    """Accuracy of every mixer at every size over the seeds: ``{"<mixer> <size_key>=<size>": [acc per seed]}``.

    The lists follow ``seeds``, so two mixers at one size pair up for
    :func:`~attnsurvey.stats.paired_difference`; :func:`~attnsurvey.stats.table` prints them.

    Args:
        mixers: names of :data:`MIXERS`.
        sizes: values of ``task_kwargs[size_key]``.
        task_kwargs: the task's other sizes.
        size_key: the task argument that varies.
        seeds: the seeds.
        **run_kwargs: the other arguments of :func:`run_recall`.

    Returns:
        The accuracies.

    Raises:
        ValueError: as :func:`run_recall`.
    """
    results: dict[str, list[float]] = {}
    for size in sizes:
        kw = {**task_kwargs, size_key: size}
        for mixer in mixers:
            got = over_seeds(lambda s: {"acc": run_recall(mixer, kw, s, **run_kwargs)}, seeds)  # noqa: B023
            results[f"{mixer} {size_key}={size}"] = got["acc"]
    return results


def needle_selection(
    task_kwargs: dict[str, Any],
    seed: int,
    ks: Sequence[int],
    steps: int = 80,
    *,
    selectors: Sequence[str] = ("window",),
    n_test: int = 256,
    models: dict[int, RecallModel] | None = None,
    **train_kwargs: Any,
) -> dict[str, float]:
    """Train dense softmax attention on the needle task once, then score it with selection mixers at each ``k``.

    Each selector of :data:`SELECTORS` builds, from every trained :class:`SoftmaxMixer`, a mixer
    that keeps ``k`` keys (sharing the dense projections); the model's other weights stay.

    Args:
        task_kwargs: the sizes of :func:`~attnsurvey.data.recall.needle_batch`.
        seed: the seed.
        ks: the numbers of keys kept.
        steps: training steps.
        selectors: names of :data:`SELECTORS`.
        n_test: the held-out sequences.
        models: if given, the trained dense model is stored as ``models[seed]``.
        **train_kwargs: as :func:`run_recall` (the mixer is ``"softmax"``).

    Returns:
        ``{"dense": acc, "<selector> k=<k>": acc, ...}``.

    Raises:
        ValueError: for an unknown selector, or as :func:`train_recall`.
    """
    for name in selectors:
        if name not in SELECTORS:
            raise ValueError(f"unknown selector {name!r}; known: {sorted(SELECTORS)}")
    model, make = train_recall("softmax", "needle", task_kwargs, seed, steps, **train_kwargs)
    if models is not None:
        models[seed] = model
    x, y = _held_out(make, seed, n_test)
    results = {"dense": accuracy(model, x, y)}
    dense = list(model.mixers)
    for name in selectors:
        for k in ks:
            model.mixers = nn.ModuleList(SELECTORS[name](m, k) for m in dense)
            results[f"{name} k={k}"] = accuracy(model, x, y)
    model.mixers = nn.ModuleList(dense)
    return results


def distractor_comparison(
    task_kwargs: dict[str, Any],
    mixers: Sequence[str] = ("softmax", "differential"),
    seeds: Sequence[int] = DEFAULT_SEEDS,
    steps: int = 250,
    *,
    models: dict[tuple[str, int], RecallModel] | None = None,
    n_test: int = 256,
    **train_kwargs: Any,
) -> dict[str, list[float]]:
    """Size-matched mixers on :func:`~attnsurvey.data.recall.distractor_batch`, same seeds: ``{mixer: [acc]}``.

    Args:
        task_kwargs: the task's sizes.
        mixers: names of :data:`MIXERS`.
        seeds: the seeds.
        steps: training steps.
        models: if given, each trained model is stored as ``models[mixer, seed]``.
        n_test: the held-out sequences.
        **train_kwargs: ``batch``, ``lr`` and the :class:`RecallModel` arguments.

    Returns:
        The accuracies per mixer, in the order of ``seeds``.

    Raises:
        ValueError: as :func:`run_recall`.
    """

    def run(seed: int) -> dict[str, float]:
        got = {}
        for mixer in mixers:
            model, make = train_recall(mixer, "distractor", task_kwargs, seed, steps, **train_kwargs)
            if models is not None:
                models[mixer, seed] = model
            got[mixer] = accuracy(model, *_held_out(make, seed, n_test))
        return got

    return over_seeds(run, seeds)


__all__ = [
    "MIXERS",
    "MOBA_BLOCK",
    "SELECTORS",
    "TASKS",
    "RecallModel",
    "SoftmaxMixer",
    "accuracy",
    "distractor_comparison",
    "held_out_batch",
    "mixer_inputs",
    "moba_from_dense",
    "needle_selection",
    "parameter_count",
    "recall_grid",
    "run_recall",
    "train_recall",
]
