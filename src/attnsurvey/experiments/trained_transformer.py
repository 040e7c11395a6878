"""The encoder-decoder Transformer trained end to end on sequence reversal.

Task: :func:`attnsurvey.data.sequences.transduction_batch` with
``task="reverse"``, 20 symbols and lengths 5-12 (at lengths 5-20 the 2 + 2-layer
version of this model needed 300 steps or more before it learned anything, too
slow for the chapter's time budget; one layer on each side learns lengths 5-12
in 250 steps). Targets end with an end-of-sequence token ``EOS`` (:func:`with_eos`),
so ``VOCAB = 23``: ``PAD``, ``BOS``, the 20 symbols (ids 2-21) and ``EOS`` (id 22).
Model: :class:`attnsurvey.transformer.model.Seq2SeqTransformer`.
Decoding: :func:`attnsurvey.beyond.search.greedy_search` and
:func:`~attnsurvey.beyond.search.beam_search`, which stop at ``EOS`` (at most
:data:`MAX_DECODE` tokens), so the decoder decides the output length itself.
Metrics: exact match (the whole sequence right, its length included) and the
book's corpus BLEU (:func:`attnsurvey.evaluation.extrinsic.bleu`) over the token
ids as words.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Unpack

import torch
import torch.nn.functional as F_
from torch import Tensor

from ..beyond.search import beam_search, greedy_search
from ..catalog import catalogued, declare
from ..data.sequences import BOS, PAD, SeqBatch, target_positions, transduction_batch
from ..evaluation.extrinsic import bleu
from ..masking import causal_mask
from ..training import seed_everything, train
from ..transformer.model import Seq2SeqTransformer, TransformerSize

CHAPTER = "chapters/ch06_4_trained_transformer.ipynb"
EOS = 22  #: the end-of-sequence token, after the 20 symbols 2-21
VOCAB = 23  #: 20 symbols + PAD + BOS + EOS
LENGTHS = (5, 12)
#: The most tokens a decoder may write (``EOS`` included): twice the longest input, the same for every example.
MAX_DECODE = 2 * LENGTHS[1]


def reversal_data(batch: int, generator: torch.Generator) -> SeqBatch:
    """A batch of the reversal task of this chapter (20 symbols, lengths 5-12), targets without ``EOS``.

    Args:
        batch: ``B``, the number of sequences.
        generator: the random source (a seed fixes the data).

    Shape:
        Returns ``src``, ``tgt_in``, ``tgt_out`` of shape ``(B, n)`` (``n`` the
        longest length drawn) and ``lengths`` ``(B,)``.

    Returns:
        A :class:`~attnsurvey.data.sequences.SeqBatch`, padded with ``PAD``.
    """
    return transduction_batch(batch, LENGTHS, vocab_size=EOS, task="reverse", generator=generator)


@catalogued("extra:length-penalty")
def with_eos(data: SeqBatch) -> SeqBatch:
    """The same batch with ``EOS`` after every target: what the model is trained to write.

    Args:
        data: a batch of :func:`reversal_data` (``tgt_out`` holds ``lengths[b]`` symbols, then ``PAD``).

    Shape:
        ``data.tgt_in`` and ``data.tgt_out`` ``(B, n)`` become ``(B, n + 1)``:
        ``tgt_in`` is ``BOS y_1 .. y_n``, ``tgt_out`` is ``y_1 .. y_n EOS`` (then
        ``PAD``); ``src`` and ``lengths`` (the source lengths) are unchanged.

    Returns:
        A new :class:`~attnsurvey.data.sequences.SeqBatch`.

    Raises:
        ValueError: if ``data.tgt_out`` already holds ``EOS``.
    """
    if bool((data.tgt_out == EOS).any()):
        raise ValueError(f"the targets already hold EOS={EOS}")
    B = data.tgt_out.shape[0]
    pad = torch.full((B, 1), PAD, dtype=data.tgt_out.dtype)
    tgt_out = torch.cat([data.tgt_out, pad], dim=1)
    tgt_out[torch.arange(B), data.lengths] = EOS
    tgt_in = torch.cat([torch.full((B, 1), BOS, dtype=tgt_out.dtype), data.tgt_out], dim=1)  # EOS is never an input
    return SeqBatch(data.src, tgt_in, tgt_out, data.lengths)


#: How the chapter's model differs from :data:`~attnsurvey.transformer.model.TRANSFORMER_SIZE` (width 32, 2 heads).
CHAPTER_SIZE: Final[TransformerSize] = {"n_layers": 1, "max_len": 32, "norm_first": True}


def make_model(embed_scale: float = 1.0, **size: Unpack[TransformerSize]) -> Seq2SeqTransformer:
    """The chapter's model: 1 + 1 layers of width 32 with 2 heads, pre-norm (:data:`CHAPTER_SIZE`).

    ``embed_scale`` replaces the paper's ``sqrt(d_model)`` factor on the
    embeddings: ``nn.Embedding`` starts at N(0, 1), already as large as the
    sinusoidal code, and multiplying by ``sqrt(32)`` would (we expect) drown the
    positions, which a reversal model needs most (with it, 250 steps get at most
    1 of the chapter's 100 test sequences right on seeds 0-2).

    Args:
        embed_scale: the factor on the embeddings.
        **size: options of :class:`~attnsurvey.transformer.model.TransformerSize`, overriding :data:`CHAPTER_SIZE`.

    Returns:
        An untrained :class:`~attnsurvey.transformer.model.Seq2SeqTransformer` over ``VOCAB`` tokens.
    """
    full: TransformerSize = {**CHAPTER_SIZE, **size}
    model = Seq2SeqTransformer(VOCAB, VOCAB, **full)
    model.scale = embed_scale
    return model


def _loss(model: Seq2SeqTransformer, batch: SeqBatch) -> Tensor:
    src, tgt_in, tgt_out, lengths = with_eos(batch)
    logits = model(src, tgt_in, lengths)
    return F_.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD)


@catalogued(
    "extra:trained-transformer",
    title="The encoder-decoder Transformer trained end to end on reversal; greedy and beam search, exact match and BLEU (beyond the survey)",
)
def train_reversal(
    seed: int, steps: int = 250, batch: int = 32, lr: float = 1e-2, **model_kw: Any
) -> tuple[Seq2SeqTransformer, list[float]]:
    """Train with teacher forcing on targets ending in ``EOS`` (:func:`with_eos`); ``seed`` fixes weights and data.

    Args:
        seed: the seed of the initial weights and of every batch.
        steps: the number of Adam steps, one fresh batch each.
        batch: sequences per batch.
        lr: the learning rate.
        **model_kw: passed to :func:`make_model`.

    Returns:
        ``(model in eval mode, losses per step)``.
    """
    g = seed_everything(seed)
    model = make_model(**model_kw)
    hist = train(model, _loss, (reversal_data(batch, g) for _ in range(steps)), lr=lr)
    return model, hist.losses


def step_function(model: Seq2SeqTransformer, src: Tensor, lengths: Tensor) -> Callable[[Tensor], Tensor]:
    """The ``step_log_probs`` callable of :mod:`attnsurvey.beyond.search` for this model and source batch.

    Encodes ``src`` once; the callable runs the decoder on every prefix and
    returns the next-token log-probabilities. ``PAD`` and ``BOS`` are never
    predicted (log-probability ``-inf``); ``EOS`` may come at any step: the
    model decides where its output ends.

    Args:
        model: the trained model (in eval mode).
        src: the source tokens.
        lengths: the source lengths (masks the padded source positions).

    Shape:
        src: ``(B, n_x)``; lengths: ``(B,)``. The callable maps prefixes
        ``(B, k, t)`` (``BOS`` and ``t - 1`` tokens) to ``(B, k, V)``.

    Returns:
        The callable.
    """
    M, mask = model.encode(src, lengths)

    def step(prefixes: Tensor) -> Tensor:
        B, k, t = prefixes.shape
        Mk = M.repeat_interleave(k, dim=0)
        maskk = None if mask is None else mask.repeat_interleave(k, dim=0)
        logits = model.decode(prefixes.reshape(B * k, t), Mk, maskk)[:, -1]
        logits[:, [PAD, BOS]] = -torch.inf
        return torch.log_softmax(logits, -1).reshape(B, k, -1)

    return step


@catalogued("extra:trained-transformer", "extra:length-penalty")
@torch.no_grad()
def decode(
    model: Seq2SeqTransformer, data: SeqBatch, beam_width: int = 1, alpha: float = 0.0, max_len: int = MAX_DECODE
) -> Tensor:
    """Decode every source of ``data`` until ``EOS``: greedy for width 1, else beam search.

    The true output lengths are not used: each hypothesis ends where the model
    writes ``EOS`` (or at ``max_len`` tokens). Beam search ranks the finished
    hypotheses by ``log P / lp`` with GNMT's length penalty of exponent ``alpha``.

    Args:
        model: the trained model.
        data: the batch whose ``src`` and ``lengths`` (source lengths) are decoded.
        beam_width: 1 for greedy search, else the beam width.
        alpha: the length-penalty exponent (0 = none; it does not change a greedy choice).
        max_len: the most tokens written per example, ``EOS`` included.

    Shape:
        data.src: ``(B, n_x)``; returns ``(B, max_len)``.

    Returns:
        The symbols of each output, then ``PAD`` (the ``EOS`` replaced by ``PAD``).

    Raises:
        ValueError: from the search, for ``beam_width < 1``, ``alpha < 0`` or ``max_len < 1``.
    """
    step = step_function(model, data.src, data.lengths)
    B = data.src.shape[0]
    if beam_width == 1:
        tokens = greedy_search(step, BOS, B, max_len, eos=EOS, alpha=alpha, pad=PAD)[0]
    else:
        tokens = beam_search(step, BOS, B, max_len, beam_width, eos=EOS, alpha=alpha, pad=PAD)[0]
    return tokens.masked_fill(tokens == EOS, PAD)


def output_lengths(pred: Tensor) -> Tensor:
    """The length of each predicted sequence: the position of its first ``PAD`` or ``EOS`` (else its width).

    Args:
        pred: predicted tokens.

    Shape:
        pred: ``(B, L)``; returns ``(B,)``.

    Returns:
        The number of symbols before the first ``PAD`` or ``EOS`` of each row.
    """
    end = (pred == PAD) | (pred == EOS)
    ends_at = torch.where(end, torch.arange(pred.shape[1]).expand_as(pred), pred.shape[1])
    return ends_at.min(1).values if pred.shape[1] else torch.zeros(pred.shape[0], dtype=torch.long)


def exact_per_sequence(pred: Tensor, data: SeqBatch) -> Tensor:
    """Whether each prediction is the whole target: the same length and the same symbols.

    Args:
        pred: predicted tokens, each sequence ending at its first ``PAD`` or ``EOS`` (:func:`output_lengths`).
        data: the batch; its ``tgt_out`` holds ``lengths[b]`` target symbols.

    Shape:
        pred: ``(B, L)`` for any ``L``; data.tgt_out: ``(B, n)``; returns ``(B,)`` boolean.

    Returns:
        ``True`` where the prediction equals the target.
    """
    width = max(pred.shape[1], data.tgt_out.shape[1])
    p = F_.pad(pred, (0, width - pred.shape[1]), value=PAD)
    y = F_.pad(data.tgt_out, (0, width - data.tgt_out.shape[1]), value=PAD)
    valid = torch.arange(width)[None, :] < data.lengths[:, None]
    same = ((p == y) | ~valid).all(1)
    return same & (output_lengths(pred) == data.lengths)


@catalogued("extra:length-penalty")
@torch.no_grad()
def sequence_log_prob(
    model: Seq2SeqTransformer, data: SeqBatch, pred: Tensor, open_at: int | None = None
) -> tuple[Tensor, Tensor]:
    """The model's log-probability of each given output, ``EOS`` included, scored as the search scores it.

    The sum of ``log p(y_t | y_<t, x)`` over the symbols of each output and its
    ``EOS``, from the same :func:`step_function` the search calls. Comparing the score of the target
    with that of the decoded output separates search errors (the target scores
    higher, the search missed it) from model errors (the model prefers the wrong output).
    An output that the search finished at its maximum length without writing ``EOS``
    (``open_at`` symbols long) is scored as the search scored it: without an ``EOS``.

    Args:
        model: the trained model.
        data: the batch whose sources are scored.
        pred: the outputs to score, each ending at its first ``PAD`` or ``EOS`` (:func:`output_lengths`).
        open_at: the search's maximum length (``max_len`` of :func:`decode`); an output of that many
            symbols is scored without ``EOS``. ``None``: every output gets its ``EOS``.

    Shape:
        pred: ``(B, L)``; returns two ``(B,)`` tensors.

    Returns:
        ``(log P(y [EOS] | x) in float64, |Y| = output length + 1, or the length for an open output)``.
    """
    n_out = output_lengths(pred)
    width = int(n_out.max()) if len(n_out) else 0
    B = pred.shape[0]
    body = torch.where(torch.arange(width)[None, :] < n_out[:, None], pred[:, :width], PAD)
    tgt_out = torch.cat([body, torch.full((B, 1), PAD, dtype=body.dtype)], dim=1)
    tgt_out[torch.arange(B), n_out] = EOS
    tgt_in = torch.cat([torch.full((B, 1), BOS, dtype=body.dtype), body], dim=1)
    step = step_function(model, data.src, data.lengths)
    picked = torch.stack(
        [step(tgt_in[:, None, : t + 1])[:, 0].gather(-1, tgt_out[:, t, None]).squeeze(-1) for t in range(width + 1)],
        dim=1,
    ).to(torch.float64)
    # an output finished at the maximum length has no EOS term (the search never wrote one)
    has_eos = n_out != open_at if open_at is not None else torch.ones_like(n_out, dtype=torch.bool)
    valid = torch.arange(width + 1)[None, :] < (n_out + has_eos.long())[:, None]
    return torch.where(valid, picked, 0.0).sum(1), n_out + has_eos.long()


def _sentences(tokens: Tensor, lengths: Tensor) -> list[str]:
    return [" ".join(str(t) for t in row[:n].tolist()) for row, n in zip(tokens, lengths.tolist())]


def scores(pred: Tensor, data: SeqBatch) -> dict[str, float]:
    """Exact match, BLEU and how often the output has the wrong length.

    Args:
        pred: predicted tokens, each sequence ending at its first ``PAD`` or ``EOS``.
        data: the batch with the targets.

    Shape:
        pred: ``(B, L)`` for any ``L``.

    Returns:
        ``{"exact": fraction of sequences entirely right (length included),
        "bleu": corpus BLEU in [0, 100] of the predicted sequences (their own
        lengths), "short": fraction shorter than the target, "long": fraction longer}``.
    """
    n_pred = output_lengths(pred)
    return {
        "exact": float(exact_per_sequence(pred, data).float().mean()),
        "bleu": bleu(_sentences(pred, n_pred), _sentences(data.tgt_out, data.lengths)),
        "short": float((n_pred < data.lengths).float().mean()),
        "long": float((n_pred > data.lengths).float().mean()),
    }


@torch.no_grad()
def cross_attention(model: Seq2SeqTransformer, data: SeqBatch) -> list[Tensor]:
    """Cross-attention weights with teacher forcing, one tensor per decoder layer.

    Args:
        model: a trained :class:`Seq2SeqTransformer`.
        data: the batch (sources, lengths, decoder inputs).

    Shape:
        Output: one ``(B, h, n_y, n_x)`` tensor per decoder layer.

    Returns:
        The list of weights, first layer first.
    """
    M, mask = model.encode(data.src, data.lengths)
    Y = model.position(model.tgt_embed(data.tgt_in) * model.scale)
    _, _, cross = model.decoder(Y, M, causal_mask(Y.shape[-2]), mask)
    return cross


@catalogued("extra:trained-transformer")
def mirrored_weight(a: Tensor, data: SeqBatch) -> Tensor:
    """Mean weight each head puts on the mirrored source position ``n - 1 - t``.

    Averaged over the valid output positions of every example. A head that
    implements reversal scores 1; uniform attention over ``n`` positions scores ``1/n``.

    Args:
        a: cross-attention weights of one layer.
        data: the batch they were computed on (its lengths mark the valid positions).

    Shape:
        a: ``(B, h, n_y, n_x)``; output ``(h,)``.

    Returns:
        The mean mirrored weight per head.
    """
    pos = target_positions("reverse", data.src, data.lengths)  # (B, n), -1 on padding
    valid = pos >= 0
    w = a.gather(-1, pos.clamp_min(0)[:, None, :, None].expand(-1, a.shape[1], -1, 1)).squeeze(-1)  # (B, h, n)
    return (w * valid[:, None]).sum((0, 2)) / valid.sum()


@dataclass
class SeedResult:
    """Scores of one trained seed on the test set (each a dict of :func:`scores`), and its mirrored weights.

    Attributes:
        greedy: greedy decoding.
        beam: beam search without a length penalty (``alpha = 0``).
        beam_lp: the same beam with the length penalty.
        identity: the baseline that outputs its input.
        mirrored: per decoder layer, per head, the :func:`mirrored_weight`.
    """

    greedy: dict[str, float]
    beam: dict[str, float]
    beam_lp: dict[str, float]
    identity: dict[str, float]
    mirrored: list[list[float]]


def run_seed(
    seed: int, test: SeqBatch, beam_width: int = 4, alpha: float = 0.6, **train_kw: Any
) -> tuple[Seq2SeqTransformer, SeedResult]:
    """Train one seed and score it on ``test`` (the same test set for every seed).

    Args:
        seed: the training seed (:func:`train_reversal`).
        test: the test batch (targets without ``EOS``).
        beam_width: the beam width of both beam searches.
        alpha: the length-penalty exponent of the penalised beam.
        **train_kw: passed to :func:`train_reversal`.

    Returns:
        ``(trained model, SeedResult)``.
    """
    model, _ = train_reversal(seed, **train_kw)
    mirrored = [mirrored_weight(a, test).tolist() for a in cross_attention(model, test)]
    result = SeedResult(
        greedy=scores(decode(model, test, 1), test),
        beam=scores(decode(model, test, beam_width), test),
        beam_lp=scores(decode(model, test, beam_width, alpha), test),
        identity=scores(test.src, test),
        mirrored=mirrored,
    )
    return model, result


declare("attnsurvey.transformer.model.Seq2SeqTransformer", "extra:trained-transformer")
