"""Does sharing key/value heads cost accuracy? MHA, GQA and MQA on the copy-k-back task.

The task model is :class:`attnsurvey.beyond.decoding.TinyDecoderLM` (one
pre-norm block, 4 query heads, width 32) with ``n_kv_heads`` = 4 (MHA), 2
(GQA) or 1 (MQA); everything else is equal, so the variants differ only in
how many K/V heads they keep (and hence in cache size and in the size of
``W_K`` and ``W_V``). Training: :func:`attnsurvey.experiments.long_positions.fit_copy_back`.
"""

from __future__ import annotations

from typing import Annotated, Final, Unpack

from .._checks import Default, option_defaults
from ..beyond.decoding import TinyDecoderLM
from ..training import seed_everything
from .long_positions import CopyBackTask, copy_back_accuracy, copy_back_task, fit_copy_back

KV_VARIANTS = {"MHA": 4, "GQA": 2, "MQA": 1}


class KVVariantOptions(CopyBackTask, total=False):
    """The options of :func:`train_kv_variant` and :func:`kv_sharing_table`: the task's
    (:class:`~attnsurvey.experiments.long_positions.CopyBackTask`), the model width
    ``d_model`` and the number of query heads ``n_heads`` (defaults: :data:`KV_VARIANT`)."""

    d_model: Annotated[int, Default(32)]
    n_heads: Annotated[int, Default(4)]


#: The defaults of :class:`KVVariantOptions`: the task's (:data:`~attnsurvey.experiments.long_positions.COPY_BACK`)
#: with 120 steps, width 32 and 4 query heads.
KV_VARIANT: Final[KVVariantOptions] = {**option_defaults(KVVariantOptions), "steps": 120}


def train_kv_variant(n_kv_heads: int, seed: int, **options: Unpack[KVVariantOptions]) -> TinyDecoderLM:
    """Train one copy-back decoder variant; ``seed`` fixes weights and data.

    Args:
        n_kv_heads: key/value heads (``n_heads`` for MHA, fewer for GQA, 1 for MQA).
        seed: the seed of the weights and the data.
        **options: :class:`KVVariantOptions` (defaults in :data:`KV_VARIANT`).

    Returns:
        The trained model, in eval mode.

    Raises:
        TypeError: an option it does not declare.
    """
    o: KVVariantOptions = {**KV_VARIANT, **options}
    d_model, n_heads = o.pop("d_model"), o.pop("n_heads")
    task = copy_back_task(o)  # raises TypeError for an unknown name
    g = seed_everything(seed)
    vocab, n_train = task["vocab"], task["n_train"]
    model = TinyDecoderLM(
        vocab, d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads, d_ff=2 * d_model, n_layers=1, max_len=n_train
    )
    return fit_copy_back(model, g, **task)


def kv_sharing_table(
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4), **options: Unpack[KVVariantOptions]
) -> dict[str, list[float]]:
    """Copy-back accuracy at the training length of every variant (MHA, GQA, MQA) over seeds.

    Args:
        seeds: the seeds; each variant trains once per seed.
        **options: :class:`KVVariantOptions`, for every variant (defaults in :data:`KV_VARIANT`).

    Returns:
        ``{variant: [accuracy per seed]}``.
    """
    task: KVVariantOptions = {**KV_VARIANT, **options}
    n, k, vocab = task["n_train"], task["k"], task["vocab"]
    return {
        name: [copy_back_accuracy(train_kv_variant(g, s, **options), n, k, vocab) for s in seeds]
        for name, g in KV_VARIANTS.items()
    }
