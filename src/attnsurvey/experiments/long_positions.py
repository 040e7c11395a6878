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

Shapes: B batch, n tokens, h heads, vocab vocabulary size.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Final, TypedDict, TypeVar, Unpack, cast

import torch
import torch.nn.functional as F_
from torch import Tensor, nn

from .._checks import Default, option_defaults, with_defaults
from ..beyond.positions import ALiBiSelfAttention, RotarySelfAttention
from ..data.next_token import lagged_sum_batch
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

    The inputs are tokens, so every hidden row is finite: the encoder layer and its
    attention skip their own NaN-inert clearing (their private ``_finite_inputs`` flag, as in
    :class:`~attnsurvey.transformer.model.Seq2SeqTransformer`), which computes the same bits.

    Args:
        vocab: the vocabulary size.
        encoding: one of :data:`ENCODINGS`.
        d_model: the model width.
        h: the number of heads.
        d_ff: the FFN width.
        max_len: rows of the learned table (the sinusoidal code is tabulated for
            ``SINUSOIDAL_TABLE`` positions).
        b: the clipping distance of ``"relative"``.
        learned_sd: the learned table starts as ``N(0, learned_sd^2)``; the default 1
            matches the token embeddings, which ``nn.Embedding`` draws from ``N(0, 1)``.

    Shape:
        - tokens: ``(B, n)`` integers.
        - Output: ``(logits (B, n, vocab), weights (B, h, n, n))``.

    Raises:
        ValueError: for an unknown encoding, or (absolute encodings) for ``n > max_len``.
    """

    def __init__(
        self,
        vocab: int,
        encoding: str,
        d_model: int = 16,
        h: int = 2,
        d_ff: int = 32,
        max_len: int = 64,
        b: int = 8,
        learned_sd: float = 1.0,
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
            nn.init.normal_(self.position.P, std=learned_sd)  # the tokens' scale, not the class's small default
        factories = {
            "relative": lambda: RelativeSelfAttention(d_model, h, b),
            "rope": lambda: RotarySelfAttention(d_model, h),
            "alibi": lambda: ALiBiSelfAttention(d_model, h),
        }
        self.encoder = Encoder(1, d_model, h, d_ff, norm_first=True, self_attn_factory=factories.get(encoding))
        self.readout = nn.Linear(d_model, vocab)

    def forward(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        n = tokens.shape[-1]
        mask = causal_mask(n, device=tokens.device)[None]  # (1, n, n): one mask for the batch
        # tokens in: every hidden row is finite and the causal mask leaves no row empty, so the layer
        # trusts its inputs (as Seq2SeqTransformer's layers do) and skips the NaN-inert clearing
        H, weights = self.encoder(self.position(self.embed(tokens)), mask, _finite_inputs=True)
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

    n_train: Annotated[int, Default(64)]
    k: Annotated[int, Default(3)]
    vocab: Annotated[int, Default(8)]
    steps: Annotated[int, Default(80)]
    batch: Annotated[int, Default(16)]
    lr: Annotated[float, Default(1e-2)]


#: The value of every :class:`CopyBackTask` option that a call leaves out.
COPY_BACK: Final[CopyBackTask] = option_defaults(CopyBackTask)


def copy_back_task(task: CopyBackTask) -> CopyBackTask:
    """Every option of ``task``, the missing ones from :data:`COPY_BACK`.

    Args:
        task: some options of :class:`CopyBackTask`.

    Returns:
        All the options.

    Raises:
        TypeError: for an undeclared name.
    """
    return with_defaults(task, COPY_BACK, "CopyBackTask")


def fit_copy_back(model: _Tagger, generator: torch.Generator, **task: Unpack[CopyBackTask]) -> _Tagger:
    """Train any causal tagger on copy-``k``-back.

    Batches of length ``n_train`` are drawn from ``generator``.

    Args:
        model: the tagger; ``model(x)`` returns logits ``(B, n, vocab)``, or a tuple
            starting with them.
        generator: the random generator of the batches.
        task: keyword options of :class:`CopyBackTask` (defaults in :data:`COPY_BACK`).

    Returns:
        The model, in eval mode.
    """
    t = copy_back_task(task)
    data = (copy_back_batch(t["batch"], t["n_train"], t["vocab"], t["k"], generator) for _ in range(t["steps"]))
    train(model, _loss, data, lr=t["lr"])
    return model


def train_copy_back(encoding: str, seed: int, **kw: Any) -> PositionTagger:
    """Train a :class:`PositionTagger` with :func:`fit_copy_back` at length ``n_train``.

    Args:
        encoding: one of :data:`ENCODINGS`.
        seed: fixes the initial weights and the data.
        kw: the options of :class:`CopyBackTask` (defaults in :data:`COPY_BACK`:
            ``n_train=64``, ``k=3``, ``vocab=8``, ...) and the model's (``d_model``, ``h``,
            ``d_ff``, ``b``).

    Returns:
        The model, in eval mode.
    """
    task = copy_back_task(cast(CopyBackTask, {key: kw.pop(key) for key in COPY_BACK if key in kw}))
    g = seed_everything(seed)
    model = PositionTagger(task["vocab"], encoding, max_len=task["n_train"], **kw)
    return fit_copy_back(model, g, **task)


def _beyond_table(model: nn.Module, n: int) -> bool:
    """Whether ``model`` has a learned position table with fewer than ``n`` rows."""
    position = getattr(model, "position", None)
    return (
        getattr(model, "encoding", None) == "learned"
        and isinstance(position, LearnedPositionEncoding)
        and n > position.max_len
    )


@torch.no_grad()
def copy_back_accuracy(
    model: nn.Module,
    n: int,
    k: int = COPY_BACK["k"],
    vocab: int = COPY_BACK["vocab"],
    batch: int = 32,
    seed: int = 1000,
) -> float:
    """Token accuracy on fresh sequences of length ``n`` (positions with a target only).

    Args:
        model: the trained tagger.
        n: the test length.
        k: the offset, as trained.
        vocab: the vocabulary size, as trained.
        batch: the number of test sequences.
        seed: the test seed.

    Returns:
        The accuracy; ``nan`` when the model cannot represent length ``n`` at all (a
        learned table shorter than ``n``).
    """
    if _beyond_table(model, n):
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
    """Accuracy per encoding, per seed, per test length on copy-back.

    Training is at ``lengths[0]``. Every encoding is trained on the same seeds
    (the same batches).

    Args:
        encodings: the position encodings to compare.
        seeds: the training seeds.
        lengths: the test lengths, the first the training length.
        models: if a dict, the model of the first seed of each encoding is stored in it
            (to look at its attention).
        train_kw: further options of :func:`train_copy_back`.

    Returns:
        ``{encoding: [[acc at each length] per seed]}``.
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


