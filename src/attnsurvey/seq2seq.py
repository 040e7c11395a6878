"""§1 The encoder-decoder, with and without attention (Chapter 1).

An RNN encoder reads the source tokens ``x_1 ... x_{n_x}`` into hidden states
``H = [h_1, ..., h_{n_x}]`` (the feature vectors ``F`` of §2). A decoder RNN
writes the output one token at a time. What it may read from the source is
the *context vector* ``c_t`` fed to every decoder step:

* **without attention** (Sutskever et al. 2014; Cho et al. 2014) ``c_t = h_{n_x}``
  for every ``t``: the whole source must squeeze through one fixed-length
  vector, the *bottleneck*;
* **with attention** (Bahdanau et al. 2015) ``c_t = sum_l a_{t,l} h_l`` with
  ``a_t = softmax(score(s_{t-1}, h_l))``: the previous decoder state is the
  query, the encoder states are keys and values (``K = V = H``, plain
  attention), and the score is the additive score of Table II.

Shapes are batch-first: tokens ``(B, n_x)``, encoder states ``(B, n_x, d_h)``,
decoder logits ``(B, n_y, vocab)``, attention weights ``(B, n_y, n_x)`` (one row
per output token, one column per source position). Source padding is masked
(mask ``True`` = may attend), so padded positions get weight exactly 0.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor, nn

from ._checks import as_tensor, check_index_range, check_integers, check_scored, require_tensor
from .catalog import catalogued
from .data.sequences import BOS, PAD
from .general_mechanisms.scoring import AdditiveScore
from .general_model import GeneralAttention
from .training import accuracy, cross_entropy_mean

CHAPTER = "chapters/ch01_introduction.ipynb"


def _check_tokens(x: Tensor, symbol: str, layout: str, vocab_size: int | None = None) -> None:
    if not isinstance(x, Tensor):
        raise ValueError(f"{symbol} must be a torch.Tensor of token ids, got {type(x).__name__}")
    if x.dtype != torch.long:
        raise ValueError(f"{symbol} must hold integer token ids (torch.long), got dtype={x.dtype}")
    if x.dim() != 2 or x.shape[1] == 0:
        raise ValueError(f"{symbol} must have shape {layout} with at least one position, got {tuple(x.shape)}")
    if vocab_size is not None and x.numel() and (int(x.min()) < 0 or int(x.max()) >= vocab_size):
        raise ValueError(
            f"{symbol} holds token ids outside [0, vocab_size={vocab_size}): min={int(x.min())}, max={int(x.max())}"
        )


def _lengths_or_full(lengths: Tensor | None, B: int, n_x: int) -> Tensor:
    if lengths is None:
        return torch.full((B,), n_x, dtype=torch.long)
    lengths = torch.as_tensor(lengths)
    if lengths.shape != (B,):
        raise ValueError(f"lengths must have shape (B,) = ({B},), got {tuple(lengths.shape)}")
    if (lengths < 1).any() or (lengths > n_x).any():
        raise ValueError(f"lengths must lie in [1, n_x={n_x}], got {lengths.tolist()}")
    return lengths


@catalogued(
    "extra:encoder-decoder-bottleneck",
    title="Encoder-decoder without attention: the whole source squeezed into one fixed-length vector",
)
def final_state(H: Tensor, lengths: Tensor) -> Tensor:
    """The fixed-length summary of the source, ``c = h_{n_x}``: each example's last valid state.

    This single vector is all a decoder *without* attention ever sees of the
    source (the encoder-decoder bottleneck).

    Args:
        H: encoder states.
        lengths: the number of valid source tokens of each example, in ``[1, n_x]``.

    Shape:
        H: ``(B, n_x, d_h)``; lengths: ``(B,)``. Returns ``(B, d_h)``.

    Returns:
        The last valid state of each example.

    Raises:
        ValueError: on bad shapes or lengths.
    """
    if not isinstance(H, Tensor) or H.dim() != 3:
        raise ValueError(f"H must have shape (B, n_x, d_h), got {getattr(H, 'shape', type(H).__name__)}")
    lengths = _lengths_or_full(lengths, H.shape[0], H.shape[1])
    idx = (lengths - 1).view(-1, 1, 1).expand(-1, 1, H.shape[-1])
    return H.gather(1, idx).squeeze(1)


@catalogued("extra:encoder-decoder-bottleneck")
def bidirectional_summary(H: Tensor, lengths: Tensor) -> Tensor:
    """The fixed-length summary of a bidirectional encoder: ``[h_fwd_{n_x}; h_bwd_1]``.

    Each direction's last state has read the whole source.

    Args:
        H: encoder states whose first ``d_h/2`` features are the forward
            direction and the last ``d_h/2`` the backward one.
        lengths: the number of valid source tokens of each example, in ``[1, n_x]``.

    Shape:
        H: ``(B, n_x, d_h)``; lengths: ``(B,)``. Returns ``(B, d_h)``.

    Returns:
        The concatenated last states of both directions.

    Raises:
        ValueError: on bad shapes, lengths or an odd ``d_h``.
    """
    fwd = final_state(H, lengths)
    if H.shape[-1] % 2:
        raise ValueError(f"a bidirectional H needs an even d_h, got d_h={H.shape[-1]}")
    half = H.shape[-1] // 2
    return torch.cat([fwd[:, :half], H[:, 0, half:]], dim=-1)


@catalogued(
    "extra:bahdanau-decoder",
    title="Bahdanau decoder: previous state as query, additive score over encoder states (K = V = H)",
)
def decoder_step(
    y_prev: Tensor,
    s_prev: Tensor,
    H: Tensor,
    src_mask: Tensor,
    cell: nn.GRUCell,
    readout: nn.Linear,
    attention: GeneralAttention | None = None,
    c_fixed: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """One decoder step: context, new state, output logits.

    With ``attention`` (Bahdanau): ``c_t, a_t = attention(q = s_{t-1}, F = H)``
    with padding masked (Eq. 2-4). Without it: ``c_t = c_fixed`` (the
    bottleneck, :func:`final_state`). Then ``s_t = GRU([y_{t-1}; c_t], s_{t-1})``
    and ``logits_t = W_o [s_t; c_t] + b_o``.

    Args:
        y_prev: embedding of the previous token ``y_{t-1}``.
        s_prev: the previous decoder state ``s_{t-1}``.
        H: encoder states.
        src_mask: boolean ``(B, n_x)``, ``True`` = may attend (a real source token).
        cell: the decoder GRU cell.
        readout: the output layer ``W_o, b_o``.
        attention: the attention module (Bahdanau), or None.
        c_fixed: the fixed context (bottleneck), or None.

    Shape:
        y_prev: ``(B, d_emb)``; s_prev: ``(B, d_h)``; H: ``(B, n_x, d_h)``;
        src_mask: ``(B, n_x)``. Returns logits: ``(B, vocab)``, s_t: ``(B, d_h)``,
        a_t: ``(B, n_x)``.

    Returns:
        ``(logits, s_t, a_t)``; ``a_t`` is None without attention.

    Raises:
        ValueError: if neither or both of ``attention`` and ``c_fixed`` are given.
    """
    if (attention is None) == (c_fixed is None):
        raise ValueError("decoder_step needs exactly one of attention (Bahdanau) or c_fixed (bottleneck)")
    if attention is not None:
        c, a = attention(s_prev, H, mask=src_mask)
    else:
        c, a = c_fixed, None
    s = cell(torch.cat([y_prev, c], dim=-1), s_prev)
    return readout(torch.cat([s, c], dim=-1)), s, a


@catalogued("extra:bahdanau-decoder", "extra:encoder-decoder-bottleneck")
class Seq2Seq(nn.Module):
    """A GRU encoder-decoder, with additive attention or with the fixed-length bottleneck.

    ``forward(src, tgt_in, lengths)`` decodes with teacher forcing;
    :meth:`greedy_decode` feeds back its own predictions. Both return the
    attention weights (``None`` without attention).

    Args:
        vocab_size: number of token ids (including ``PAD`` and ``BOS``).
        d_emb: embedding size.
        d_h: hidden size of encoder and decoder (``d_f = d_q = d_h``), even (the
            bidirectional encoder gives ``d_h/2`` per direction).
        attention: ``True`` for Bahdanau attention (``GeneralAttention`` with the
            additive score of Table II and ``K = V = H``), ``False`` for the
            plain encoder-decoder whose context is always ``h_{n_x}``.
        d_w: hidden size of the additive score (default ``d_h``).

    Shape:
        src: ``(B, n_x)``; tgt_in: ``(B, n_y)``; lengths: ``(B,)``.
        Returns logits: ``(B, n_y, vocab)``, weights: ``(B, n_y, n_x)``.

    Raises:
        ValueError: if a size is not an integer >= 1, ``vocab_size <= BOS + 1`` or
            ``d_h`` is odd; in ``forward``, for bad token tensors or a
            batch-size mismatch.
    """

    def __init__(self, vocab_size: int, d_emb: int = 32, d_h: int = 64, attention: bool = True, d_w: int | None = None):
        check_integers("Seq2Seq", minimum=1, vocab_size=vocab_size, d_emb=d_emb, d_h=d_h)
        check_integers("Seq2Seq", minimum=1, allow_none=True, d_w=d_w)
        super().__init__()
        if vocab_size <= BOS + 1 or d_emb < 1 or d_h < 1:
            raise ValueError(f"need vocab_size > {BOS + 1}, d_emb >= 1, d_h >= 1; got {vocab_size}, {d_emb}, {d_h}")
        self.vocab_size, self.d_h, self.use_attention = vocab_size, d_h, attention
        if d_h % 2:
            raise ValueError(f"d_h must be even (the bidirectional encoder gives d_h/2 per direction), got {d_h}")
        self.embed = nn.Embedding(vocab_size, d_emb, padding_idx=PAD)
        # Bidirectional, as in Bahdanau et al.: h_l = [forward h_l; backward h_l].
        self.encoder = nn.GRU(d_emb, d_h // 2, batch_first=True, bidirectional=True)
        self.cell = nn.GRUCell(d_emb + d_h, d_h)
        self.readout = nn.Linear(2 * d_h, vocab_size)
        self.attention = (
            GeneralAttention(d_q=d_h, d_f=d_h, score=AdditiveScore(d_h, d_h, d_w or d_h), plain=True)
            if attention
            else None
        )

    def encode(self, src: Tensor, lengths: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Encoder states ``H (B, n_x, d_h)``, source mask ``(B, n_x)`` and the summary ``(B, d_h)``.

        The sequences are packed, so padding changes no valid state. The
        summary is what each direction has read at its end: the forward state
        at the last valid position and the backward state at position 1,
        i.e. the GRU's final states (:func:`bidirectional_summary`).
        """
        _check_tokens(src, "src", "(B, n_x)", self.vocab_size)
        lengths = _lengths_or_full(lengths, *src.shape)
        if src.shape[0] == 0:  # an empty batch: nothing to pack
            H = self.embed.weight.new_zeros(0, src.shape[1], self.d_h)
            return H, torch.zeros(0, src.shape[1], dtype=torch.bool), H[:, 0] if src.shape[1] else H.sum(1)
        packed = nn.utils.rnn.pack_padded_sequence(self.embed(src), lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.encoder(packed)
        H, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])
        mask = torch.arange(src.shape[1])[None, :] < lengths[:, None]
        return H, mask, bidirectional_summary(H, lengths)

    def _step(
        self, y_prev: Tensor, s: Tensor, H: Tensor, mask: Tensor, summary: Tensor
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        return decoder_step(
            self.embed(y_prev),
            s,
            H,
            mask,
            self.cell,
            self.readout,
            attention=self.attention,
            c_fixed=None if self.use_attention else summary,
        )

    def forward(self, src: Tensor, tgt_in: Tensor, lengths: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """Teacher forcing: step ``t`` reads the true previous token ``tgt_in[:, t]``.

        src: ``(B, n_x)``; tgt_in: ``(B, n_y)`` starting with ``BOS``; lengths: ``(B,)``.
        Returns logits ``(B, n_y, vocab)`` and weights ``(B, n_y, n_x)`` or None.
        Raises ``ValueError`` for bad token tensors or a batch-size mismatch.
        """
        _check_tokens(src, "src", "(B, n_x)", self.vocab_size)
        _check_tokens(tgt_in, "tgt_in", "(B, n_y)", self.vocab_size)
        if tgt_in.shape[0] != src.shape[0]:
            raise ValueError(f"src and tgt_in need the same batch size B, got {src.shape[0]} and {tgt_in.shape[0]}")
        H, mask, summary = self.encode(src, lengths)
        s = summary  # both decoders start from the source summary h_{n_x}
        logits, weights = [], []
        for t in range(tgt_in.shape[1]):
            out, s, a = self._step(tgt_in[:, t], s, H, mask, summary)
            logits.append(out)
            weights.append(a)
        # with attention every step returns weights (a is None only without it)
        return torch.stack(logits, 1), (torch.stack(cast(list[Tensor], weights), 1) if self.use_attention else None)

    @torch.no_grad()
    def greedy_decode(
        self, src: Tensor, n_steps: int, lengths: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """Greedy decoding: step ``t`` reads the model's own previous arg-max token.

        Returns tokens ``(B, n_steps)``, logits ``(B, n_steps, vocab)`` and
        weights ``(B, n_steps, n_x)`` or None. Raises ``ValueError`` if
        ``n_steps < 1`` or the source is malformed.
        """
        if n_steps < 1:
            raise ValueError(f"n_steps must be >= 1, got {n_steps}")
        H, mask, summary = self.encode(src, lengths)
        s = summary
        y = torch.full((src.shape[0],), BOS, dtype=torch.long)
        tokens, logits, weights = [], [], []
        for _ in range(n_steps):
            out, s, a = self._step(y, s, H, mask, summary)
            y = out.argmax(-1)
            tokens.append(y)
            logits.append(out)
            weights.append(a)
        w = torch.stack(cast(list[Tensor], weights), 1) if self.use_attention else None  # as in forward
        return torch.stack(tokens, 1), torch.stack(logits, 1), w


def sequence_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy over non-``PAD`` target tokens.

    An empty or all-``PAD`` batch gives a loss of 0 (zero gradient), not NaN.

    Args:
        logits: decoder logits.
        targets: target token ids (``PAD`` is not scored).

    Shape:
        logits: ``(B, n_y, V)``; targets: ``(B, n_y)``. Returns a scalar ``()``.

    Returns:
        The mean loss.

    Raises:
        TypeError: if logits is not a floating-point tensor or targets not a tensor.
        ValueError: unless ``targets.shape == logits.shape[:-1]``.
    """
    return cross_entropy_mean(logits, targets, ignore_index=PAD)


def token_accuracy(logits: Tensor, targets: Tensor) -> float:
    """Fraction of non-``PAD`` target tokens predicted correctly.

    Args:
        logits: decoder logits.
        targets: target token ids (``PAD`` is not scored).

    Shape:
        logits: ``(B, n_y, V)``; targets: ``(B, n_y)``.

    Returns:
        The accuracy, a float in ``[0, 1]``.

    Raises:
        TypeError: if logits is not a floating-point tensor or targets not a tensor.
        ValueError: for an empty or all-``PAD`` batch (nothing to score).
    """
    as_tensor(logits, "logits"), require_tensor(targets, "targets")
    return accuracy(logits, targets, ignore_index=PAD)


def sequence_accuracy(tokens: Tensor, targets: Tensor) -> float:
    """Fraction of sequences whose every non-``PAD`` token is right (exact match).

    Args:
        tokens: predicted token ids.
        targets: target token ids (``PAD`` positions count as right).

    Shape:
        tokens, targets: ``(B, n_y)``.

    Returns:
        The exact-match rate, a float in ``[0, 1]``.

    Raises:
        ValueError: if the shapes differ, the batch is empty (B = 0: nothing to score) or a
            token id is negative.
        TypeError: if tokens or targets is not an integer tensor.
    """
    check_index_range(tokens, None, "tokens", "sequence_accuracy (token ids)")
    check_index_range(targets, None, "targets", "sequence_accuracy (token ids)")
    if tokens.shape != targets.shape:
        raise ValueError(f"tokens {tuple(tokens.shape)} and targets {tuple(targets.shape)} must have the same shape")
    check_scored(targets.shape[0] if targets.dim() else 0, "sequence accuracy", "targets")
    ok = (tokens == targets) | (targets == PAD)
    return float(ok.all(1).float().mean())
