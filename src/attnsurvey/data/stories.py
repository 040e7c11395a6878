"""Synthetic question-answering stories whose answer needs two supporting facts.

Each story lists where every person went and which person took every object,
in random order::

    mary went kitchen . john took apple . john went garden . mary took ball .
    where apple ?  ->  garden

The answer to "where is <object>?" needs two facts: *who took the object*
(found from the object's name) and *where that person went* (found only after
the first fact has revealed the person). A single attention read can find the
first fact but not the second, which is why the task separates one hop from
two (§3.3.2, multi-hop attention, end-to-end memory networks).

Stories are tensors of token ids: ``story`` ``(N, n_sentences, 3)``,
``question`` ``(N, 2)``; ``answer`` indexes the places (``0 .. n_places-1``);
``support`` holds the indices of the two supporting sentences (took, went).
Token 0 is padding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .._checks import check_integers
from ._rows import Rows

PEOPLE = ("mary", "john", "sandra", "daniel", "fred", "bill")
OBJECTS = ("apple", "ball", "milk", "book", "key")
PLACES = ("kitchen", "garden", "office", "hallway", "bedroom", "bathroom")


@dataclass
class Stories(Rows):
    """A batch of stories, as token ids, with answers and supporting-fact indices.

    Attributes:
        story: ``(N, n_sentences, 3)`` long token ids (0 = padding).
        question: ``(N, 2)`` long token ids.
        answer: ``(N,)`` long, index into ``places``.
        support: ``(N, 2)`` long: the indices of "p took o" and "p went l".
        vocab: the token names.
        places: the place names.
    """

    story: Tensor  # (N, n_sentences, 3) long
    question: Tensor  # (N, 2) long
    answer: Tensor  # (N,) long, index into places
    support: Tensor  # (N, 2) long: [index of "p took o", index of "p went l"]
    vocab: tuple[str, ...]
    places: tuple[str, ...]

    def decode(self, i: int) -> str:
        """The ``i``-th story, question and answer as text."""
        i = self.check_example(i)
        words = [" ".join(self.vocab[t] for t in s.tolist() if t) for s in self.story[i]]
        q = " ".join(self.vocab[t] for t in self.question[i].tolist())
        return " . ".join(words) + f" . {q} ? -> {self.places[int(self.answer[i])]}"


def two_fact_stories(
    n: int,
    n_people: int = 4,
    n_objects: int = 3,
    n_places: int = 5,
    generator: torch.Generator | None = None,
) -> Stories:
    """Generate ``n`` stories (see the module docstring).

    Every person goes to one uniformly drawn place; every object is taken by
    one uniformly drawn person; the sentences are shuffled; the question asks
    for one uniformly drawn object.

    Args:
        n: the number of stories.
        n_people: the number of people (<= 6).
        n_objects: the number of objects (<= 5).
        n_places: the number of places (<= 6).
        generator: the random generator.

    Returns:
        The batch as :class:`Stories`.

    Raises:
        ValueError: if a count exceeds the name lists.
    """
    check_integers("two_fact_stories", n_people=n_people, n_objects=n_objects, n_places=n_places)
    check_integers("two_fact_stories", minimum=0, n=n)
    if not (1 <= n_people <= len(PEOPLE) and 1 <= n_objects <= len(OBJECTS) and 2 <= n_places <= len(PLACES)):
        raise ValueError(
            f"need 1 <= n_people <= {len(PEOPLE)}, 1 <= n_objects <= {len(OBJECTS)}, "
            f"2 <= n_places <= {len(PLACES)}; got {n_people}, {n_objects}, {n_places}"
        )
    people, objects, places = PEOPLE[:n_people], OBJECTS[:n_objects], PLACES[:n_places]
    vocab = ("<pad>", "went", "took", "where") + people + objects + places
    idx = {w: i for i, w in enumerate(vocab)}
    g = generator
    place_of = torch.randint(n_places, (n, n_people), generator=g)  # where each person went
    holder = torch.randint(n_people, (n, n_objects), generator=g)  # who took each object
    asked = torch.randint(n_objects, (n,), generator=g)
    p_ids = torch.tensor([idx[p] for p in people])
    o_ids = torch.tensor([idx[o] for o in objects])
    l_ids = torch.tensor([idx[l] for l in places])
    went = torch.stack([p_ids.expand(n, -1), torch.full((n, n_people), idx["went"]), l_ids[place_of]], -1)
    took = torch.stack([p_ids[holder], torch.full((n, n_objects), idx["took"]), o_ids.expand(n, -1)], -1)
    sentences = torch.cat([went, took], 1)  # (n, n_people + n_objects, 3)
    order = torch.argsort(torch.rand(n, sentences.shape[1], generator=g), dim=1)
    story = torch.gather(sentences, 1, order[..., None].expand(-1, -1, 3))
    inv = torch.argsort(order, dim=1)  # original position -> shuffled position
    rows = torch.arange(n)
    who = holder[rows, asked]
    support = torch.stack([inv[rows, n_people + asked], inv[rows, who]], 1)
    question = torch.stack([torch.full((n,), idx["where"]), o_ids[asked]], 1)
    answer = place_of[rows, who]
    return Stories(story, question, answer, support, vocab, places)
