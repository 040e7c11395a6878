"""A next-token task whose answer lies in the most recent tokens: a noisy lagged-sum sequence.

Each sequence follows ``x_t = (x_{t-1} + x_{t-1-lag}) mod vocab`` except that,
independently at every step with probability ``p_noise``, ``x_t`` is redrawn
uniformly. The best prediction of the next token reads the current token and
the one ``lag`` positions before it, wherever they stand: a language-model-like
task where what matters is recent, so a model trained on short sequences can
be tested on longer ones (chapter 6.2).

Shapes: batch sequences, n tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import check_integers
from .sequences import IGNORE


def lagged_sum_batch(
    batch: int, n: int, vocab: int, generator: torch.Generator, *, lag: int = 1, p_noise: float = 0.1
) -> tuple[Tensor, Tensor]:
    """Inputs and next-token targets ``y[:, t] = x_{t+1}`` of the lagged-sum sequences.

    The first ``lag + 1`` tokens are uniform; token ``t > lag`` is
    ``(x_{t-1} + x_{t-1-lag}) mod vocab`` with probability ``1 - p_noise``, else
    uniform. The first ``lag`` targets (whose rule would read before the start)
    are :data:`~attnsurvey.data.sequences.IGNORE`. A predictor that knows the
    rule is right with probability ``1 - p_noise + p_noise / vocab``.

    Args:
        batch: the number of sequences.
        n: the sequence length.
        vocab: the vocabulary size.
        generator: the random generator.
        lag: the second summand's distance.
        p_noise: the chance of a uniform token.

    Shape:
        - Output: ``(x (batch, n), y (batch, n))``.

    Returns:
        ``(x, y)``.

    Raises:
        ValueError: unless ``batch >= 1``, ``vocab >= 2``, ``1 <= lag < n`` and
            ``0 <= p_noise <= 1``.
    """
    check_integers("lagged_sum_batch", batch=batch, n=n, vocab=vocab, lag=lag)
    if batch < 1 or vocab < 2 or not 1 <= lag < n or not 0.0 <= p_noise <= 1.0:
        raise ValueError(
            f"need batch >= 1, vocab >= 2, 1 <= lag < n, 0 <= p_noise <= 1; "
            f"got batch={batch}, n={n}, vocab={vocab}, lag={lag}, p_noise={p_noise}"
        )
    x = torch.randint(0, vocab, (batch, n + 1), generator=generator)
    follow = torch.rand(batch, n + 1, generator=generator) >= p_noise
    for t in range(lag + 1, n + 1):  # sequential: each token depends on the two before
        rule = (x[:, t - 1] + x[:, t - 1 - lag]) % vocab
        x[:, t] = torch.where(follow[:, t], rule, x[:, t])
    y = x[:, 1:].clone()
    y[:, :lag] = IGNORE
    return x[:, :n], y


def triggered_copy_batch(
    batch: int, n: int, vocab: int, generator: torch.Generator, *, lag: int = 4, p_trigger: float = 0.2
) -> tuple[Tensor, Tensor]:
    """Inputs and next-token targets of sequences where only a trigger makes the past worth reading.

    Symbol 0 is the trigger. After a trigger at position ``t``, the next token repeats
    the token ``lag`` positions before the trigger, ``x_{t+1} = x_{t-lag}``; every other
    token is the trigger with probability ``p_trigger``, else one of the symbols
    ``1 .. vocab - 1`` uniformly. No trigger stands at a position ``t < lag`` (its rule
    would read before the start). So at most positions nothing in the past helps to
    predict the next token, and a head that retrieves the copied token has nothing to
    fetch there (the situation in which trained models are said to park weight on the
    first token). Targets ``y[:, t] = x_{t+1}``; the first ``lag`` targets are
    :data:`~attnsurvey.data.sequences.IGNORE`, so that every counted target follows the rule.

    Args:
        batch: the number of sequences.
        n: the sequence length.
        vocab: the vocabulary size, trigger included (>= 3).
        generator: the random generator.
        lag: how far before the trigger the copied token stands.
        p_trigger: the chance that a free token is the trigger.

    Shape:
        - Output: ``(x (batch, n), y (batch, n))``.

    Returns:
        ``(x, y)``.

    Raises:
        ValueError: unless ``batch >= 1``, ``vocab >= 3``, ``1 <= lag < n`` and ``0 <= p_trigger <= 1``.
    """
    check_integers("triggered_copy_batch", batch=batch, n=n, vocab=vocab, lag=lag)
    if batch < 1 or vocab < 3 or not 1 <= lag < n or not 0.0 <= p_trigger <= 1.0:
        raise ValueError(
            f"need batch >= 1, vocab >= 3, 1 <= lag < n, 0 <= p_trigger <= 1; "
            f"got batch={batch}, n={n}, vocab={vocab}, lag={lag}, p_trigger={p_trigger}"
        )
    free = torch.randint(1, vocab, (batch, n + 1), generator=generator)
    trigger = torch.rand(batch, n + 1, generator=generator) < p_trigger
    trigger[:, :lag] = False
    x = torch.where(trigger, 0, free)
    for t in range(lag + 1, n + 1):  # sequential: a copied token may itself be a trigger
        copy = x[:, t - 1] == 0
        x[:, t] = torch.where(copy, x[:, t - 1 - lag], x[:, t])
    y = x[:, 1:].clone()
    y[:, :lag] = IGNORE
    return x[:, :n], y
