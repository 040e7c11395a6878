"""Does sharing key/value heads cost accuracy? MHA, GQA and MQA on the copy-k-back task.

The task model is :class:`attnsurvey.beyond.decoding.TinyDecoderLM` (one
pre-norm block, 4 query heads, width 32) with ``n_kv_heads`` = 4 (MHA), 2
(GQA) or 1 (MQA); everything else is equal, so the variants differ only in
how many K/V heads they keep (and hence in cache size and in the size of
``W_K`` and ``W_V``). Training: :func:`attnsurvey.experiments.long_positions.fit_copy_back`.
"""

from __future__ import annotations

from typing import Any

from ..beyond.decoding import TinyDecoderLM
from ..training import seed_everything
from .long_positions import copy_back_accuracy, fit_copy_back

KV_VARIANTS = {"MHA": 4, "GQA": 2, "MQA": 1}


def train_kv_variant(
    n_kv_heads: int,
    seed: int,
    n_train: int = 64,
    k: int = 3,
    vocab: int = 8,
    steps: int = 120,
    d_model: int = 32,
    n_heads: int = 4,
) -> TinyDecoderLM:
    """Train one variant; ``seed`` fixes weights and data. Returns the model in eval mode."""
    g = seed_everything(seed)
    model = TinyDecoderLM(
        vocab, d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads, d_ff=2 * d_model, n_layers=1, max_len=n_train
    )
    return fit_copy_back(model, g, n_train, k, vocab, steps=steps)


def kv_sharing_table(seeds: tuple[int, ...] = (0, 1, 2, 3, 4), **kw: Any) -> dict[str, list[float]]:
    """Copy-back accuracy at the training length, ``{variant: [accuracy per seed]}``."""
    n, k, vocab = kw.get("n_train", 64), kw.get("k", 3), kw.get("vocab", 8)
    return {
        name: [copy_back_accuracy(train_kv_variant(g, s, **kw), n, k, vocab) for s in seeds]
        for name, g in KV_VARIANTS.items()
    }
