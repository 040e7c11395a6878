"""Self-checks for the exercises of chapter §4.2 Intrinsic evaluation (``ch04_2_intrinsic_evaluation``).

Each ``check_ex<k>`` raises ``AssertionError`` with a hint on a wrong answer and
returns a short confirmation string on a right one. References are computed
here from the definitions, never taken from the reader.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..evaluation import intrinsic as it


def check_ex1(ac_value: float) -> str:
    """Ex. 1: AC, Eq. (46), of weights 0.5 on one of |G| = 4 regions and the rest uniform over the other 24 of 25."""
    a = torch.full((25,), 0.5 / 24, dtype=torch.float64)
    a[0] = 0.5
    G = torch.zeros(25, dtype=torch.bool)
    G[:4] = True
    want = float(it.attention_correctness(a, G))
    assert (
        abs(float(ac_value) - want) < 1e-9
    ), f"got {ac_value}: add the 0.5 and the shares of the three other ground-truth regions (the rest is spread over 24 regions)"
    return f"correct: AC = {want:.4f}"


def _links(pairs: list[tuple[int, int]]) -> Tensor:
    return it.links_to_matrix(pairs, 3, 4)


_CASES = [
    # sure links S, possible links P (not repeating S), hypothesis A
    (_links([(0, 0), (1, 2)]), _links([(2, 1), (2, 2)]), _links([(0, 0), (1, 1), (2, 1)])),
    (_links([(0, 1), (1, 1), (2, 3)]), _links([(0, 2)]), _links([(0, 2), (1, 1), (2, 0), (2, 3)])),
]


def check_ex2(fn: Callable[[Tensor, Tensor, Tensor], tuple[float, float]]) -> str:
    """Ex. 2: ``precision_recall(A, S, P)`` = ``(|A & P| / |A|, |A & S| / |S|)`` with ``P`` taken as ``P | S``.

    The check's ``P`` matrices do not repeat the sure links, so an answer that
    forgets that every sure link is also possible fails; it also checks that
    ``1 - AER`` lies between the two numbers.
    """
    for S, P, A in _CASES:
        Pfull = P | S
        want = (float((A & Pfull).sum() / A.sum()), float((A & S).sum() / S.sum()))
        got = tuple(float(v) for v in fn(A, S, P))
        assert abs(got[0] - want[0]) < 1e-6 and abs(got[1] - want[1]) < 1e-6, (
            f"got (precision, recall) = {got}, expected {want}: precision = |A & P| / |A|, recall = |A & S| / |S|, "
            "and every sure link is also a possible link (use P | S)"
        )
        one_minus = 1 - it.alignment_error_rate(A, S, P)
        assert min(want) - 1e-9 <= one_minus <= max(want) + 1e-9
    return "correct: precision and recall bracket 1 - AER"


def check_ex3(model_aer: Callable[[torch.nn.Module, Tensor, Tensor, Tensor], float]) -> str:
    """Ex. 3: ``model_aer(model, x, S, P)`` is the corpus AER of the model's arg-max alignment.

    Compared with :func:`attnsurvey.evaluation.intrinsic.alignment_error_rate`
    of :func:`~attnsurvey.evaluation.intrinsic.hard_alignment` over the whole
    corpus, with the possible links (an AER against the sure links alone is a
    different number whenever the model picks a possible link).
    """
    from ..data.evaluation_tasks import toy_translation_task
    from ..experiments.evaluation import ProbeModel

    g = torch.Generator().manual_seed(5)
    x, _, S, P = toy_translation_task(40, 6, 8, g, echo=True)
    torch.manual_seed(0)
    model = ProbeModel(8, 8, 12, n_q=6, vocab=8)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0)  # sharper random weights: alignments that differ between sentences
        A = it.hard_alignment(model(x)[1])
        want = it.alignment_error_rate(A, S, P)
    assert abs(want - it.alignment_error_rate(A, S)) > 1e-3, "internal: the check's model must pick some possible links"
    got = float(model_aer(model, x, S, P))
    assert abs(got - want) < 1e-9, (
        f"got {got:.4f}, expected {want:.4f}: take each target position's arg-max source position and compute one AER "
        "over the whole corpus with both the sure links S and the possible links P"
    )
    return "correct: corpus AER of the hard alignment"
