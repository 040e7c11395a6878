"""Self-checks for the exercises of chapter §4.2 Intrinsic evaluation (``ch04_2_intrinsic_evaluation``).

Each ``check_ex<k>`` raises ``AssertionError`` with a hint on a wrong answer and
returns a short confirmation string on a right one. References are computed
here from the definitions, never taken from the reader.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

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
    if not abs(float(ac_value) - want) < 1e-6:
        raise AssertionError(
            f"got {ac_value}: that is not the weight these attention weights put on the ground-truth regions "
            "(Eq. 46 sums over every region in G)"
        )
    return "correct"


def _links(pairs: list[tuple[int, int]]) -> Tensor:
    return it.links_to_matrix(pairs, 3, 4)


_S1, _S2 = _links([(0, 0), (1, 2)]), _links([(0, 1), (1, 1), (2, 3)])
_CASES = [
    # sure links S, possible links P (which contain S, as the chapter defines them), hypothesis A
    (_S1, _S1 | _links([(2, 1), (2, 2)]), _links([(0, 0), (1, 1), (2, 1)])),
    (_S2, _S2 | _links([(0, 2)]), _links([(0, 2), (1, 1), (2, 0), (2, 3)])),
]


def check_ex2(fn: Callable[[Tensor, Tensor, Tensor], tuple[float, float]]) -> str:
    """Ex. 2: ``precision_recall(A, S, P)`` = ``(|A & P| / |A|, |A & S| / |S|)``.

    The check's ``P`` contain the sure links, as the chapter defines them, so
    the formula as stated and one that takes ``P | S`` both pass; it also checks
    that ``1 - AER`` lies between the two numbers.
    """
    for S, P, A in _CASES:
        want = (float((A & P).sum() / A.sum()), float((A & S).sum() / S.sum()))
        got = tuple(float(v) for v in fn(A, S, P))
        if not (len(got) == 2 and abs(got[0] - want[0]) < 1e-6 and abs(got[1] - want[1]) < 1e-6):
            raise AssertionError(
                f"your (precision, recall) = {got} is not right: precision = |A & P| / |A|, " "recall = |A & S| / |S|"
            )
        one_minus = 1 - it.alignment_error_rate(A, S, P)
        if not min(want) - 1e-9 <= one_minus <= max(want) + 1e-9:
            raise RuntimeError("internal: 1 - AER must lie between precision and recall")
    return "correct: precision and recall bracket 1 - AER"


LOW_AER = 0.05  # Ex. 3: "a low AER" is below this on every seed


def _check_supervision_verdict(supervision_needed: object, aers: Sequence[float]) -> None:
    """Ex. 3's verdict against the reader's own AERs (no echo, no supervision); ``AssertionError`` otherwise."""
    if not isinstance(supervision_needed, bool):
        raise AssertionError(f"supervision_needed is True or False, got {supervision_needed!r}")
    values = [float(a) for a in aers]
    if len(values) != 5:
        raise AssertionError(f"give the AER of each of the five seeds, got {len(values)} values")
    if supervision_needed != (not all(a < LOW_AER for a in values)):
        raise AssertionError("supervision_needed does not follow from your AERs without the echo (see the exercise)")


def check_ex3(
    model_aer: Callable[[torch.nn.Module, Tensor, Tensor, Tensor], float],
    supervision_needed: bool,
    aers: Sequence[float],
) -> str:
    """Ex. 3: ``model_aer(model, x, S, P)`` is the corpus AER of the model's arg-max alignment, and the verdict.

    ``supervision_needed`` must follow from the reader's own AERs without the echo
    (``aers``, one per seed): a low AER is below 0.05 on every seed.

    Compared with :func:`attnsurvey.evaluation.intrinsic.alignment_error_rate`
    of :func:`~attnsurvey.evaluation.intrinsic.hard_alignment` over the whole
    corpus, with the possible links (an AER against the sure links alone is a
    different number whenever the model picks a possible link). In every
    second sentence of the check's data only the first target word's link is
    sure (the others stay possible), so sentences differ in ``|S|`` and the
    mean of per-sentence AERs differs from the corpus AER.
    """
    from ..data.evaluation_tasks import toy_translation_task
    from ..experiments.evaluation import ProbeModel

    g = torch.Generator().manual_seed(5)
    x, _, S, P = toy_translation_task(40, 6, 8, g, echo=True)
    S[1::2, 1:] = False  # P keeps these links as possible ones
    torch.manual_seed(0)
    model = ProbeModel(8, 8, 12, n_q=6, vocab=8)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0)  # sharper random weights: alignments that differ between sentences
        A = it.hard_alignment(model(x)[1])
        want = it.alignment_error_rate(A, S, P)
    per_sentence = sum(it.alignment_error_rate(A[b], S[b], P[b]) for b in range(len(x))) / len(x)
    if not (abs(want - it.alignment_error_rate(A, S)) > 1e-3 and abs(want - per_sentence) > 1e-3):
        raise RuntimeError("internal: the check's data must separate the corpus AER from its wrong variants")
    got = float(model_aer(model, x, S, P))
    if abs(got - per_sentence) < 1e-6:
        raise AssertionError(
            f"your AER {got:.4f} is the mean of per-sentence AERs, not the corpus AER "
            "(read the docstring of alignment_error_rate)"
        )
    if not abs(got - want) < 1e-6:
        raise AssertionError(
            f"your AER {got:.4f} is not the corpus AER of the model's hard alignment against S and P "
            "(read the chapter's code section)"
        )
    _check_supervision_verdict(supervision_needed, aers)
    return "correct: corpus AER of the hard alignment, and the verdict follows from your AERs"


def hidden_check_ex1(ac_value: float) -> None:
    """Hidden test of Ex. 1: AC against the exact fraction (0.5 + 3 * 0.5 / 24), to 1e-12. Raises ``AssertionError``."""
    from fractions import Fraction

    exact = Fraction(1, 2) + 3 * Fraction(1, 2) / 24
    if not abs(float(ac_value) - float(exact)) < 1e-12:
        raise AssertionError("AC is not exact: compute it as a fraction, without rounding")


def hidden_check_ex2(fn: Callable[[Tensor, Tensor, Tensor], tuple[float, float]]) -> None:
    """Hidden test of Ex. 2: other sizes (2 x 2, 4 x 5), a hypothesis equal to ``S``, one with a link outside ``P``.

    Raises ``AssertionError``.
    """
    S1 = it.links_to_matrix([(0, 0), (1, 1)], 2, 2)
    S2 = it.links_to_matrix([(0, 1), (2, 2), (3, 4)], 4, 5)
    P2 = S2 | it.links_to_matrix([(1, 0), (3, 3)], 4, 5)
    cases = [(S1, S1, S1), (S2, P2, it.links_to_matrix([(0, 1), (1, 0), (2, 4), (3, 4)], 4, 5))]
    for S, P, A in cases:
        want = (float((A & P).sum() / A.sum()), float((A & S).sum() / S.sum()))
        got = tuple(float(v) for v in fn(A, S, P))
        if not (len(got) == 2 and all(abs(g - w) < 1e-9 for g, w in zip(got, want))):
            raise AssertionError(f"a {tuple(S.shape)} alignment: your (precision, recall) is not right")


def hidden_check_ex3(
    model_aer: Callable[[torch.nn.Module, Tensor, Tensor, Tensor], float],
    supervision_needed: bool,
    aers: Sequence[float],
) -> None:
    """Hidden test of Ex. 3: another probe model on data without the echo (30 sentences of 5 words), and the verdict.

    Raises ``AssertionError``.
    """
    _check_supervision_verdict(supervision_needed, aers)
    from ..data.evaluation_tasks import toy_translation_task
    from ..experiments.evaluation import ProbeModel

    g = torch.Generator().manual_seed(9)
    x, _, S, P = toy_translation_task(30, 5, 8, g, echo=False)
    S[::3, 2:] = False
    torch.manual_seed(2)
    model = ProbeModel(8, 8, 10, n_q=5, vocab=8)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0)
        want = it.alignment_error_rate(it.hard_alignment(model(x)[1]), S, P)
    if not abs(float(model_aer(model, x, S, P)) - want) < 1e-9:
        raise AssertionError("30 sentences of 5 words without the echo: your AER is not the corpus AER")