class NextTokenTask(TypedDict, total=False):
    """The options of :func:`train_next_token` (defaults: :data:`NEXT_TOKEN`).

    n_train: training length; vocab, lag, p_noise: the task of
    :func:`~attnsurvey.data.next_token.lagged_sum_batch`; steps, batch, lr: Adam
    steps, sequences per batch, learning rate; d_model, h, d_ff: the model's sizes.
    """

    n_train: Annotated[int, Default(32)]
    vocab: Annotated[int, Default(8)]
    lag: Annotated[int, Default(1)]
    p_noise: Annotated[float, Default(0.1)]
    steps: Annotated[int, Default(150)]
    batch: Annotated[int, Default(16)]
    lr: Annotated[float, Default(1e-2)]
    d_model: Annotated[int, Default(32)]
    h: Annotated[int, Default(8)]
    d_ff: Annotated[int, Default(64)]


#: The value of every :class:`NextTokenTask` option that a call leaves out (8 heads: ALiBi's slopes 1/2 ... 1/256).
NEXT_TOKEN: Final[NextTokenTask] = option_defaults(NextTokenTask)


def train_next_token(encoding: str, seed: int, **task: Unpack[NextTokenTask]) -> PositionTagger:
    """Train a causal :class:`PositionTagger` to predict the next token of lagged-sum sequences.

    The sequences have length ``n_train``.

    Args:
        encoding: one of :data:`ENCODINGS`.
        seed: fixes the initial weights and the batches.
        task: options of :class:`NextTokenTask` (defaults in :data:`NEXT_TOKEN`).

    Returns:
        The model, in eval mode.

    Raises:
        ValueError: for an unknown encoding or option values the task refuses.
    """
    t = with_defaults(task, NEXT_TOKEN, "NextTokenTask")
    g = seed_everything(seed)
    model = PositionTagger(t["vocab"], encoding, t["d_model"], t["h"], t["d_ff"], max_len=t["n_train"])
    data = (
        lagged_sum_batch(t["batch"], t["n_train"], t["vocab"], g, lag=t["lag"], p_noise=t["p_noise"])
        for _ in range(t["steps"])
    )
    train(model, _loss, data, lr=t["lr"])
    return model


