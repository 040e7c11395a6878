"""A synthetic task for comparing taxonomy configurations (§3, §4, §5).

:func:`two_marker_task`: a set of ``n_f`` feature vectors, each carrying a
class prototype; two of them also carry a *marker* (marker 0 and marker 1).
The query input ``G`` names one of the two markers; the label is the class of
the item carrying that marker. A model must (a) look at the right item —
attention that averages everything sees ``n_f`` class prototypes and cannot
tell which one counts — and (b) use the query, since a model whose queries
ignore ``G`` can find the two marked items but not which one is asked for
(a ceiling of about 50% plus what the prototypes give away by chance).

:func:`question_in_features` writes the question into the feature stream,
``f'_l = f_l + mean(G)``, for a model without a query input (a self-attention
model with a constant query, Eq. 33/34): the same information, entering elsewhere.

Everything is made in code from a ``torch.Generator``; the marker and class
directions come from a separate fixed seed, so train and test sets share them.

Shapes: B examples, n_f feature vectors, n_g query vectors, d feature size.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import check_integers


def _directions(d: int, n_classes: int, seed: int) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    markers = torch.randn(2, d, generator=g)
    markers = 2.0 * markers / markers.norm(dim=-1, keepdim=True)
    protos = torch.randn(n_classes, d, generator=g)
    protos = 1.5 * protos / protos.norm(dim=-1, keepdim=True)
    return markers, protos


def two_marker_task(
    n_examples: int,
    n_f: int,
    d: int,
    n_classes: int,
    generator: torch.Generator,
    noise: float = 0.3,
    seed: int = 0,
) -> dict[str, Tensor]:
    """Make ``n_examples`` examples of the two-marker look-up task.

    Args:
        n_examples: the number of examples ``B``.
        n_f: feature vectors per example (>= 2).
        d: the feature size.
        n_classes: the number of labels.
        generator: the random generator of the examples.
        noise: the standard deviation of the noise.
        seed: the fixed seed of the marker and class directions (shared by train and
            test sets).

    Shape:
        - F: ``(B, n_f, d)``; G: ``(B, 2, d)``; y, pos, other, k: ``(B,)``.

    Returns:
        A dict: ``F`` feature vectors; ``G`` the query input (the asked marker plus noise,
        and a pure-noise vector); ``y`` labels; ``pos`` the position of the asked item
        (the gold alignment); ``other`` the position of the marked item that was not asked (the
        distractor); ``k`` which marker was asked.

    Raises:
        ValueError: if ``n_f < 2`` or a size is not positive.
    """
    check_integers("two_marker_task", n_examples=n_examples, n_f=n_f, d=d, n_classes=n_classes, seed=seed)
    for name, v in (("n_examples", n_examples), ("d", d), ("n_classes", n_classes)):
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    if n_f < 2:
        raise ValueError(f"n_f must be >= 2 to hold two marked items, got {n_f}")
    markers, protos = _directions(d, n_classes, seed)
    cls = torch.randint(0, n_classes, (n_examples, n_f), generator=generator)
    F = protos[cls] + noise * torch.randn(n_examples, n_f, d, generator=generator)
    # two distinct marked positions per example
    perm = torch.argsort(torch.rand(n_examples, n_f, generator=generator), dim=-1)
    p0, p1 = perm[:, 0], perm[:, 1]
    rows = torch.arange(n_examples)
    F[rows, p0] += markers[0]
    F[rows, p1] += markers[1]
    k = torch.randint(0, 2, (n_examples,), generator=generator)
    pos, other = torch.where(k == 0, p0, p1), torch.where(k == 0, p1, p0)
    y = cls[rows, pos]
    G = noise * torch.randn(n_examples, 2, d, generator=generator)
    G[:, 0] += markers[k]
    return {"F": F, "G": G, "y": y, "pos": pos, "other": other, "k": k}


def question_in_features(task: dict[str, Tensor]) -> dict[str, Tensor]:
    """A copy of ``task`` whose feature vectors carry the question: ``F' = F + mean(G)``.

    ``f'_l = f_l + (1/n_g) sum_j g_j`` for every ``l``; ``G`` is kept so that a model
    that reads it still can; other entries pass through unchanged.

    Args:
        task: a dict holding ``F`` and ``G``.

    Shape:
        - F: ``(B, n_f, d)``; G: ``(B, n_g, d)``.
        - Output: ``F'`` ``(B, n_f, d)``.

    Returns:
        A new dict with ``F'`` in place of ``F``.

    Raises:
        ValueError: if ``F`` or ``G`` is missing or their batch size or width ``d`` differ.
    """
    if "F" not in task or "G" not in task:
        raise ValueError(f"task must hold F (B, n_f, d) and G (B, n_g, d), got keys {sorted(task)}")
    F, G = task["F"], task["G"]
    if F.dim() != 3 or G.dim() != 3 or F.shape[0] != G.shape[0] or F.shape[-1] != G.shape[-1]:
        raise ValueError(
            f"F (B, n_f, d) and G (B, n_g, d) must share B and d, got {tuple(F.shape)} and {tuple(G.shape)}"
        )
    out = dict(task)
    out["F"] = F + G.mean(-2, keepdim=True)
    return out
