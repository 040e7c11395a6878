"""Self-checks for the exercises of chapter §3.3.2 The Transformer (``ch03_3_3_transformer``).

Each ``check_ex<k>`` raises ``AssertionError`` with a hint on a wrong answer and
returns a short confirmation string on a right one. The checks compute their
reference values themselves (from the definitions or from ``torch.nn``), so a
constant or a mis-specified answer fails.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..masking import causal_mask
from ..transformer import model, positional

_ROTATION_CASES = [(0, 3, 0), (5, 7, 2), (11, 20, 5), (2, 1, 7)]


def check_ex1(rotate: Callable[[Tensor, int, int, int], Tensor]) -> str:
    """Ex. 1: ``rotate(P, t, k, i)`` maps pair ``i`` of ``P[t]`` to pair ``i`` of ``P[t + k]``.

    The check feeds a float64 sinusoidal table with ``d = 16`` and compares the
    rotated pair with ``P[t + k, 2i : 2i + 2]`` for several ``(t, k, i)``. The
    table handed to ``rotate`` has row ``t + k`` replaced by NaN, so an answer
    that reads that row instead of rotating row ``t`` fails.
    """
    P = positional.sinusoidal_position_encoding(40, 16, dtype=torch.float64)
    for t, k, i in _ROTATION_CASES:
        hidden = P.clone()
        hidden[t + k] = float("nan")
        got = torch.as_tensor(rotate(hidden, t, k, i), dtype=torch.float64)
        want = P[t + k, 2 * i : 2 * i + 2]
        if got.shape != (2,):
            raise AssertionError(f"rotate must return the pair (sin, cos) as 2 numbers, got shape {tuple(got.shape)}")
        if bool(got.isnan().any()):
            raise AssertionError(
                f"(t, k, i) = {(t, k, i)}: got {got.tolist()}; the check hides row t + k (NaN) from rotate: "
                "compute the pair from row t alone"
            )
        if not torch.allclose(got, want, atol=1e-9):
            raise AssertionError(
                f"(t, k, i) = {(t, k, i)}: got {got.tolist()}, which is not the pair of row t + k "
                "(check the angle, and which way the rotation turns in the table's (sine, cosine) order)"
            )
    return "correct: the pair at t + k is a rotation of the pair at t by k * omega_i"


def _decoder_with_trained_norms(seed: int) -> model.DecoderLayer:
    """A pre-norm ``DecoderLayer(16, 2, 24)`` whose layer norms have random scales and shifts, as trained ones would."""
    torch.manual_seed(seed)
    dec = model.DecoderLayer(16, 2, 24, norm_first=True)
    with torch.no_grad():
        for norm in (dec.norm1, dec.norm2, dec.norm3):
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.normal_(0.0, 0.5)
    return dec


def check_ex2(to_torch: Callable[[model.DecoderLayer], torch.nn.TransformerDecoderLayer]) -> str:
    """Ex. 2: ``to_torch(dec)`` returns a ``torch.nn.TransformerDecoderLayer`` equal to ``dec``.

    The check builds a pre-norm ``DecoderLayer(16, 2, 24, norm_first=True)``,
    gives its three layer norms random scales and shifts (a fresh norm has
    weight 1 and bias 0, like torch's, and would hide a norm that is not
    copied or copied to the wrong place), asks for its torch twin, and compares
    both on random inputs with a causal mask (torch's mask convention: True =
    blocked). A twin that is post-norm, misses a copied weight or ignores the
    mask fails.
    """
    dec = _decoder_with_trained_norms(0)
    ref = to_torch(dec)
    if not isinstance(ref, torch.nn.TransformerDecoderLayer):
        raise AssertionError(f"return a torch.nn.TransformerDecoderLayer, got {type(ref).__name__}")
    g = torch.Generator().manual_seed(1)
    Y, M = torch.randn(2, 5, 16, generator=g), torch.randn(2, 6, 16, generator=g)
    ref.eval()
    with torch.no_grad():
        ours = dec(Y, M, causal_mask(5))[0]
        theirs = ref(Y, M, tgt_mask=~causal_mask(5))
    diff = float((ours - theirs).abs().max())
    if not diff < 1e-5:
        raise AssertionError(
            f"max |ours - torch| = {diff:.3g}: copy W_Q, W_K, W_V into in_proj, W_O into out_proj for both attentions, "
            "the feed-forward and all three norms (norm1 before self-attention, norm2 before cross-attention, norm3 "
            "before the feed-forward), and build torch's layer with norm_first=True, dropout=0, batch_first=True"
        )
    return "correct: max |ours - torch| < 1e-5 with a causal mask"


def _token_accuracy(tagger: torch.nn.Module, x: Tensor, y: Tensor) -> float:
    with torch.no_grad():
        pred = tagger(x)[0].argmax(-1)
    return float((pred == y).double().mean())


def check_ex3(
    evaluate: Callable[[torch.nn.Module, Tensor, Tensor], float], tagger: torch.nn.Module, generalises: bool
) -> str:
    """Ex. 3: ``evaluate(tagger, x, y)`` is the token accuracy; ``generalises`` answers the question.

    The check compares ``evaluate`` with its own token accuracy on reversal
    batches of length 8 and 12 (a sequence-level accuracy, or a constant,
    fails), then compares ``generalises`` with whether the length-12 accuracy
    exceeds 0.9.
    """
    from ..data.sequences import reversal_batch

    accs = {}
    for n in (8, 12):
        x, y = reversal_batch(300, n, 10, torch.Generator().manual_seed(50 + n))
        want = _token_accuracy(tagger, x, y)
        got = float(evaluate(tagger, x, y))
        if not abs(got - want) < 1e-6:
            raise AssertionError(
                f"length {n}: evaluate gave {got:.4f}, which is not the token accuracy "
                "(count correct positions over all positions, not whole sequences)"
            )
        accs[n] = want
    truth = accs[12] > 0.9
    if bool(generalises) != truth:
        raise AssertionError(
            "generalises does not follow from the token accuracy your evaluate gives at length 12: "
            "compare it with 0.9 again"
        )
    return "correct: evaluate is the token accuracy, and generalises follows from it"


def hidden_check_ex1(rotate: Callable[[Tensor, int, int, int], Tensor]) -> None:
    """Hidden test of Ex. 1: a table with ``d = 8`` and other offsets (k = 1, 9, 33), row ``t + k`` hidden.

    A frequency computed with the visible check's ``d = 16`` fails. Raises ``AssertionError``.
    """
    P = positional.sinusoidal_position_encoding(60, 8, dtype=torch.float64)
    for t, k, i in ((4, 1, 1), (3, 33, 3), (20, 9, 0)):
        hidden = P.clone()
        hidden[t + k] = float("nan")
        got = torch.as_tensor(rotate(hidden, t, k, i), dtype=torch.float64)
        if got.shape != (2,) or not torch.allclose(got, P[t + k, 2 * i : 2 * i + 2], atol=1e-9):
            raise AssertionError(f"d = 8, (t, k, i) = {(t, k, i)}: the rotated pair is not right (take d from P)")


def hidden_check_ex2(to_torch: Callable[[model.DecoderLayer], torch.nn.TransformerDecoderLayer]) -> None:
    """Hidden test of Ex. 2: the twin in training mode, on other lengths (9 targets, 2 memory positions).

    ``DecoderLayer`` has no dropout, so a twin built with torch's default
    dropout differs from it in training mode. Raises ``AssertionError``.
    """
    dec = _decoder_with_trained_norms(3)
    ref = to_torch(dec)
    g = torch.Generator().manual_seed(9)
    Y, M = torch.randn(3, 9, 16, generator=g), torch.randn(3, 2, 16, generator=g)
    ref.train()
    dec.train()
    torch.manual_seed(0)
    with torch.no_grad():
        ours = dec(Y, M, causal_mask(9))[0]
        theirs = ref(Y, M, tgt_mask=~causal_mask(9))
    if not float((ours - theirs).abs().max()) < 1e-5:
        raise AssertionError("in training mode on 9 positions the twin differs: build it with dropout=0.0")


def hidden_check_ex3(
    evaluate: Callable[[torch.nn.Module, Tensor, Tensor], float], tagger: torch.nn.Module, generalises: bool
) -> None:
    """Hidden test of Ex. 3: ``evaluate`` at length 5 on 7 sequences, and ``generalises`` a truth value.

    Raises ``AssertionError``.
    """
    from ..data.sequences import reversal_batch

    if not isinstance(generalises, bool):
        raise AssertionError("generalises is True or False")
    x, y = reversal_batch(7, 5, 10, torch.Generator().manual_seed(71))
    if not abs(float(evaluate(tagger, x, y)) - _token_accuracy(tagger, x, y)) < 1e-6:
        raise AssertionError("length 5, 7 sequences: evaluate is not the token accuracy")