@torch.no_grad()
def next_token_accuracy(
    model: nn.Module,
    n: int,
    vocab: int = NEXT_TOKEN["vocab"],
    lag: int = NEXT_TOKEN["lag"],
    p_noise: float = NEXT_TOKEN["p_noise"],
    batch: int = 32,
    seed: int = 2000,
) -> float:
    """Next-token accuracy on ``batch`` fresh lagged-sum sequences of length ``n`` (positions with a target).

    The best possible accuracy is ``1 - p_noise + p_noise / vocab``.

    Args:
        model: the trained tagger.
        n: the test length.
        vocab: the vocabulary size.
        lag: the lag of the sequences.
        p_noise: the chance of a uniform token.
        batch: the number of test sequences.
        seed: the test seed.

    Returns:
        The accuracy; ``nan`` when a learned position table is shorter than ``n``.
    """
    if _beyond_table(model, n):
        return math.nan
    x, y = lagged_sum_batch(batch, n, vocab, torch.Generator().manual_seed(seed), lag=lag, p_noise=p_noise)
    keep = y != IGNORE
    return float((_logits(model, x).argmax(-1)[keep] == y[keep]).float().mean())


def next_token_table(
    encodings: tuple[str, ...],
    seeds: tuple[int, ...],
    lengths: tuple[int, ...],
    models: dict[tuple[str, int], PositionTagger] | None = None,
    **task: Unpack[NextTokenTask],
) -> dict[str, list[list[float]]]:
    """Next-token accuracy per encoding, per seed, per test length.

    Training is at ``task["n_train"]`` (default :data:`NEXT_TOKEN`); every encoding
    runs on the same seeds.

    Args:
        encodings: the position encodings to compare.
        seeds: the training seeds.
        lengths: the test lengths.
        models: if a dict, every trained model is stored in it under ``(encoding, seed)``.
        task: keyword options of :class:`NextTokenTask`.

    Returns:
        ``{encoding: [[acc at each length] per seed]}``.
    """
    t = with_defaults(task, NEXT_TOKEN, "NextTokenTask")
    out: dict[str, list[list[float]]] = {}
    for enc in encodings:
        out[enc] = []
        for s in seeds:
            model = train_next_token(enc, s, **t)
            if models is not None:
                models[enc, s] = model
            out[enc].append([next_token_accuracy(model, n, t["vocab"], t["lag"], t["p_noise"]) for n in lengths])
    return out


@torch.no_grad()
def far_attention_mass(model: nn.Module, n: int, far: int, vocab: int = NEXT_TOKEN["vocab"], seed: int = 2000) -> float:
    """Mean attention weight on keys ``far`` or more positions back, over heads and the queries ``t >= far``.

    The model is run on 32 lagged-sum sequences of length ``n`` (as
    :func:`next_token_accuracy`); its weights ``(B, h, n, n)`` give, for each
    query ``t >= far``, the summed weight on keys ``j <= t - far``. With ``far``
    the training length, that is the weight on offsets the model never saw in
    training.

    Args:
        model: the trained tagger.
        n: the test length.
        far: the distance (``1 <= far < n``).
        vocab: the vocabulary size.
        seed: the test seed.

    Returns:
        The mean far weight.

    Raises:
        ValueError: unless ``1 <= far < n``.
    """
    if not 1 <= far < n:
        raise ValueError(f"need 1 <= far < n, got far={far}, n={n}")
    x, _ = lagged_sum_batch(32, n, vocab, torch.Generator().manual_seed(seed))
    weights = model(x)[1]  # (B, h, n, n)
    t = torch.arange(n)
    far_keys = (t[None, :] <= t[:, None] - far).to(weights.dtype)  # (n, n): key j is >= far back from query t
    mass = (weights * far_keys).sum(-1)[..., far:]  # (B, h, n - far)
    return float(mass.mean())
