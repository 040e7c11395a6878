"""Synthetic embedding tables of unequal quality (§3.1.3 experiments).

Each word of a vocabulary has a latent class. Several embedding tables give
every word a vector, but only some of them carry the class:

* ``"informative"``: the word's class prototype plus Gaussian noise of
  standard deviation ``noise`` (larger noise = a weaker table);
* ``"shuffled"``: an informative table whose rows were permuted among the
  words, so it looks just as structured but describes the wrong words;
* ``"noise"``: independent Gaussian vectors, no information at all.

A table can also cover only part of the vocabulary (``coverage < 1``), as
embedding models trained on different corpora do: an uncovered word gets a
random "unknown" vector. Which table is informative then depends on the
word, which is what a per-word attention weight can exploit and a fixed
average cannot.

Tables have different widths ``d_{e_i}``, as in Eq. (21). A classifier that
reads the word's vectors must find the informative tables.

Shapes: n_words words, E tables, d_{e_i} the width of table i.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

KINDS = ("informative", "shuffled", "noise")


@dataclass
class EmbeddingTables:
    """Word embedding tables with the words' classes.

    Attributes:
        tables: ``E`` tables ``(n_words, d_{e_i})`` each.
        classes: ``(n_words,)`` word classes.
        names: the tables' names.
        kinds: the tables' kinds.
        known: ``(n_words, E)``: True where table i covers the word.
    """

    tables: list[Tensor]
    classes: Tensor
    names: list[str]
    kinds: list[str]
    known: Tensor

    def lookup(self, words: Tensor) -> list[Tensor]:
        """The representations ``x^(e_1), ..., x^(e_E)`` of ``words``: each ``(..., d_{e_i})``."""
        return [t[words] for t in self.tables]

    @property
    def dims(self) -> list[int]:
        return [t.shape[1] for t in self.tables]


def make_embedding_tables(
    n_words: int,
    n_classes: int,
    specs: Sequence[tuple],
    generator: torch.Generator | None = None,
    unknown_scale: float = 1.0,
    offset: float = 0.0,
) -> EmbeddingTables:
    """Sample a vocabulary with classes and one table per spec ``(kind, d_e, noise[, coverage])``.

    ``noise`` is the standard deviation of the Gaussian noise added to the
    class prototypes (ignored for ``"noise"`` tables, whose entries are
    standard normal). Prototypes have unit-variance entries. ``coverage``
    (default 1) is the fraction of words the table knows; the others get
    random ``unknown_scale * N(0, I)`` vectors (like randomly initialised
    out-of-vocabulary rows).

    Args:
        n_words: the vocabulary size.
        n_classes: the number of word classes.
        specs: one ``(kind, d_e, noise[, coverage])`` per table.
        generator: the random generator.
        unknown_scale: the scale of the vectors of unknown words.
        offset: adds one shared random direction, scaled by ``offset``, to every known
            row of a prototype table (trained embeddings share such a common mean
            direction; unknown rows lack it).

    Returns:
        The tables as :class:`EmbeddingTables`.

    Raises:
        ValueError: for an unknown kind, a non-positive width or a coverage outside (0, 1].
    """
    g = generator
    classes = torch.randint(0, n_classes, (n_words,), generator=g)
    tables, names, kinds, known = [], [], [], []
    for i, spec in enumerate(specs):
        kind, d, noise = spec[:3]
        coverage = spec[3] if len(spec) > 3 else 1.0
        if not 0 < coverage <= 1:
            raise ValueError(f"table {i} needs 0 < coverage <= 1, got {coverage}")
        if kind not in KINDS:
            raise ValueError(f"unknown table kind {kind!r}; choose one of {KINDS}")
        if d < 1:
            raise ValueError(f"table {i} needs a width d_e >= 1, got {d}")
        if kind == "noise":
            t = torch.randn(n_words, d, generator=g)
            names.append(f"e{i + 1}: noise (d={d})")
        else:
            protos = torch.randn(n_classes, d, generator=g) + offset * torch.randn(d, generator=g)
            t = protos[classes] + noise * torch.randn(n_words, d, generator=g)
            if kind == "shuffled":
                t = t[torch.randperm(n_words, generator=g)]
            names.append(f"e{i + 1}: {kind} (d={d}, noise {noise:g})")
        k = torch.ones(n_words, dtype=torch.bool)
        if coverage < 1:
            k = torch.rand(n_words, generator=g) < coverage
            t = torch.where(k[:, None], t, unknown_scale * torch.randn(n_words, d, generator=g))
            names[-1] = names[-1][:-1] + f", covers {coverage:.0%})"
        tables.append(t)
        kinds.append(kind)
        known.append(k)
    return EmbeddingTables(tables, classes, names, kinds, torch.stack(known, -1))
