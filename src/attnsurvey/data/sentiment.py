"""Synthetic classification tasks where a few tokens decide the label.

* :func:`keyword_features` (§3.3.1): fixed feature vectors, one *key* token per
  sequence carries the class; the others are distractors that carry random
  classes. Averaging the features mixes the key with the distractors; a query
  that finds the key recovers the class exactly.
* :func:`sentiment_reviews` (§3.3.2, capsules): short "reviews" of neutral
  filler words with one to three words of the label's polarity (positive or
  negative). The ground truth of which token is positive, negative or
  neutral is returned, so one can check where each class capsule looks.

Shapes: N (or n) examples, L tokens per review, d_f feature size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .._checks import check_integers
from ._rows import Rows

NEUTRAL = ("the", "movie", "was", "a", "plot", "actor", "and", "it", "film", "scene", "story", "music")
NEGATIVE = ("bad", "awful", "dull", "boring", "weak")
POSITIVE = ("good", "great", "superb", "fun", "moving")
CLASSES = ("negative", "positive")


def keyword_features(
    n: int,
    n_tokens: int = 12,
    n_classes: int = 4,
    noise: float = 0.1,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Sequences of fixed feature vectors in which one key token carries the class.

    Every feature vector is ``[one_hot(class), is_key] + noise`` of size
    ``d_f = n_classes + 1``. Each sequence has one key token (``is_key = 1``)
    of the label's class at a random position; the ``n_tokens - 1`` others are
    distractors (``is_key = 0``) of uniformly random classes.

    Args:
        n: the number of sequences.
        n_tokens: tokens per sequence (>= 2).
        n_classes: the number of classes (>= 2).
        noise: the standard deviation of the noise added to every feature vector.
        generator: the random generator.

    Shape:
        - Output: ``(F (n, n_tokens, d_f), y (n,), key positions (n,))``.

    Returns:
        ``(F, y, key positions)``.

    Raises:
        ValueError: for ``n_tokens < 2`` or ``n_classes < 2``.
    """
    check_integers("keyword_features", n_tokens=n_tokens, n_classes=n_classes)
    check_integers("keyword_features", minimum=0, n=n)
    if n_tokens < 2 or n_classes < 2:
        raise ValueError(f"need n_tokens >= 2 and n_classes >= 2, got {n_tokens}, {n_classes}")
    g = generator
    y = torch.randint(n_classes, (n,), generator=g)
    classes = torch.randint(n_classes, (n, n_tokens), generator=g)
    key = torch.randint(n_tokens, (n,), generator=g)
    rows = torch.arange(n)
    classes[rows, key] = y
    is_key = torch.zeros(n, n_tokens)
    is_key[rows, key] = 1.0
    F = torch.cat([torch.nn.functional.one_hot(classes, n_classes).float(), is_key[..., None]], -1)
    F = F + noise * torch.randn(F.shape, generator=g)
    return F, y, key


@dataclass
class Reviews(Rows):
    """Token ids of synthetic reviews, labels, and each token's polarity.

    Attributes:
        tokens: ``(N, L)`` long token ids.
        labels: ``(N,)`` long: 0 negative, 1 positive.
        polarity: ``(N, L)`` long: -1 neutral, 0 negative word, 1 positive word.
        vocab: the token names, index = token id.
    """

    tokens: Tensor  # (N, L) long
    labels: Tensor  # (N,) long: 0 negative, 1 positive
    polarity: Tensor  # (N, L) long: -1 neutral, 0 negative word, 1 positive word
    vocab: tuple[str, ...]

    def decode(self, i: int) -> list[str]:
        return [self.vocab[t] for t in self.tokens[self.check_example(i)].tolist()]


def sentiment_vocab() -> tuple[str, ...]:
    """The vocabulary of :func:`sentiment_reviews`: padding, neutral, negative, positive words.

    Returns:
        The token names, index = token id.
    """
    return ("<pad>",) + NEUTRAL + NEGATIVE + POSITIVE


def sentiment_reviews(n: int, length: int = 10, generator: torch.Generator | None = None) -> Reviews:
    """Generate ``n`` reviews of ``length`` tokens whose polar words give the label.

    Each review holds ``m`` words of its label's polarity (``m`` uniform in
    {1, 2, 3}) and ``length - m`` neutral filler words; positions are shuffled.

    Args:
        n: the number of reviews.
        length: tokens per review (>= 5).
        generator: the random generator.

    Returns:
        The reviews as :class:`Reviews`.

    Raises:
        ValueError: if ``length < 5``.
    """
    check_integers("sentiment_reviews", length=length)
    check_integers("sentiment_reviews", minimum=0, n=n)
    if length < 5:
        raise ValueError(f"a review needs length >= 5 tokens, got length={length}")
    g = generator
    labels = torch.randint(2, (n,), generator=g)
    m = torch.randint(1, 4, (n,), generator=g)
    pol = torch.full((n, length), -1, dtype=torch.long)
    slot = torch.arange(length)
    pol = torch.where(slot < m[:, None], labels[:, None], pol)
    return _shuffled_reviews(pol, labels, g)


def mixed_reviews(n: int, length: int = 16, generator: torch.Generator | None = None) -> Reviews:
    """Generate ``n`` reviews with polar words of BOTH polarities; the majority gives the label.

    Each review holds ``m`` words of its label's polarity (``m`` uniform in
    {2, 3}), ``m - 1`` words of the other polarity and ``length - 2m + 1``
    neutral filler words; positions are shuffled. Unlike
    :func:`sentiment_reviews`, a review's polar words do not all point to its
    label, so one can measure whether a class's capsule reads its own class's
    words within the same review.

    Args:
        n: the number of reviews.
        length: tokens per review (>= 6).
        generator: the random generator.

    Returns:
        The reviews as :class:`Reviews`.

    Raises:
        ValueError: if ``length < 6``.
    """
    check_integers("mixed_reviews", length=length)
    check_integers("mixed_reviews", minimum=0, n=n)
    if length < 6:
        raise ValueError(f"a mixed review needs length >= 6 tokens, got length={length}")
    g = generator
    labels = torch.randint(2, (n,), generator=g)
    m = torch.randint(2, 4, (n,), generator=g)
    slot = torch.arange(length)
    pol = torch.full((n, length), -1, dtype=torch.long)
    pol = torch.where(slot < m[:, None], labels[:, None], pol)
    pol = torch.where((slot >= m[:, None]) & (slot < 2 * m[:, None] - 1), 1 - labels[:, None], pol)
    return _shuffled_reviews(pol, labels, g)


def _shuffled_reviews(pol: Tensor, labels: Tensor, g: torch.Generator | None) -> Reviews:
    """Shuffle the polarity slots ``(n, L)`` of every review, then draw a word of each slot's kind."""
    n, length = pol.shape
    base = {"neutral": 1, "negative": 1 + len(NEUTRAL), "positive": 1 + len(NEUTRAL) + len(NEGATIVE)}
    order = torch.argsort(torch.rand(n, length, generator=g), dim=1)
    pol = torch.gather(pol, 1, order)
    word = torch.randint(len(NEGATIVE), (n, length), generator=g)
    filler = torch.randint(len(NEUTRAL), (n, length), generator=g)
    tokens = torch.where(
        pol == -1,
        base["neutral"] + filler,
        torch.where(pol == 0, base["negative"] + word, base["positive"] + word),
    )
    return Reviews(tokens, labels, pol, sentiment_vocab())
