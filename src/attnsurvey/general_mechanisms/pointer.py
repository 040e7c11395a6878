"""Pointer networks: the alignment itself is the output (nndl 8.2.1.5, Vinyals et al., 2015).

An attention module computes weights (Eq. 25) and then a weighted average
(Eq. 24). A pointer network stops after the first step: at decoding step ``m``
the distribution over input positions

    p(c_m = n | c_1..c_{m-1}, x_1..x_N) = softmax_n( s_{m,n} ),
    s_{m,n} = v^T tanh(W x_n + U h_m)                       (nndl Eq. 8.14-8.15)

*is* the prediction: the output vocabulary is the set of input positions, so
its size changes with the input. ``s_{m,n}`` is the additive score of Table II
(``W`` acts on the encoder state of input ``n``, ``U`` on the decoder state).
For outputs that are permutations (sorting), positions already pointed to
are masked out (boolean mask, ``True`` = may point).

Shapes: B batch, N inputs (the positions to point to), M decoding steps, d_x input
size, d_h encoder size, d_d decoder size, d_w hidden size of the pointer score.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .._checks import as_tensor, check_dim_equal, check_min_rank
from ..attention import align_scores
from ..catalog import catalogued
from ..masking import check_attn_mask
from ..training import cross_entropy_mean
from .scoring import additive_score

CHAPTER = "chapters/ch03_2_2_attention_alignment.ipynb"


@catalogued(
    "extra:pointer-network",
    title="Pointer network: the attention distribution over inputs is the output (nndl 8.2.1.5)",
)
def pointer_scores(H: Tensor, h_dec: Tensor, W: Tensor, U: Tensor, v: Tensor) -> Tensor:
    """Pointer scores ``s_{m,n} = v^T tanh(W h_n + U h_m)`` (nndl Eq. 8.15).

    Args:
        H: encoder states of the inputs.
        h_dec: decoder states.
        W: the map of the encoder states.
        U: the map of the decoder states.
        v: the output vector.

    Shape:
        H: ``(..., N, d_h)``; h_dec: ``(..., M, d_d)``; W: ``(d_w, d_h)``;
        U: ``(d_w, d_d)``; v: ``(d_w,)``. Returns ``(..., M, N)``.

    Returns:
        The scores ``s``.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: on shape mismatches.
    """
    return additive_score(h_dec, H, U, W, v)


@catalogued("extra:pointer-network")
def pointer_log_probs(scores: Tensor, mask: Tensor | None = None) -> Tensor:
    """Log of the pointer distribution, ``log softmax_n(s_{m,n})`` over allowed positions (nndl Eq. 8.14).

    Masked positions get the most negative finite value (probability 0 after
    exp); allowed positions keep their exact log-probability even when it
    underflows as a probability: the core's alignment step with ``log=True``
    (:func:`attnsurvey.attention.align_scores`).

    Args:
        scores: pointer scores.
        mask: boolean broadcastable to the scores, ``True`` = may attend (step m
            may point to input n).

    Shape:
        scores: ``(..., M, N)``. Returns ``(..., M, N)``.

    Returns:
        The log-probabilities over the ``N`` inputs.

    Raises:
        TypeError: for non-float scores.
        ValueError: for a bad mask.
    """
    as_tensor(scores, "s (pointer scores)")
    if isinstance(mask, Tensor) and mask.dtype == torch.bool:
        check_attn_mask(mask, scores.shape)  # a rank-2 mask with B == M is ambiguous
    return align_scores(scores, mask, log=True)


@catalogued("extra:pointer-network")
class PointerNetwork(nn.Module):
    """A small pointer network: LSTM encoder, LSTM-cell decoder, additive pointer.

    ``forward(x, targets=None)`` returns ``(log_probs, pointers)``: the
    log-probabilities of every step and the chosen indices, with ``M = N`` (one
    pointer per input; each input is pointed to once). With ``targets`` it uses
    teacher forcing (the next decoder input is the *target* pointed input, as in
    nndl Eq. 8.13); without, it decodes greedily.

    Args:
        d_x: size of each input vector x_n (1 for numbers).
        d_h: hidden size.
        d_w: size of the pointer's tanh layer.

    Shape:
        x: ``(B, N, d_x)``; targets: ``(B, N)``.
        Returns log_probs: ``(B, M, N)``, pointers: ``(B, M)``.

    Raises:
        TypeError: in ``forward``, if x is not a floating-point tensor.
        ValueError: in ``forward``, if x is not ``(B, N, d_x)`` with ``N >= 1``
            or targets is not ``(B, N)``.
    """

    def __init__(self, d_x: int = 1, d_h: int = 32, d_w: int = 32) -> None:
        super().__init__()
        self.d_x = d_x
        self.embed = nn.Linear(d_x, d_h)
        self.encoder = nn.LSTM(d_h, d_h, batch_first=True)
        self.decoder = nn.LSTMCell(d_h, d_h)
        self.start = nn.Parameter(torch.zeros(d_h))  # the special start symbol '<'
        self.W = nn.Linear(d_h, d_w, bias=False)
        self.U = nn.Linear(d_h, d_w, bias=False)
        self.v = nn.Parameter(torch.randn(d_w) / math.sqrt(d_w))

    def forward(self, x: Tensor, targets: Tensor | None = None) -> tuple[Tensor, Tensor]:
        as_tensor(x, "x")
        check_min_rank(x, 3, "x", "(B, N, d_x)")
        check_dim_equal(x.shape[-1], self.d_x, "PointerNetwork", "d_x of x", "d_x of the module")
        B, N, _ = x.shape
        if N == 0:
            raise ValueError(f"x is empty: N=0 in shape {tuple(x.shape)}")
        if targets is not None and tuple(targets.shape) != (B, N):
            raise ValueError(f"targets must have shape (B, N) = ({B}, {N}), got {tuple(targets.shape)}")
        emb = self.embed(x)  # (B, N, d_h)
        H, (h, c) = self.encoder(emb)
        h, c = h[0], c[0]
        inp = self.start.expand(B, -1)
        free = torch.ones(B, N, dtype=torch.bool, device=x.device)
        rows = torch.arange(B, device=x.device)
        all_logp, pointers = [], []
        for m in range(N):
            h, c = self.decoder(inp, (h, c))
            s = pointer_scores(H, h.unsqueeze(1), self.W.weight, self.U.weight, self.v).squeeze(1)  # (B, N)
            logp = pointer_log_probs(s, free)
            ptr = logp.argmax(-1)
            nxt = targets[:, m] if targets is not None else ptr
            all_logp.append(logp)
            pointers.append(ptr)
            free = free.clone()
            free[rows, nxt] = False
            inp = emb[rows, nxt]
        return torch.stack(all_logp, 1), torch.stack(pointers, 1)


def pointer_loss(model: PointerNetwork, batch: tuple[Tensor, Tensor]) -> Tensor:
    """Teacher-forced negative log-likelihood of the target pointers (mean over steps).

    Args:
        model: the pointer network.
        batch: ``(x, targets)``.

    Shape:
        x: ``(B, N, d_x)``; targets: ``(B, N)``. Returns a scalar ``()``.

    Returns:
        The mean loss; 0 for an empty batch.
    """
    x, targets = batch
    logp, _ = model(x, targets)
    return cross_entropy_mean(logp, targets, log_probs=True)
