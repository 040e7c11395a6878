"""Self-checks for the exercises of chapter §4.1 Extrinsic evaluation (``ch04_1_extrinsic_evaluation``).

Each ``check_ex<k>`` raises ``AssertionError`` with a hint on a wrong answer and
returns a short confirmation string on a right one. References come from the
definitions or from libraries (``jiwer``), never from the reader.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from ..evaluation import extrinsic as ex
from ._answers import paired_verdict, real_number, run_answer


def _brevity_penalty(c: float, r: float) -> float:
    """BLEU's brevity penalty for total hypothesis length ``c`` and reference length ``r`` (lengths may be real)."""
    return 1.0 if c >= r else math.exp(1 - r / c)


def _length(answer: object, what: str) -> float:
    """``answer`` as a positive length; ``AssertionError`` otherwise."""
    value = real_number(answer, what)
    if value <= 0:
        raise AssertionError(f"got {answer}: {what} is a positive length")
    return value


def check_ex1(c_half: float) -> str:
    """Ex. 1: the total hypothesis length ``c`` at which the brevity penalty is 1/2, for ``r = 40``.

    Any value within 0.005 of the exact one is right; the hint reports the penalty the
    answer gives, never the length that gives 1/2.
    """
    c = _length(c_half, "c_half")
    r = 40
    want = r / (1 + math.log(2))
    if not abs(c - want) < 5e-3:
        raise AssertionError(
            f"got c_half = {c_half}: with r = {r} that length gives BP = {_brevity_penalty(c, r):.4f}, not 0.5 "
            "(solve BP = 1/2 for c in the definition of BP)"
        )
    return "correct"


def check_ex2(cer_fn: Callable[[Sequence[str], Sequence[str]], float]) -> str:
    """Ex. 2: ``cer(references, hypotheses)``, the WER formula on characters, equals ``jiwer.cer``."""
    import jiwer

    cases = [
        (["attention", "is all"], ["atention", "is al you"]),  # codespell:ignore (WER case)
        (["abc", "de"], ["abcdef", ""]),
        (["kitten"], ["sitting"]),
    ]
    for r, h in cases:
        want = jiwer.cer(r, h)
        got = float(cer_fn(r, h))
        if not abs(got - want) < 1e-6:
            raise AssertionError(
                f"references {r}, hypotheses {h}: got {got:.4f}, jiwer says {want:.4f} "
                "(reread how the chapter's WER treats a corpus of several sentences)"
            )
    return "correct: CER agrees with jiwer"


def _check_verdict(verdict: str, drops10: Sequence[float], drops20: Sequence[float]) -> None:
    """The verdict of Ex. 3 on the reader's drops, 20 tokens minus 10; ``AssertionError`` otherwise."""
    paired_verdict(verdict, drops20, drops10, "replacement_hurts", ("more", "less", "unresolved"))


def check_ex3(
    drop_fn: Callable[[torch.nn.Module, torch.Tensor, torch.Tensor], float],
    verdict: str,
    drops10: Sequence[float],
    drops20: Sequence[float],
) -> str:
    """Ex. 3: ``drop(model, x, y)`` and the verdict on 20 against 10 tokens.

    ``drop`` is compared with :func:`attnsurvey.evaluation.extrinsic.uniform_attention_ablation`
    on probe models of its own whose weights make the two accuracies differ; the
    verdict (``"more"``, ``"less"`` or ``"unresolved"``) must follow from the paired
    95% interval of the reader's own drops, ``drops20 - drops10``.
    """
    from ..experiments.evaluation import ProbeModel
    from ..training import seed_everything

    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, 20, (200, 12), generator=g)
    y = torch.randint(0, 4, (200, 1), generator=g)
    drops = []
    for seed in (0, 1):
        seed_everything(seed)
        model = ProbeModel(8, 4, 12, vocab=20)
        with torch.no_grad():  # sharpen the random weights so that learned and uniform attention differ
            for p in model.parameters():
                p.mul_(6.0)
        learned, uniform = ex.uniform_attention_ablation(model, x, y)
        want = learned - uniform
        got = float(drop_fn(model, x, y))
        if not abs(got - want) < 1e-6:
            raise AssertionError(
                f"your drop {got:.4f} is not right: the drop is (accuracy with learned weights) - "
                "(accuracy with uniform weights)"
            )
        drops.append(want)
    if not any(abs(d) > 0.02 for d in drops):
        raise RuntimeError("internal: the check's models must separate learned and uniform weights")
    _check_verdict(verdict, drops10, drops20)
    return "correct: the drop is learned minus uniform accuracy, and the verdict follows from your paired interval"


def hidden_check_ex1(c_half: float) -> None:
    """Hidden test of Ex. 1: the brevity penalty of the answer, recomputed from the definition, is 1/2 to 2e-4.

    (A length within 0.005 of the exact one, as the visible check accepts, gives a penalty within 2e-4 of 1/2.)

    Raises ``AssertionError``.
    """
    c = _length(c_half, "c_half")
    if not abs(_brevity_penalty(c, 40) - 0.5) < 2e-4:
        raise AssertionError("with r = 40, your length does not give a brevity penalty of 1/2")


def hidden_check_ex2(cer_fn: Callable[[Sequence[str], Sequence[str]], float]) -> None:
    """Hidden test of Ex. 2: other corpora (an empty hypothesis, repeated letters, one long pair) against ``jiwer.cer``.

    Raises ``AssertionError``.
    """
    import jiwer

    for r, h in ((["abc"], [""]), (["aaaa", "b"], ["aa", "bbb"]), (["the cat sat on the mat"], ["a cat sat on mat"])):
        got = float(run_answer(cer_fn, r, h, what=f"references {r}, hypotheses {h}"))
        if not abs(got - jiwer.cer(r, h)) < 1e-6:
            raise AssertionError(f"references {r}, hypotheses {h}: your CER disagrees with jiwer")


def hidden_check_ex3(
    drop_fn: Callable[[torch.nn.Module, torch.Tensor, torch.Tensor], float],
    verdict: str,
    drops10: Sequence[float],
    drops20: Sequence[float],
) -> None:
    """Hidden test of Ex. 3: ``drop`` on a probe model of another size (16 tokens, 6 classes), and the verdict.

    The verdict is checked as in :func:`check_ex3`, and the drops must be five, one per seed. Raises ``AssertionError``.
    """
    if len(list(drops10)) != 5 or len(list(drops20)) != 5:
        raise AssertionError("one drop per seed: five at 10 tokens and five at 20")
    _check_verdict(verdict, drops10, drops20)
    from ..experiments.evaluation import ProbeModel
    from ..training import seed_everything

    g = torch.Generator().manual_seed(8)
    x = torch.randint(0, 30, (150, 16), generator=g)
    y = torch.randint(0, 6, (150, 1), generator=g)
    seed_everything(4)
    model = ProbeModel(8, 6, 16, vocab=30)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(6.0)
    learned, uniform = ex.uniform_attention_ablation(model, x, y)
    if not abs(float(drop_fn(model, x, y)) - (learned - uniform)) < 1e-6:
        raise AssertionError("16 tokens, 6 classes: your drop is not learned minus uniform accuracy")
