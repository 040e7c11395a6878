"""Synthetic tasks with an exactly known answer to *where* a model should look (§4).

Every generator takes a ``torch.Generator`` and returns tensors only, so a
chapter's experiment is reproducible and needs no download.

* :func:`signal_token_task`  a sequence of noise tokens with one signal token;
  the label is the signal's class, the gold alignment its position.
* :func:`toy_translation_task`  "translate" a sentence by reversing it and
  mapping every token; the sure alignment links target ``j`` to source
  ``m - 1 - j``, and every other position of the sentence holding the same
  token is a possible link (attending there gives the same output). An
  optional echo (a copy of the sentence) offers an unannotated shortcut.
* :func:`patch_image_task`  grey images cut into a grid of regions; one 2 x 2
  block of regions holds a striped object whose orientation is the label, the
  rest is noise. The object's regions are the ground-truth set ``G`` of Eq. (46),
  and a Gaussian bump around the object plays the "human" attention map.

Shapes: B examples, n tokens, m target length, n_src source length, H x W image, grid^2 regions.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import check_integers, check_nonnegative
from ._rows import check_positive


def signal_token_task(
    n_examples: int, n: int, n_classes: int, n_noise: int, generator: torch.Generator
) -> tuple[Tensor, Tensor, Tensor]:
    """Sequences of ``n`` noise tokens (ids ``n_classes ..``) with one signal token (id = class).

    Args:
        n_examples: the number of sequences ``B``.
        n: the sequence length.
        n_classes: the number of classes (signal token ids).
        n_noise: the number of noise token ids.
        generator: the random generator.

    Shape:
        - Output: ``(x (B, n), y (B, 1), gold (B, 1, n))``.

    Returns:
        ``(x, y, gold)``: token ids, labels and the boolean gold alignment (True at the
        signal position).

    Raises:
        ValueError: for a size below 1.
    """
    check_integers("signal_token_task", n_examples=n_examples, n=n, n_classes=n_classes, n_noise=n_noise)
    check_positive(n_examples=n_examples, n=n, n_classes=n_classes, n_noise=n_noise)
    x = torch.randint(n_classes, n_classes + n_noise, (n_examples, n), generator=generator)
    y = torch.randint(0, n_classes, (n_examples,), generator=generator)
    pos = torch.randint(0, n, (n_examples,), generator=generator)
    rows = torch.arange(n_examples)
    x[rows, pos] = y
    gold = torch.zeros(n_examples, 1, n, dtype=torch.bool)
    gold[rows, 0, pos] = True
    return x, y[:, None], gold


def toy_translation_task(
    n_examples: int, m: int, vocab: int, generator: torch.Generator, echo: bool = False
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """A "sentence" ``w`` of ``m`` tokens, "translated" as ``y_j = (w_{m-1-j} + 1) mod vocab``.

    The source ``x`` is ``w`` itself, or with ``echo=True`` the sentence
    followed by a verbatim copy of itself (``n_src = 2m``): the copy carries
    the same information but the annotators link only the first occurrence.
    ``S[b, j, m-1-j]`` is True; ``P[b, j, i]`` is True for every ``i < m`` with
    ``w[b, i] == w[b, m-1-j]`` (the same word elsewhere in the sentence: attending
    there gives the same output); ``S`` lies within ``P``.

    Args:
        n_examples: the number of sentences ``B``.
        m: the sentence length.
        vocab: the vocabulary size.
        generator: the random generator.
        echo: append a copy of the sentence to the source.

    Shape:
        - Output: ``(x (B, n_src), y (B, m), S (B, m, n_src), P (B, m, n_src))``.

    Returns:
        ``(x, y, S, P)``: source, target, and the boolean sure and possible links.

    Raises:
        ValueError: for a size below 1.
    """
    check_integers("toy_translation_task", n_examples=n_examples, m=m, vocab=vocab)
    check_positive(n_examples=n_examples, m=m, vocab=vocab)
    w = torch.randint(0, vocab, (n_examples, m), generator=generator)
    src_of = torch.arange(m - 1, -1, -1)
    y = (w[:, src_of] + 1) % vocab
    x = torch.cat([w, w], dim=1) if echo else w
    n_src = x.shape[1]
    S = torch.zeros(n_examples, m, n_src, dtype=torch.bool)
    S[:, torch.arange(m), src_of] = True
    P = torch.zeros(n_examples, m, n_src, dtype=torch.bool)
    P[:, :, :m] = w[:, src_of][:, :, None] == w[:, None, :]
    return x, y, S, P


def patch_image_task(
    n_examples: int, grid: int, patch: int, generator: torch.Generator, noise: float = 0.5, sigma: float = 1.0
) -> dict[str, Tensor]:
    """Grey images of ``grid x grid`` regions of ``patch x patch`` pixels with one striped object.

    The object covers a 2 x 2 block of regions at a random place; its stripes
    are horizontal (label 0), vertical (1) or diagonal (2). Background pixels
    are Gaussian noise of standard deviation ``noise``.

    Args:
        n_examples: the number of images ``B``.
        grid: regions per side (>= 2).
        patch: pixels per region side.
        generator: the random generator.
        noise: the standard deviation of the background.
        sigma: the width (in regions) of the synthetic human attention map.

    Shape:
        - images: ``(B, H, W)`` with ``H = W = grid * patch``.
        - regions: ``(B, grid^2, patch^2)`` (the feature vectors, one per region, row-major).
        - y: ``(B, 1)``; G: ``(B, grid^2)``; human: ``(B, grid^2)``.

    Returns:
        A dict with ``images``, ``regions``, ``y``, ``G`` (boolean ground-truth regions
        of Eq. (46)) and ``human`` (a synthetic human attention map: a Gaussian bump of
        width ``sigma`` regions around the object's centre, normalised to sum 1).

    Raises:
        ValueError: for a size below 1 or ``grid < 2``.
    """
    check_integers("patch_image_task", n_examples=n_examples, grid=grid, patch=patch)
    check_nonnegative("patch_image_task", sigma=sigma)
    check_positive(n_examples=n_examples, grid=grid, patch=patch)
    if grid < 2:
        raise ValueError(f"grid must be >= 2 to hold a 2 x 2 object, got {grid}")
    H = grid * patch
    size = 2 * patch
    r = torch.arange(size)
    stripes = (
        torch.stack(
            [
                ((r[:, None] // 2) % 2).expand(size, size),
                ((r[None, :] // 2) % 2).expand(size, size),
                (((r[:, None] + r[None, :]) // 2) % 2),
            ]
        ).float()
        * 2.0
        - 1.0
    )
    images = noise * torch.randn(n_examples, H, H, generator=generator)
    y = torch.randint(0, 3, (n_examples,), generator=generator)
    top = torch.randint(0, grid - 1, (n_examples,), generator=generator)
    left = torch.randint(0, grid - 1, (n_examples,), generator=generator)
    G = torch.zeros(n_examples, grid, grid, dtype=torch.bool)
    gy, gx = torch.meshgrid(torch.arange(grid).float(), torch.arange(grid).float(), indexing="ij")
    human = torch.zeros(n_examples, grid, grid)
    for b in range(n_examples):
        t, l_ = int(top[b]) * patch, int(left[b]) * patch
        images[b, t : t + size, l_ : l_ + size] = stripes[y[b]]
        G[b, top[b] : top[b] + 2, left[b] : left[b] + 2] = True
        cy, cx = float(top[b]) + 0.5, float(left[b]) + 0.5
        human[b] = torch.exp(-((gy - cy) ** 2 + (gx - cx) ** 2) / (2 * sigma**2))
    human = human.reshape(n_examples, -1)
    human = human / human.sum(-1, keepdim=True)
    regions = (
        images.reshape(n_examples, grid, patch, grid, patch).permute(0, 1, 3, 2, 4).reshape(n_examples, grid * grid, -1)
    )
    return {"images": images, "regions": regions, "y": y[:, None], "G": G.reshape(n_examples, -1), "human": human}
