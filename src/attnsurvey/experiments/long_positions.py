"""Train at one length, test at longer ones: position encodings on "copy the token k back".

The task model is a one-layer causal Transformer encoder (token embedding,
position information, one :class:`~attnsurvey.transformer.model.EncoderLayer`,
a linear read-out per position). Only the position information changes:

* ``"none"``: no positions (the causal mask alone);
* ``"sinusoidal"``, ``"learned"``: absolute codes added to the embeddings
  (:mod:`attnsurvey.transformer.positional`); the learned table has
  ``max_len = n_train`` vectors, so it has nothing to say about longer inputs;
* ``"relative"``: Shaw et al.'s clipped relative vectors
  (:class:`~attnsurvey.transformer.relative.RelativeSelfAttention`);
* ``"rope"``, ``"alibi"``: :mod:`attnsurvey.beyond.positions`.
"""

from __future__ import annotations

import math
from typing import Any, Final, TypedDict, TypeVar, Unpack, cast

import torch
import torch.nn.functional as F_
from torch import Tensor, nn

from .._checks import with_defaults
from ..beyond.positions import ALiBiSelfAttention, RotarySelfAttention
from ..data.sequences import IGNORE, copy_back_batch
from ..masking import causal_mask
from ..training import seed_everything, train
from ..transformer.model import Encoder
from ..transformer.positional import LearnedPositionEncoding, SinusoidalPositionEncoding
from ..transformer.relative import RelativeSelfAttention

ENCODINGS = ("none", "sinusoidal", "learned", "relative", "rope", "alibi")
SINUSOIDAL_TABLE = 4096
_Tagger = TypeVar("_Tagger", bound=nn.Module)


