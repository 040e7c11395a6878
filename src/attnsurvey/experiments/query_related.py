"""Task models of the query-related chapters (§3.3.1, §3.3.2): pooling baselines,
a learned-query classifier and the capsule classifier.

Shapes: B batch, n tokens, n_f feature vectors, d_f feature size.
"""

from __future__ import annotations

from torch import Tensor, nn

from .._checks import as_tensor, check_index_range, check_integers
from ..catalog import catalogued
from ..query_related.capsule import CapsuleAttention, CapsuleOutput
from ..query_related.types import LearnedQueryAttention, mean_pool


class MeanPoolClassifier(nn.Module):
    """Baseline without attention: average the feature vectors, then an MLP.

    It returns no weights, so it can stand in wherever an attention classifier
    returns ``(logits, a)``.

    Args:
        d_f: the feature size.
        n_classes: the number of classes.
        hidden: the hidden width of the MLP.

    Shape:
        - F: ``(..., n_f, d_f)``.
        - Output: ``(logits (..., n_classes), None)``.

    Raises:
        ValueError: for a size that is not an integer >= 1.
    """

    def __init__(self, d_f: int, n_classes: int, hidden: int = 32) -> None:
        super().__init__()
        check_integers("MeanPoolClassifier", minimum=1, d_f=d_f, n_classes=n_classes, hidden=hidden)
        self.out = nn.Sequential(nn.Linear(d_f, hidden), nn.Tanh(), nn.Linear(hidden, n_classes))

    def forward(self, F: Tensor) -> tuple[Tensor, None]:
        as_tensor(F, "F")
        return self.out(mean_pool(F)), None


class LearnedQueryClassifier(nn.Module):
    """Eq. (34) pooling with one learned query, then a linear output layer.

    Args:
        d_f: the feature size.
        n_classes: the number of classes.

    Shape:
        - F: ``(..., n_f, d_f)``.
        - Output: ``(logits (..., n_classes), a (..., n_f))``.

    Raises:
        ValueError: for a size that is not an integer >= 1.
    """

    def __init__(self, d_f: int, n_classes: int) -> None:
        super().__init__()
        check_integers("LearnedQueryClassifier", minimum=1, d_f=d_f, n_classes=n_classes)
        self.pool = LearnedQueryAttention(d_f)
        self.out = nn.Linear(d_f, n_classes)

    def forward(self, F: Tensor) -> tuple[Tensor, Tensor]:
        as_tensor(F, "F")
        c, a = self.pool(F)
        return self.out(c), a


class MeanPoolTokenClassifier(nn.Module):
    """Baseline without attention over token ids: averaged embeddings (padding id 0 ignored), then a linear layer.

    Args:
        vocab_size: the number of token ids.
        d: the embedding width.
        n_classes: the number of classes.

    Shape:
        - tokens: ``(B, n)`` ids.
        - Output: logits ``(B, n_classes)``.

    Raises:
        ValueError: for a size that is not an integer >= 1, or token ids outside the vocabulary.
    """

    def __init__(self, vocab_size: int, d: int, n_classes: int = 2) -> None:
        super().__init__()
        check_integers("MeanPoolTokenClassifier", minimum=1, vocab_size=vocab_size, d=d, n_classes=n_classes)
        self.embed = nn.Embedding(vocab_size, d, padding_idx=0)
        self.out = nn.Linear(d, n_classes)

    def forward(self, tokens: Tensor) -> Tensor:
        check_index_range(tokens, self.embed.num_embeddings, "tokens", "MeanPoolTokenClassifier (vocab token ids)")
        return self.out(mean_pool(self.embed(tokens), tokens != 0))


@catalogued("extra:capsule-joint-loss")
class CapsuleClassifier(nn.Module):
    """Word embeddings (the feature model) followed by :class:`CapsuleAttention`.

    The predicted class is ``argmax p``. With ``attend=False`` the capsule queries
    are fixed at zero, so every capsule's weights are uniform over the real tokens
    (``c_c`` is the mean embedding): the same model, loss and probability and
    reconstruction modules without attention, a baseline that differs only in Eq. (43).

    Args:
        vocab_size: the number of token ids (0 = padding).
        d: the embedding width.
        d_y: the number of classes (capsules).
        attend: learn the capsule queries (True) or fix them at zero (False).

    Shape:
        - tokens: ``(B, n)`` ids.
        - Output: ``(CapsuleOutput, F (B, n, d), mask (B, n))``.

    Raises:
        IndexError: for a token id outside ``[0, vocab_size)`` (from the embedding).
    """

    def __init__(self, vocab_size: int, d: int, d_y: int, attend: bool = True) -> None:
        super().__init__()
        check_integers("CapsuleClassifier", minimum=1, vocab_size=vocab_size, d=d, d_y=d_y)
        self.embed = nn.Embedding(vocab_size, d, padding_idx=0)
        self.capsules = CapsuleAttention(d, d_y)
        if not attend:
            self.capsules.Q_caps.data.zero_()
            self.capsules.Q_caps.requires_grad_(False)

    def forward(self, tokens: Tensor) -> tuple[CapsuleOutput, Tensor, Tensor]:
        check_index_range(tokens, self.embed.num_embeddings, "tokens", "CapsuleClassifier (vocab token ids)")
        mask = tokens != 0
        F = self.embed(tokens)
        return self.capsules(F, mask), F, mask

    def loss(self, tokens: Tensor, y: Tensor, lam: float = 1.0) -> Tensor:
        out, F, mask = self(tokens)
        return self.capsules.loss(out, F, y, mask, lam)[0]
