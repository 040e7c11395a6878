"""The encoder-decoder Transformer trained end to end on sequence reversal.

Task: :func:`attnsurvey.data.sequences.transduction_batch` with
``task="reverse"``, 20 symbols (``vocab_size = 22`` with ``PAD`` and ``BOS``)
and lengths 5-12 (at lengths 5-20 the 2 + 2-layer version of this model
needed 300 steps or more before it learned anything, too slow for the
chapter's time budget; one layer on each side learns lengths 5-12 in 250
steps). Model: :class:`attnsurvey.transformer.model.Seq2SeqTransformer`.
Decoding: :func:`attnsurvey.beyond.search.greedy_search` and
:func:`~attnsurvey.beyond.search.beam_search`, for exactly as many tokens as
the input has (the output of a reversal is as long as its input); a batch of
mixed lengths is decoded in one pass (see :func:`step_function`).
Metrics: exact match (whole sequence right) and the book's corpus BLEU
(:func:`attnsurvey.evaluation.extrinsic.bleu`) over the token ids as words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Unpack

import torch
import torch.nn.functional as F_
from torch import Tensor

from ..beyond.search import StepFn, beam_search, greedy_search
from ..catalog import catalogued, declare
from ..data.sequences import BOS, PAD, SeqBatch, target_positions, transduction_batch
from ..evaluation.extrinsic import bleu
from ..masking import causal_mask
from ..training import seed_everything, train
from ..transformer.model import Seq2SeqTransformer, TransformerSize

CHAPTER = "chapters/ch06_4_trained_transformer.ipynb"
VOCAB = 22  #: 20 symbols + PAD + BOS
LENGTHS = (5, 12)


def reversal_data(batch: int, generator: torch.Generator) -> SeqBatch:
    """A batch of the reversal task of this chapter (20 symbols, lengths 5-12)."""
    return transduction_batch(batch, LENGTHS, vocab_size=VOCAB, task="reverse", generator=generator)


#: How the chapter's model differs from :data:`~attnsurvey.transformer.model.TRANSFORMER_SIZE` (width 32, 2 heads).
CHAPTER_SIZE: Final[TransformerSize] = {"n_layers": 1, "max_len": 32, "norm_first": True}


def make_model(embed_scale: float = 1.0, **size: Unpack[TransformerSize]) -> Seq2SeqTransformer:
    """The chapter's model: 1 + 1 layers of width 32 with 2 heads, pre-norm (:data:`CHAPTER_SIZE`).

    ``size`` (the options of :class:`~attnsurvey.transformer.model.TransformerSize`)
    overrides :data:`CHAPTER_SIZE`.

    ``embed_scale`` replaces the paper's ``sqrt(d_model)`` factor on the
    embeddings: ``nn.Embedding`` starts at N(0, 1), already as large as the
    sinusoidal code, and multiplying by ``sqrt(32)`` drowns the positions, which
    a reversal model needs most (with it, 250 steps learn nothing).
    """
    full: TransformerSize = {**CHAPTER_SIZE, **size}
    model = Seq2SeqTransformer(VOCAB, VOCAB, **full)
    model.scale = embed_scale
    return model


def _loss(model: Seq2SeqTransformer, batch: SeqBatch) -> Tensor:
    src, tgt_in, tgt_out, lengths = batch
    logits = model(src, tgt_in, lengths)
    return F_.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD)


@catalogued(
    "extra:trained-transformer",
    title="The encoder-decoder Transformer trained end to end on reversal; greedy and beam search, exact match and BLEU (beyond the survey)",
)
def train_reversal(
    seed: int, steps: int = 250, batch: int = 32, lr: float = 1e-2, **model_kw: Any
) -> tuple[Seq2SeqTransformer, list[float]]:
    """Train with teacher forcing for ``steps`` Adam steps; ``seed`` fixes weights and data.

    Returns ``(model in eval mode, losses per step)``.
    """
    g = seed_everything(seed)
    model = make_model(**model_kw)
    hist = train(model, _loss, (reversal_data(batch, g) for _ in range(steps)), lr=lr)
    return model, hist.losses


def step_function(model: Seq2SeqTransformer, src: Tensor, lengths: Tensor) -> StepFn:
    """The ``step_log_probs`` callable of :mod:`attnsurvey.beyond.search` for this model and source batch.

    Encodes ``src`` ``(B, n_x)`` once; the callable takes prefixes ``(B, k, t)``
    (``BOS`` and ``t - 1`` tokens) and returns next-token log-probabilities
    ``(B, k, V)``. Within example ``b``'s length ``PAD`` and ``BOS`` are never
    predicted; once ``lengths[b]`` tokens are written, ``PAD`` is certain
    (log-probability 0, every other token ``-inf``). So greedy or beam search
    run for the longest length leave every example's best sequence and its
    score as if it had been decoded alone for its own length, then pad it.
    """
    M, mask = model.encode(src, lengths)
    finished = torch.full((M.shape[0], 1, VOCAB), -torch.inf).index_fill(-1, torch.tensor(PAD), 0.0)

    def step(prefixes: Tensor) -> Tensor:
        B, k, t = prefixes.shape
        Mk = M.repeat_interleave(k, dim=0)
        maskk = None if mask is None else mask.repeat_interleave(k, dim=0)
        logits = model.decode(prefixes.reshape(B * k, t), Mk, maskk)[:, -1]
        logits[:, [PAD, BOS]] = -torch.inf
        log_probs = torch.log_softmax(logits, -1).reshape(B, k, -1)
        return torch.where((lengths <= t - 1)[:, None, None], finished, log_probs)

    return step


@catalogued("extra:trained-transformer")
@torch.no_grad()
def decode(model: Seq2SeqTransformer, data: SeqBatch, beam_width: int = 1) -> Tensor:
    """Decode every source of ``data``: greedy for width 1, else beam search.

    One search over the whole batch; :func:`step_function` ends each example
    at exactly its length. Returns ``(B, n)`` tokens, ``PAD`` after each
    example's length.
    """
    step = step_function(model, data.src, data.lengths)
    B, n = data.src.shape
    if beam_width == 1:
        return greedy_search(step, BOS, B, n)[0]
    return beam_search(step, BOS, B, n, beam_width)[0]


def _sentences(tokens: Tensor, lengths: Tensor) -> list[str]:
    return [" ".join(str(t) for t in row[:n].tolist()) for row, n in zip(tokens, lengths.tolist())]


def scores(pred: Tensor, data: SeqBatch) -> dict[str, float]:
    """``{"exact": fraction of sequences entirely right, "bleu": corpus BLEU in [0, 100]}``."""
    valid = torch.arange(pred.shape[1])[None, :] < data.lengths[:, None]
    exact = float(((pred == data.tgt_out) | ~valid).all(1).float().mean())
    return {"exact": exact, "bleu": bleu(_sentences(pred, data.lengths), _sentences(data.tgt_out, data.lengths))}


@torch.no_grad()
def cross_attention(model: Seq2SeqTransformer, data: SeqBatch) -> list[Tensor]:
    """Cross-attention weights with teacher forcing, one ``(B, h, n_y, n_x)`` tensor per decoder layer."""
    M, mask = model.encode(data.src, data.lengths)
    Y = model.position(model.tgt_embed(data.tgt_in) * model.scale)
    _, _, cross = model.decoder(Y, M, causal_mask(Y.shape[-2]), mask)
    return cross


@catalogued("extra:trained-transformer")
def mirrored_weight(a: Tensor, data: SeqBatch) -> Tensor:
    """Mean weight each head puts on the mirrored source position ``n - 1 - t``: ``(h,)``.

    a: cross-attention ``(B, h, n_y, n_x)``; averaged over the valid output
    positions of every example. A head that implements reversal scores 1;
    uniform attention over ``n`` positions scores ``1/n``.
    """
    pos = target_positions("reverse", data.src, data.lengths)  # (B, n), -1 on padding
    valid = pos >= 0
    w = a.gather(-1, pos.clamp_min(0)[:, None, :, None].expand(-1, a.shape[1], -1, 1)).squeeze(-1)  # (B, h, n)
    return (w * valid[:, None]).sum((0, 2)) / valid.sum()


@dataclass
class SeedResult:
    """Scores of one trained seed: greedy and beam, the identity baseline, mirrored weight per layer and head."""

    greedy: dict[str, float]
    beam: dict[str, float]
    identity: dict[str, float]
    mirrored: list[list[float]]


def run_seed(seed: int, test: SeqBatch, beam_width: int = 4, **train_kw: Any) -> tuple[Seq2SeqTransformer, SeedResult]:
    """Train one seed and score it on ``test`` (the same test set for every seed)."""
    model, _ = train_reversal(seed, **train_kw)
    mirrored = [mirrored_weight(a, test).tolist() for a in cross_attention(model, test)]
    result = SeedResult(
        greedy=scores(decode(model, test, 1), test),
        beam=scores(decode(model, test, beam_width), test),
        identity=scores(test.src, test),
        mirrored=mirrored,
    )
    return model, result


declare("attnsurvey.transformer.model.Seq2SeqTransformer", "extra:trained-transformer")
