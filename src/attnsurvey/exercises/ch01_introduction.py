"""Self-checks for the exercises of Chapter 1 (survey §1)."""

from __future__ import annotations

from collections.abc import Callable

import torch


def check_ex1(scores_attention: int, scores_bottleneck: int, n_x: int = 12, n_y: int = 12) -> str:
    """Ex. 1: how many scores e_{t,l} each decoder computes for a source of n_x and an output of n_y tokens."""
    if scores_attention != n_x * n_y:
        raise AssertionError(
            f"attention scores every source position at every output step: n_y * n_x = {n_y} * {n_x}, "
            f"not {scores_attention}"
        )
    if scores_bottleneck != 0:
        raise AssertionError("the bottleneck decoder never scores anything: its context is fixed before decoding")
    return f"correct: {n_x * n_y} scores with attention, none without"


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
