"""A synthetic aspect-sentiment task for rotatory attention (§3.1.1).

Each sentence talks about two aspects of a restaurant, one positively and one
negatively, e.g. ``the waiter was rude but [the pasta] tasty``. One aspect is
the *target phrase*; the label is the polarity of the opinion word that
belongs to the target's category (food, service, price, ambience). The
sentence is split into left context, target phrase and right context; either
context may be empty (the target opens or closes the sentence).

Because both polarities occur in every sentence, neither the target phrase
alone nor an average of the contexts can decide; a model has to find the
opinion word that matches the target, which is what rotatory attention's
target-to-context step (Eq. 18) does.

The task model, :class:`attnsurvey.experiments.feature_related.AspectModel`,
uses word embeddings as the feature model (LCR-Rot uses Bi-LSTMs; embeddings keep the experiment fast), then either
rotatory attention (:class:`attnsurvey.feature_related.rotatory.RotatoryAttention`)
or one of two baselines, then the output model of Eq. (5).

Shapes: n sentences, MAX_CONTEXT and MAX_TARGET padded lengths.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .._checks import check_integers
from ._rows import Rows

CATEGORIES = {
    "food": (("pasta", "pizza", "soup"), ("tasty", "fresh"), ("bland", "stale")),
    "service": (("waiter", "staff", "host"), ("friendly", "quick"), ("rude", "slow")),
    "price": (("bill", "prices", "wine"), ("cheap", "fair"), ("pricey", "steep")),
    "ambience": (("music", "decor", "terrace"), ("cosy", "lovely"), ("noisy", "gloomy")),
}
DETERMINERS = ("the", "our", "that")
FILLERS = ("we", "thought", "really", "and", "so", "honestly")
LINKS = ("was", "seemed", "felt")
VOCAB = (
    ("<pad>",)
    + DETERMINERS
    + FILLERS
    + LINKS
    + ("but",)
    + tuple(w for nouns, pos, neg in CATEGORIES.values() for w in nouns + pos + neg)
)
LABELS = ("negative", "positive")
MAX_CONTEXT = 9
MAX_TARGET = 2


@dataclass
class AspectData(Rows):
    """Padded token ids and masks of a batch of sentences split around the target.

    Attributes:
        left: ``(n, MAX_CONTEXT)`` token ids left of the target.
        target: ``(n, MAX_TARGET)`` token ids of the target.
        right: ``(n, MAX_CONTEXT)`` token ids right of the target.
        mask_l: boolean ``(n, MAX_CONTEXT)``, True = real word.
        mask_t: boolean ``(n, MAX_TARGET)``, True = real word.
        mask_r: boolean ``(n, MAX_CONTEXT)``, True = real word.
        label: ``(n,)`` (0 negative, 1 positive).
        opinion: ``(n, 2)``: side (0 left, 1 right) and position of the target's opinion word.
    """

    left: Tensor
    target: Tensor
    right: Tensor
    mask_l: Tensor
    mask_t: Tensor
    mask_r: Tensor
    label: Tensor
    opinion: Tensor

    def words(self, i: int) -> tuple[list[str], list[str], list[str]]:
        """The left context, target phrase and right context of sentence ``i``."""
        i = self.check_example(i)
        out = []
        for ids, m in ((self.left, self.mask_l), (self.target, self.mask_t), (self.right, self.mask_r)):
            out.append([VOCAB[t] for t, keep in zip(ids[i].tolist(), m[i].tolist()) if keep])
        return out[0], out[1], out[2]

    def describe(self, i: int) -> str:
        left, target, right = self.words(self.check_example(i))
        return " ".join(left + ["[" + " ".join(target) + "]"] + right) + " -> " + LABELS[int(self.label[i])]


def _choice(seq, g):
    return seq[int(torch.randint(len(seq), (1,), generator=g))]


def make_aspect(n: int, p_empty: float = 0.2, generator: torch.Generator | None = None) -> AspectData:
    """Sample ``n`` sentences (see the module docstring).

    Args:
        n: the number of sentences.
        p_empty: the chance that the target opens or closes the sentence, leaving one
            context empty.
        generator: the random generator.

    Returns:
        The batch as :class:`AspectData`.

    Raises:
        ValueError: ``n`` is not an integer >= 0.
    """
    check_integers("make_aspect", minimum=0, n=n)
    g = generator
    tok = {w: i for i, w in enumerate(VOCAB)}
    cats = list(CATEGORIES)
    left = torch.zeros(n, MAX_CONTEXT, dtype=torch.long)
    right = torch.zeros(n, MAX_CONTEXT, dtype=torch.long)
    target = torch.zeros(n, MAX_TARGET, dtype=torch.long)
    mask_l = torch.zeros(n, MAX_CONTEXT, dtype=torch.bool)
    mask_r = torch.zeros(n, MAX_CONTEXT, dtype=torch.bool)
    mask_t = torch.zeros(n, MAX_TARGET, dtype=torch.bool)
    label = torch.zeros(n, dtype=torch.long)
    opinion = torch.zeros(n, 2, dtype=torch.long)
    for b in range(n):
        perm = torch.randperm(len(cats), generator=g).tolist()
        c, d = cats[perm[0]], cats[perm[1]]
        pol = int(torch.randint(2, (1,), generator=g))
        nouns_c, pos_c, neg_c = CATEGORIES[c]
        nouns_d, pos_d, neg_d = CATEGORIES[d]
        t_words = ([_choice(DETERMINERS, g)] if torch.rand(1, generator=g) < 0.7 else []) + [_choice(nouns_c, g)]
        op_c = _choice(pos_c if pol else neg_c, g)
        clause_d = [
            _choice(DETERMINERS, g),
            _choice(nouns_d, g),
            _choice(LINKS, g),
            _choice(neg_d if pol else pos_d, g),
        ]
        u = float(torch.rand(1, generator=g))
        if u < p_empty / 2:  # target opens the sentence: "[the pasta] was tasty but the waiter was rude"
            lw, rw, side, at = [], [_choice(LINKS, g), op_c, "but"] + clause_d, 1, 1
        elif u < p_empty:  # target closes it: "the waiter was rude but tasty was [the pasta]"
            lw, rw, side, at = clause_d + ["but", op_c, _choice(LINKS, g)], [], 0, len(clause_d) + 1
        elif u < (1 + p_empty) / 2:  # "the waiter was rude but [the pasta] was tasty"
            lw, rw, side, at = clause_d + ["but"], [_choice(LINKS, g), op_c], 1, 1
        else:  # "honestly [the pasta] was tasty but the waiter was rude" / clause first
            lw, rw, side, at = [_choice(FILLERS, g)], [_choice(LINKS, g), op_c, "but"] + clause_d, 1, 1
        for arr, m, words in ((left, mask_l, lw), (right, mask_r, rw), (target, mask_t, t_words)):
            arr[b, : len(words)] = torch.tensor([tok[w] for w in words], dtype=torch.long)
            m[b, : len(words)] = True
        label[b] = pol
        opinion[b] = torch.tensor([side, at])
    return AspectData(left, target, right, mask_l, mask_t, mask_r, label, opinion)