class PositionTagger(nn.Module):
    """Embedding + position information + one causal encoder layer + read-out.

    Args: vocab, encoding (one of :data:`ENCODINGS`), d_model, h, d_ff, max_len
    (rows of the learned table; the sinusoidal code is tabulated for
    ``SINUSOIDAL_TABLE`` positions), b (clipping distance of
    ``"relative"``). ``forward(tokens)``: ``(B, n)`` integers -> ``(logits (B, n,
    vocab), weights (B, h, n, n))``. Raises ``ValueError`` for an unknown
    encoding, or (absolute encodings) for ``n > max_len``.
    """

    def __init__(
        self, vocab: int, encoding: str, d_model: int = 16, h: int = 2, d_ff: int = 32, max_len: int = 64, b: int = 8
    ) -> None:
        super().__init__()
        if encoding not in ENCODINGS:
            raise ValueError(f"encoding must be one of {ENCODINGS}, got {encoding!r}")
        self.encoding = encoding
        self.embed = nn.Embedding(vocab, d_model)
        self.position: nn.Module = nn.Identity()
        if encoding == "sinusoidal":  # a fixed code exists for every position: tabulate plenty
            self.position = SinusoidalPositionEncoding(d_model, SINUSOIDAL_TABLE)
        elif encoding == "learned":  # one trained vector per position seen in training, no more
            self.position = LearnedPositionEncoding(d_model, max_len)
        factories = {
            "relative": lambda: RelativeSelfAttention(d_model, h, b),
            "rope": lambda: RotarySelfAttention(d_model, h),
            "alibi": lambda: ALiBiSelfAttention(d_model, h),
        }
        self.encoder = Encoder(1, d_model, h, d_ff, norm_first=True, self_attn_factory=factories.get(encoding))
        self.readout = nn.Linear(d_model, vocab)

    def forward(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        n = tokens.shape[-1]
        H, weights = self.encoder(
            self.position(self.embed(tokens)), causal_mask(n, device=tokens.device)[None]
        )  # (1, n, n): one mask for the batch
        return self.readout(H), weights[0]


def _logits(model: nn.Module, x: Tensor) -> Tensor:
    out = model(x)
    return out[0] if isinstance(out, tuple) else out


def _loss(model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    x, y = batch
    return F_.cross_entropy(_logits(model, x).flatten(0, 1), y.flatten(), ignore_index=IGNORE)


class CopyBackTask(TypedDict, total=False):
    """The options of training on copy-``k``-back (:func:`fit_copy_back`; defaults: :data:`COPY_BACK`).

    n_train: the training length; k: the offset of the copied token; vocab: the
    number of symbols; steps, batch, lr: Adam steps, sequences per batch, learning rate.
    """

    n_train: int
    k: int
    vocab: int
    steps: int
    batch: int
    lr: float


#: The value of every :class:`CopyBackTask` option that a call leaves out.
COPY_BACK: Final[CopyBackTask] = {"n_train": 64, "k": 3, "vocab": 8, "steps": 80, "batch": 16, "lr": 1e-2}


def copy_back_task(task: CopyBackTask) -> CopyBackTask:
    """Every option of ``task``, the missing ones from :data:`COPY_BACK`; ``TypeError`` for an undeclared name."""
    return with_defaults(task, COPY_BACK, "CopyBackTask")


def fit_copy_back(model: _Tagger, generator: torch.Generator, **task: Unpack[CopyBackTask]) -> _Tagger:
    """Train any causal tagger (``model(x)`` -> logits ``(B, n, vocab)``, or a tuple starting with them) on copy-``k``-back.

    Keyword options: :class:`CopyBackTask` (defaults in :data:`COPY_BACK`).
    Batches of length ``n_train`` are drawn from ``generator``. Returns the model in eval mode.
    """
    t = copy_back_task(task)
    data = (copy_back_batch(t["batch"], t["n_train"], t["vocab"], t["k"], generator) for _ in range(t["steps"]))
    train(model, _loss, data, lr=t["lr"])
    return model


def train_copy_back(encoding: str, seed: int, **kw: Any) -> PositionTagger:
    """Train a :class:`PositionTagger` with :func:`fit_copy_back` at length ``n_train``.

    ``seed`` fixes the initial weights and the data; ``kw`` holds the options of
    :class:`CopyBackTask` (defaults in :data:`COPY_BACK`: ``n_train=64``, ``k=3``,
    ``vocab=8``, ...) and the model's (``d_model``, ``h``, ``d_ff``, ``b``).
    Returns the model in eval mode.
    """
    task = copy_back_task(cast(CopyBackTask, {key: kw.pop(key) for key in COPY_BACK if key in kw}))
    g = seed_everything(seed)
    model = PositionTagger(task["vocab"], encoding, max_len=task["n_train"], **kw)
    return fit_copy_back(model, g, **task)


@torch.no_grad()
def copy_back_accuracy(
    model: nn.Module,
    n: int,
    k: int = COPY_BACK["k"],
    vocab: int = COPY_BACK["vocab"],
    batch: int = 32,
    seed: int = 1000,
) -> float:
    """Token accuracy on fresh sequences of length ``n`` (positions with a target only; ``k``, ``vocab`` as trained).

    Returns ``nan`` when the model cannot represent length ``n`` at all (a
    learned table shorter than ``n``).
    """
    position = getattr(model, "position", None)
    if (
        getattr(model, "encoding", None) == "learned"
        and isinstance(position, LearnedPositionEncoding)
        and n > position.max_len
    ):
        return math.nan
    x, y = copy_back_batch(batch, n, vocab, k, torch.Generator().manual_seed(seed))
    keep = y != IGNORE
    return float((_logits(model, x).argmax(-1)[keep] == y[keep]).float().mean())


def extrapolation_table(
    encodings: tuple[str, ...] = ENCODINGS,
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4),
    lengths: tuple[int, ...] = (64, 128, 256),
    models: dict[str, PositionTagger] | None = None,
    **train_kw: Any,
) -> dict[str, list[list[float]]]:
    """Accuracy per encoding, per seed, per test length: ``{encoding: [[acc at each length] per seed]}``.

    Training is at ``lengths[0]``. Every encoding is trained on the same seeds
    (the same batches). If ``models`` is a dict, the model of the first seed of
    each encoding is stored in it (to look at its attention).
    """
    k, vocab = train_kw.get("k", COPY_BACK["k"]), train_kw.get("vocab", COPY_BACK["vocab"])
    out: dict[str, list[list[float]]] = {}
    for enc in encodings:
        out[enc] = []
        for s in seeds:
            model = train_copy_back(enc, s, n_train=lengths[0], **train_kw)
            if models is not None and s == seeds[0]:
                models[enc] = model
            out[enc].append([copy_back_accuracy(model, n, k, vocab) for n in lengths])
    return out
