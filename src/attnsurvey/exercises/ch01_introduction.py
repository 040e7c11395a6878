"""Self-checks for the exercises of Chapter 1 (survey §1)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ._answers import whole_number


def check_ex1(scores_attention: int, scores_bottleneck: int, n_x: int = 12, n_y: int = 12) -> str:
    """Ex. 1: how many scores e_{t,l} each decoder computes for a source of n_x and an output of n_y tokens."""
    if scores_attention != n_x * n_y:
        raise AssertionError(
            f"scores_attention = {scores_attention} is not right: read off the indices of e_(t,l) in the attention "
            "equations (eq-ch01-bahdanau) and the ranges they run over"
        )
    if scores_bottleneck != 0:
        raise AssertionError(
            "scores_bottleneck is not right: look at what the bottleneck's context is made of (eq-ch01-bottleneck)"
        )
    return "correct: both counts are right"


def check_ex2(fn: Callable[..., float]) -> str:
    """Ex. 2: ``fn(weights, src, lengths, task, tolerance=0)`` is the alignment hit rate.

    It is applied to a perfect anti-diagonal, the same shifted by one position,
    the identity, a collapsed alignment that is not symmetric (so that the
    arg-max over the wrong axis shows), and a padded batch (padded steps must
    not count).
    """
    src = torch.full((2, 6), 3)
    full = torch.tensor([6, 6])
    anti = torch.eye(6).flip(1).expand(2, 6, 6)
    shifted = anti.roll(1, dims=-1)  # every row looks one position to the right (wrapping)
    eye = torch.eye(6).expand(2, 6, 6)
    cases = [
        ((anti, src, full, "reverse"), {}, 1.0, "a perfect anti-diagonal on reversal"),
        ((shifted, src, full, "reverse"), {}, 0.0, "an alignment shifted by one, tolerance 0"),
        ((shifted, src, full, "reverse"), {"tolerance": 1}, 5 / 6, "an alignment shifted by one, tolerance 1"),
        ((eye, src, full, "reverse"), {}, 0.0, "the diagonal on reversal"),
        ((eye, src, full, "copy"), {}, 1.0, "the diagonal on copying"),
    ]
    # a collapsed alignment: every output step puts its largest weight on the first token,
    # and its runner-up on the diagonal; read along the wrong axis it looks like a perfect copy
    collapsed = torch.full((2, 6, 6), 0.05)
    collapsed[:, 0, 1:] = 0.1
    for t in range(6):
        collapsed[:, t, 0] = 0.5 - 0.01 * t
        if t > 0:
            collapsed[:, t, t] = 0.3
    cases.append(
        (
            (collapsed, src, full, "copy"),
            {"tolerance": 1},
            2 / 6,
            "a collapsed alignment (every output step's largest weight on the first source token), tolerance 1",
        )
    )
    # a padded batch: the second example has length 3; its steps 3-5 are padding and must be ignored
    lens = torch.tensor([6, 3])
    w = torch.zeros(2, 6, 6)
    w[0] = torch.eye(6).flip(1)
    w[1, :3, :3] = torch.eye(3).flip(1)
    w[1, 3:, 0] = 1.0  # padded rows point anywhere
    cases.append(((w, src, lens, "reverse"), {}, 1.0, "a padded batch (padded steps do not count)"))
    for args, kwargs, want, what in cases:
        got = fn(*args, **kwargs)
        if got is None:
            raise AssertionError("your function returned None: return the hit rate, a number in [0, 1]")
        got = float(got)
        if abs(got - want) > 1e-6:
            hint = ""
            if "collapsed" in what:
                hint = " (weights is (B, n_y, n_x): take the arg-max over the source positions, the last axis)"
            raise AssertionError(f"for {what} the hit rate is {want:.3f}, your function gave {got:.3f}{hint}")
    return "correct: hit rates match on all seven alignments"


def check_ex3(diagonal_rate: float, anti_diagonal_rate: float) -> str:
    """Ex. 3: a model trained to copy attends along the diagonal (hit rates at tolerance 1)."""
    for name, r in (("diagonal_rate", diagonal_rate), ("anti_diagonal_rate", anti_diagonal_rate)):
        if r is None:
            raise AssertionError(f"{name} is still None: set it to the hit rate you measured")
        if not 0.0 <= float(r) <= 1.0:
            raise AssertionError(f"{name} is a fraction of output steps, in [0, 1]; got {r}")
    diagonal_rate, anti_diagonal_rate = float(diagonal_rate), float(anti_diagonal_rate)
    if diagonal_rate < 0.8:
        raise AssertionError(
            f"diagonal hit rate {diagonal_rate:.2f} is low for a copying model: did you measure with tolerance=1 "
            "(the weight is often split between neighbouring positions), against the 'copy' alignment, "
            "for a model trained with task='copy'?"
        )
    if diagonal_rate <= 2 * anti_diagonal_rate:
        raise AssertionError("a copying model should look along the diagonal far more often than the anti-diagonal")
    return "correct: the copy task is aligned along the diagonal"


def hidden_check_ex1(scores_attention: int, scores_bottleneck: int) -> None:
    """Hidden test of Ex. 1: both counts are whole numbers (not ``True``/``False``), recounted pair by pair.

    The reference enumerates the pairs (t, l) of a 12-token output over a 12-token
    source, independently of the product formula. Raises ``AssertionError``.
    """
    for name, v in (("scores_attention", scores_attention), ("scores_bottleneck", scores_bottleneck)):
        if isinstance(v, bool):
            raise AssertionError(f"{name} is a count of scores, not True or False")
        whole_number(v, name)
    if int(scores_attention) != sum(1 for _t in range(12) for _l in range(12)) or int(scores_bottleneck) != 0:
        raise AssertionError("recount the scores e_(t,l) of each decoder for a 12-token source and a 12-token output")


def _hit_rate_reference(weights: torch.Tensor, src: torch.Tensor, lengths: torch.Tensor, task: str, tol: int) -> float:
    from ..data.sequences import target_positions

    ideal = target_positions(task, src, lengths)
    valid = ideal >= 0
    return float(((weights.argmax(-1) - ideal).abs() <= tol)[valid].double().mean())


def hidden_check_ex2(fn: Callable[..., float]) -> None:
    """Hidden test of Ex. 2: a padded batch of three lengths (5, 7, 2) on a 7-token source, tolerances 0-2.

    The sequences have different hit rates, so a mean of per-sequence rates (in
    place of the rate over all valid steps) fails, and so does a function that
    assumes ``n_y = 6`` or tolerance 0 or 1 only. Raises ``AssertionError``.
    """
    g = torch.Generator().manual_seed(21)
    src = torch.randint(1, 8, (3, 7), generator=g)
    lengths = torch.tensor([5, 7, 2])
    w = torch.softmax(3 * torch.randn(3, 7, 7, generator=g), -1)
    for task in ("reverse", "copy"):
        for tol in (0, 1, 2):
            want = _hit_rate_reference(w, src, lengths, task, tol)
            got = fn(w, src, lengths, task, tolerance=tol)
            if got is None or abs(float(got) - want) > 1e-6:
                raise AssertionError(
                    f"a padded batch of lengths 5, 7 and 2 ({task}, tolerance={tol}): the hit rate counts every "
                    "valid output step of the batch once (not a mean of per-sequence rates)"
                )


def hidden_check_ex3(diagonal_rate: float, anti_diagonal_rate: float, model: torch.nn.Module) -> None:
    """Hidden test of Ex. 3: the rates come from ``model`` (the trained copier), measured again on fresh sequences.

    Decodes 200 fresh length-6 copy sequences with ``model`` and measures both hit
    rates at tolerance 1; the reader's rates must lie within 0.05 of them, and
    the model must copy along the diagonal. Raises ``AssertionError``.
    """
    from ..data.sequences import transduction_batch

    decode = getattr(model, "greedy_decode", None)
    if not callable(decode):
        raise AssertionError("copier must be the trained Seq2Seq model (attention=True) your rates come from")
    b = transduction_batch(
        200, 6, int(getattr(model, "vocab_size", 8)), task="copy", generator=torch.Generator().manual_seed(404)
    )
    with torch.no_grad():
        _, _, w = decode(b.src, 6, b.lengths)
    if w is None:
        raise AssertionError("copier has no attention weights: train it with attention=True")
    diag = _hit_rate_reference(w, b.src, b.lengths, "copy", 1)
    anti = _hit_rate_reference(w, b.src, b.lengths, "reverse", 1)
    if abs(float(diagonal_rate) - diag) > 0.05 or abs(float(anti_diagonal_rate) - anti) > 0.05:
        raise AssertionError("your hit rates are not what copier gives on other copy sequences of length 6")
    if diag < 0.8:
        raise AssertionError("copier does not look along the diagonal: train it with task='copy'")
