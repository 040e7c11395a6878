"""Synthetic "find the item that matches the query" task (Chapter 2, §2.3), and its task model.

Each example is a collection of ``n`` items. Item ``l`` carries a random unit
*key part* ``u_l`` (``d_u`` numbers) and a class label ``y_l`` (one of ``C``);
its feature vector is ``f_l = [u_l; onehot(y_l)]``. The query is a noisy copy
of one item's key part, and the answer is that item's label. A model must
*look up* the matching item; averaging all items (mean pooling) cannot.

The same items are organised three ways (§2.3 of the survey):

* ``"sequence"``: ``F`` is ``(B, n, d_f)``;
* ``"grid"``: ``F`` is ``(B, H, W, d_f)``, an image-like feature map, which
  attention reads as the flattened set ``(B, H*W, d_f)``;
* ``"graph"``: ``F`` holds the nodes ``(B, n, d_f)`` of a random graph; the
  query sits at one node and may only look at that node's neighbours, so the
  adjacency row becomes the attention mask.

:class:`attnsurvey.general_model.TaskModel` is Fig. 1 in code: a feature model, a query model, an
attention model and an output model. With ``pool="mean"`` the attention
model is replaced by uniform weights over the allowed items (mean pooling),
the baseline of the chapter's experiment.

Shapes: B batch, n items (H x W for a grid), d_f feature size, d_u query size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .._checks import check_integers

LAYOUTS = ("sequence", "grid", "graph")


@dataclass
class MatchBatch:
    """A batch of the match-the-query task.

    Attributes:
        F: ``(B, n, d_f)`` (or ``(B, H, W, d_f)`` for a grid) feature vectors.
        q: ``(B, d_u)`` queries.
        y: ``(B,)`` labels to predict.
        target: ``(B,)`` index of the matching item in the flattened set.
        mask: ``(B, n)`` boolean, ``True`` = may attend.
        adjacency: ``(B, n, n)`` for graphs, else None.
    """

    F: Tensor
    q: Tensor
    y: Tensor
    target: Tensor
    mask: Tensor
    adjacency: Tensor | None = None

    def flat_F(self) -> Tensor:
        """The items as a set of row vectors ``(B, n, d_f)``, whatever the layout."""
        return self.F.flatten(1, -2) if self.F.dim() == 4 else self.F


def match_query_batch(
    batch_size: int,
    n_items: int = 16,
    d_u: int = 8,
    n_classes: int = 4,
    layout: str = "sequence",
    noise: float = 0.3,
    edge_prob: float = 0.3,
    generator: torch.Generator | None = None,
) -> MatchBatch:
    """Sample a batch of the task in one ``layout`` ("sequence", "grid" or "graph").

    Args:
        batch_size: B.
        n_items: ``n`` (for a grid, a perfect square ``H = W = sqrt(n)``).
        d_u: size of the key part.
        n_classes: ``C``.
        layout: ``"sequence"``, ``"grid"`` or ``"graph"``.
        noise: standard deviation of the noise added to the query.
        edge_prob: probability of each undirected edge of the random graph (the query
            node always gets at least one neighbour).
        generator: the random generator.

    Returns:
        The batch as :class:`MatchBatch`.

    Raises:
        ValueError: for an unknown layout, a non-square grid or sizes < 1.
    """
    check_integers("match_query_batch", batch_size=batch_size, n_items=n_items, d_u=d_u, n_classes=n_classes)
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; choose one of {list(LAYOUTS)}")
    if min(batch_size, n_items, d_u, n_classes) < 1 or (layout == "graph" and n_items < 2):
        raise ValueError(
            f"need batch_size, n, d_u, C >= 1 (n >= 2 for a graph), got {batch_size}, {n_items}, {d_u}, {n_classes}"
        )
    side = int(round(n_items**0.5))
    if layout == "grid" and side * side != n_items:
        raise ValueError(f"a grid needs n = H * W with H = W, got n={n_items}")
    B, n = batch_size, n_items
    u = torch.randn(B, n, d_u, generator=generator)
    u = u / u.norm(dim=-1, keepdim=True)
    labels = torch.randint(0, n_classes, (B, n), generator=generator)
    F = torch.cat([u, nn.functional.one_hot(labels, n_classes).float()], dim=-1)
    adjacency = None
    mask = torch.ones(B, n, dtype=torch.bool)
    if layout == "graph":
        coin = torch.rand(B, n, n, generator=generator) < edge_prob
        adjacency = torch.triu(coin, diagonal=1)
        adjacency = adjacency | adjacency.transpose(1, 2)
        centre = torch.randint(0, n, (B,), generator=generator)
        # guarantee a neighbour: link the centre to the next node (mod n)
        nxt = (centre + 1) % n
        adjacency[torch.arange(B), centre, nxt] = True
        adjacency[torch.arange(B), nxt, centre] = True
        mask = adjacency[torch.arange(B), centre]
    # the target is a uniformly chosen allowed item
    target = torch.multinomial(mask.float(), 1, generator=generator).squeeze(1)
    rows = torch.arange(B)
    q = u[rows, target] + noise * torch.randn(B, d_u, generator=generator)
    y = labels[rows, target]
    if layout == "grid":
        F = F.view(B, side, side, -1)
    return MatchBatch(F, q, y, target, mask, adjacency)
