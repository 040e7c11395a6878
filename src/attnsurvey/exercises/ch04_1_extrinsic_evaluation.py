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
from ._answers import run_answer


def check_ex1(bp: float) -> str:
    """Ex. 1: the brevity penalty for total hypothesis length ``c = 30`` and reference length ``r = 40``.

    The exact value or one rounded to four decimals (0.7165) is right.
    """
    want = math.exp(1 - 40 / 30)
    err = abs(float(bp) - want)
    if 5e-5 <= err < 5e-3:
        raise AssertionError(f"got {bp}: close, but give the value to at least four decimals")
    if not err < 5e-5:
        raise AssertionError(f"got {bp}: BP = exp(1 - r / c) when c < r (r is the reference length)")
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
                "(sum S + D + I over the corpus, divide by the number of reference characters)"
            )
    return "correct: CER agrees with jiwer"


def check_ex3(drop_fn: Callable[[torch.nn.Module, torch.Tensor, torch.Tensor], float]) -> str:
    """Ex. 3: ``drop(model, x, y)`` = accuracy with learned weights minus accuracy with uniform weights.

    The check compares with :func:`attnsurvey.evaluation.extrinsic.uniform_attention_ablation`
    on probe models of its own whose weights make the two accuracies differ. It
    checks the function only, not the reader's comparison of 10 and 20 tokens.
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
    return "correct: the drop is learned minus uniform accuracy"


def hidden_check_ex1(bp: float) -> None:
    """Hidden test of Ex. 1: BP rounds to the right fourth decimal (recomputed from the lengths here).

    Raises ``AssertionError``.
    """
    c, r = 30, 40
    if round(float(bp), 4) != round(math.exp(1 - r / c), 4):
        raise AssertionError("round the brevity penalty correctly to four decimals")


def hidden_check_ex2(cer_fn: Callable[[Sequence[str], Sequence[str]], float]) -> None:
    """Hidden test of Ex. 2: other corpora (an empty hypothesis, repeated letters, one long pair) against ``jiwer.cer``.

    Raises ``AssertionError``.
    """
    import jiwer

    for r, h in ((["abc"], [""]), (["aaaa", "b"], ["aa", "bbb"]), (["the cat sat on the mat"], ["a cat sat on mat"])):
        got = float(run_answer(cer_fn, r, h, what=f"references {r}, hypotheses {h}"))
        if not abs(got - jiwer.cer(r, h)) < 1e-6:
            raise AssertionError(f"references {r}, hypotheses {h}: your CER disagrees with jiwer")


def hidden_check_ex3(drop_fn: Callable[[torch.nn.Module, torch.Tensor, torch.Tensor], float]) -> None:
    """Hidden test of Ex. 3: ``drop`` on a probe model of another size (16 tokens, 6 classes). Raises ``AssertionError``."""
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
