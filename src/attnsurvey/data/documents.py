"""Synthetic documents whose label is decided by one sentence (§3.1.2 experiments).

A document is ``n_S`` sentences of at most ``n_w`` tokens, stored as a padded
long tensor ``(n_docs, n_S, n_w)`` with token 0 as padding. Every real
sentence holds exactly one *polarity* token (``good*`` or ``bad*``) and some
filler tokens. One sentence, the *deciding* sentence, also holds the marker
token ``KEY``; the document's label is the polarity of that sentence
(1 = good, 0 = bad). The other sentences carry polarity tokens of random
class, so counting polarity over the whole document is a weak cue: the model
has to find the sentence with the marker and read the polarity *in that
sentence*. This is where sentence structure matters and a flat bag of words
does not have it.

Trailing sentences can be empty (all padding) to exercise the masks.

Shapes: N documents, n_S sentences per document, n_w words per sentence.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .._checks import check_integers
from ._rows import Rows

PAD, KEY = 0, 1


@dataclass
class Documents(Rows):
    """A batch of synthetic documents.

    Attributes:
        tokens: ``(N, n_S, n_w)`` long (0 = padding).
        word_mask: ``(N, n_S, n_w)`` bool (True = real word).
        labels: ``(N,)`` long in {0, 1}.
        key_sentence: ``(N,)`` the index of the deciding sentence.
        vocab: token names.
    """

    tokens: Tensor
    word_mask: Tensor
    labels: Tensor
    key_sentence: Tensor
    vocab: list[str]

    def words(self, doc: int) -> list[list[str]]:
        """Token names of document ``doc``, sentence by sentence, padding left out."""
        doc = self.check_example(doc, "doc")
        return [[self.vocab[t] for t in sent.tolist() if t != PAD] for sent in self.tokens[doc]]


def document_vocab(n_polarity: int, n_filler: int) -> list[str]:
    """Token names: ``<pad>``, ``KEY``, ``good0..``, ``bad0..``, ``w0..``.

    Args:
        n_polarity: the number of ``good`` and of ``bad`` tokens.
        n_filler: the number of filler tokens ``w``.

    Returns:
        The names, index = token id.

    Raises:
        ValueError: ``n_polarity`` or ``n_filler`` is not an integer >= 0.
    """
    check_integers("document_vocab", minimum=0, n_polarity=n_polarity, n_filler=n_filler)
    return (
        ["<pad>", "KEY"]
        + [f"good{i}" for i in range(n_polarity)]
        + [f"bad{i}" for i in range(n_polarity)]
        + [f"w{i}" for i in range(n_filler)]
    )


def make_documents(
    n_docs: int,
    n_sentences: int = 5,
    n_words: int = 6,
    min_words: int = 3,
    min_sentences: int | None = None,
    n_polarity: int = 3,
    n_filler: int = 12,
    generator: torch.Generator | None = None,
) -> Documents:
    """Sample ``n_docs`` documents whose label is decided by the sentence holding ``KEY``.

    Each document has between ``min_sentences`` and ``n_sentences`` real sentences
    (the rest are all padding); each real sentence has between ``min_words`` and
    ``n_words`` tokens in random order: one polarity token, the marker in the
    deciding sentence, fillers otherwise.

    Args:
        n_docs: the number of documents ``N``.
        n_sentences: the sentences per document ``n_S`` (padded).
        n_words: the words per sentence ``n_w`` (padded).
        min_words: the fewest words of a real sentence (>= 2).
        min_sentences: the fewest real sentences (None: ``n_sentences``).
        n_polarity: the number of ``good`` and of ``bad`` tokens.
        n_filler: the number of filler tokens.
        generator: the random generator.

    Returns:
        The batch as :class:`Documents`.

    Raises:
        ValueError: for sizes that cannot hold a sentence (``min_sentences`` outside
            ``[1, n_S]`` or ``min_words`` outside ``[2, n_w]``), a negative ``n_docs``, or
            ``n_polarity`` / ``n_filler`` below 1 (every sentence draws a polarity token, every
            sentence but the deciding one fillers).
    """
    check_integers("make_documents", n_sentences=n_sentences, n_words=n_words, min_words=min_words)
    check_integers("make_documents", allow_none=True, min_sentences=min_sentences)
    check_integers("make_documents", minimum=0, n_docs=n_docs)
    # every sentence draws both kinds
    check_integers("make_documents", minimum=1, n_polarity=n_polarity, n_filler=n_filler)
    min_sentences = n_sentences if min_sentences is None else min_sentences
    if not 1 <= min_sentences <= n_sentences:
        raise ValueError(f"need 1 <= min_sentences <= n_S, got min_sentences={min_sentences}, n_S={n_sentences}")
    if not 2 <= min_words <= n_words:
        raise ValueError(f"need 2 <= min_words <= n_w (room for KEY and a polarity token), got {min_words}, {n_words}")
    g = generator
    vocab = document_vocab(n_polarity, n_filler)
    good0, bad0, filler0 = 2, 2 + n_polarity, 2 + 2 * n_polarity
    tokens = torch.zeros(n_docs, n_sentences, n_words, dtype=torch.long)
    labels = torch.randint(0, 2, (n_docs,), generator=g)
    n_real = torch.randint(min_sentences, n_sentences + 1, (n_docs,), generator=g)
    key = (torch.rand(n_docs, generator=g) * n_real).long()
    lengths = torch.randint(min_words, n_words + 1, (n_docs, n_sentences), generator=g)
    polarity = torch.randint(0, 2, (n_docs, n_sentences), generator=g)
    polarity[torch.arange(n_docs), key] = labels
    which = torch.randint(0, n_polarity, (n_docs, n_sentences), generator=g)
    fillers = torch.randint(filler0, filler0 + n_filler, (n_docs, n_sentences, n_words), generator=g)
    order = torch.rand(n_docs, n_sentences, n_words, generator=g).argsort(-1)
    for d in range(n_docs):
        for s in range(int(n_real[d])):
            L = int(lengths[d, s])
            sent = fillers[d, s, :L].clone()
            sent[0] = (good0 if polarity[d, s] == 1 else bad0) + which[d, s]
            if s == key[d]:
                sent[1] = KEY
            perm = order[d, s][order[d, s] < L]
            tokens[d, s, :L] = sent[perm]
    return Documents(tokens, tokens != PAD, labels, key, vocab)
