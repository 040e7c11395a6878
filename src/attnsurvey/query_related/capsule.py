"""§3.3.2 Multiplicity of queries: capsule-based attention, Eq. (43)-(45).

One capsule per class ``c = 1 .. d_y``; each capsule has three modules (Fig. 11):

* attention module, Eq. (43): its own learned query, ``e_{c,l} = q_c^T k_l``,
  aligned with a softmax and averaged into a context ``c_c``;
* probability module, Eq. (44): ``p_c = sigmoid(w_c^T c_c + b_c)``;
* reconstruction module, Eq. (45): ``r_c = p_c c_c``.

Training (Wang et al., 2018) combines a hinge loss on the probabilities with
a hinge loss on the reconstructions: the correct capsule's ``r_c`` should have
a large dot product with the instance representation ``f_bar`` (the unweighted
average of the feature vectors), every other capsule's a small one. This needs
``d_v == d_f``. Because every class has its own attention weights, one can
read off which feature vectors (words) each class relies on.

Shapes are batch-first rows; masks are boolean with ``True`` = may attend.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from .._checks import as_tensor, check_dim_equal, check_integers, check_min_rank, check_rank, check_weight, mean_or_zero
from ..attention import attend_scores
from ..catalog import catalogued
from ..masking import check_shared_key_mask, masked_mean, zero_masked

CHAPTER = "chapters/ch03_3_2_query_multiplicity.ipynb"


class CapsuleOutput(NamedTuple):
    """What the capsules return: ``p`` ``(..., d_y)``, ``r`` and ``c`` ``(..., d_y, d_v)``, ``a`` ``(..., d_y, n_f)``."""

    p: Tensor
    r: Tensor
    c: Tensor
    a: Tensor


@catalogued("eq43", title="Capsule attention score with a per-class learned query, e_{c,l} = q_c^T k_l")
def capsule_scores(K: Tensor, Q_caps: Tensor) -> Tensor:
    """Scores of every capsule for every key, Eq. (43): ``e_{c,l} = q_c^T k_l``.

    Args:
        K: keys.
        Q_caps: the capsules' learned queries, row ``c`` is capsule ``c``'s.

    Shape:
        K: ``(..., n_f, d_k)``; Q_caps: ``(d_y, d_k)``. Returns e: ``(..., d_y, n_f)``.

    Returns:
        The scores ``e``.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: unless Q_caps is ``(d_y, d_k)`` and K has at least 2 dims.
    """
    as_tensor(K, "K")
    check_min_rank(K, 2, "K", "(..., n_f, d_k)")
    check_rank(Q_caps, 2, "Q_caps", "(d_y, d_k)")
    check_weight(Q_caps, (Q_caps.shape[0], K.shape[-1]), "Q_caps", "(d_y, d_k)")
    return (K @ Q_caps.T).transpose(-1, -2)  # (..., n_f, d_y) -> (..., d_y, n_f)


@catalogued("eq44", title="Capsule probability module, p_c = sigmoid(w_c^T c_c + b_c)")
def capsule_probability(c: Tensor, W_p: Tensor, b_p: Tensor) -> Tensor:
    """Probability module, Eq. (44): ``p_c = sigmoid(w_c^T c_c + b_c)`` for every capsule.

    Args:
        c: capsule contexts.
        W_p: the weights, row ``c`` is ``w_c``.
        b_p: the biases.

    Shape:
        c: ``(..., d_y, d_v)``; W_p: ``(d_y, d_v)``; b_p: ``(d_y,)``. Returns p: ``(..., d_y)``.

    Returns:
        The capsule probabilities ``p``.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: on shape mismatches.
    """
    as_tensor(c, "c")
    check_min_rank(c, 2, "c", "(..., d_y, d_v)")
    d_y, d_v = c.shape[-2:]
    check_weight(W_p, (d_y, d_v), "W_p", "(d_y, d_v)")
    check_weight(b_p, (d_y,), "b_p", "(d_y,)")
    return torch.sigmoid((c * W_p).sum(-1) + b_p)


@catalogued("eq45", title="Capsule reconstruction module, r_c = p_c c_c")
def capsule_reconstruction(p: Tensor, c: Tensor) -> Tensor:
    """Reconstruction module, Eq. (45): ``r_c = p_c c_c``.

    Args:
        p: capsule probabilities.
        c: capsule contexts.

    Shape:
        p: ``(..., d_y)``; c: ``(..., d_y, d_v)``. Returns r: ``(..., d_y, d_v)``.

    Returns:
        The reconstructions ``r``.

    Raises:
        TypeError: if p or c is not a floating-point tensor.
        ValueError: if the two ``d_y`` differ.
    """
    as_tensor(p, "p")
    as_tensor(c, "c")
    check_dim_equal(p.shape[-1], c.shape[-2], "reconstruction r_c = p_c c_c", "d_y of p", "d_y of c")
    return p.unsqueeze(-1) * c


@catalogued("eq43")
def capsule_attention(
    K: Tensor, V: Tensor, Q_caps: Tensor, W_p: Tensor, b_p: Tensor, mask: Tensor | None = None
) -> CapsuleOutput:
    """All ``d_y`` capsules at once: Eq. (43), align, context, Eq. (44) and Eq. (45).

    A fully-masked example gives zero contexts and ``p_c = sigmoid(b_c)``.

    Args:
        K: keys.
        V: values.
        Q_caps: the capsules' learned queries.
        W_p: the probability weights.
        b_p: the probability biases.
        mask: boolean ``(..., n_f)``, ``True`` = may attend.

    Shape:
        K: ``(..., n_f, d_k)``; V: ``(..., n_f, d_v)``; Q_caps: ``(d_y, d_k)``;
        W_p: ``(d_y, d_v)``; b_p: ``(d_y,)``. Returns p: ``(..., d_y)``,
        r: ``(..., d_y, d_v)``, c: ``(..., d_y, d_v)``, a: ``(..., d_y, n_f)``.

    Returns:
        :class:`CapsuleOutput` ``(p, r, c, a)``.

    Raises:
        TypeError: if an input or weight is not a floating-point tensor.
        ValueError: on shape mismatches or a bad mask.
    """
    as_tensor(V, "V")
    check_min_rank(V, 2, "V", "(..., n_f, d_v)")
    e = capsule_scores(zero_masked(K, mask), Q_caps)
    check_dim_equal(K.shape[-2], V.shape[-2], "capsule attention", "n_f of K", "n_f of V")
    if mask is not None:  # the same positions for every capsule; checked as the caller passed it
        mask = check_shared_key_mask(mask, e.shape)
    c, a = attend_scores(e, V, mask)  # a (..., d_y, n_f), c (..., d_y, d_v)
    p = capsule_probability(c, W_p, b_p)
    return CapsuleOutput(p, capsule_reconstruction(p, c), c, a)


@catalogued(
    "extra:capsule-joint-loss",
    title="Capsule joint loss: probability hinge + reconstruction hinge against the mean feature vector",
)
def capsule_loss(
    p: Tensor, r: Tensor, f_bar: Tensor, y: Tensor, lam: float = 1.0, margin: float = 1.0
) -> tuple[Tensor, Tensor, Tensor]:
    """The joint capsule loss ``L = J + lam * U`` (Wang et al., 2018), averaged over the batch.

    * probability loss ``J = max(0, margin - p_y + sum_{c != y} p_c)``
    * reconstruction loss ``U = max(0, margin - f_bar . r_y + sum_{c != y} f_bar . r_c)``

    (The authors' released code sums separate hinges ``max(0, margin - x_y + x_c)``
    over ``c != y`` and divides by the number of classes instead; with two classes
    that is this loss halved.)

    Args:
        p: capsule probabilities.
        r: capsule reconstructions.
        f_bar: the unweighted average of the feature vectors (needs ``d_v == d_f``).
        y: class indices.
        lam: the weight ``lam`` of the reconstruction loss.
        margin: the hinge margin.

    Shape:
        p: ``(B, d_y)``; r: ``(B, d_y, d_v)``; f_bar: ``(B, d_f)``; y: ``(B,)``.
        Returns three scalars ``()``.

    Returns:
        ``(L, J, U)`` (0 for an empty batch).

    Raises:
        TypeError: if p, r or f_bar is not a floating-point tensor.
        ValueError: if ``d_v != d_f``, y is not integer indices of shape ``(B,)``,
            or a label is out of range.
    """
    as_tensor(p, "p")
    as_tensor(r, "r")
    as_tensor(f_bar, "f_bar")
    d_y = p.shape[-1]
    check_dim_equal(r.shape[-1], f_bar.shape[-1], "the reconstruction loss f_bar . r_c", "d_v", "d_f")
    if y.dtype not in (torch.int64, torch.int32) or y.shape != p.shape[:-1]:
        raise ValueError(
            f"y must be integer class indices of shape {tuple(p.shape[:-1])}, got {y.dtype} {tuple(y.shape)}"
        )
    if (y < 0).any() or (y >= d_y).any():
        raise ValueError(f"labels y must lie in [0, d_y={d_y}), got {y.tolist()}")
    sign = 1.0 - 2.0 * torch.nn.functional.one_hot(y, d_y).to(p.dtype)  # -1 for the true class, +1 otherwise
    J = mean_or_zero(torch.clamp(margin + (sign * p).sum(-1), min=0))
    dots = (r @ f_bar.unsqueeze(-1)).squeeze(-1)  # (B, d_y): f_bar . r_c
    U = mean_or_zero(torch.clamp(margin + (sign * dots).sum(-1), min=0))
    return J + lam * U, J, U


@catalogued("eq43", "extra:capsule-joint-loss")
class CapsuleAttention(nn.Module):
    """One capsule per class over feature vectors, Eq. (43)-(45).

    Keys ``K = F W_K^T`` (``W_K`` ``(d_k, d_f)``; the identity when ``d_k=None``),
    values ``V = F`` so that ``d_v = d_f`` as the reconstruction loss requires.
    Parameters: ``Q_caps`` ``(d_y, d_k)``, ``W_p`` ``(d_y, d_f)``, ``b_p`` ``(d_y,)``.
    ``forward(F, mask=None)`` with mask boolean ``(..., n_f)``, ``True`` = may
    attend, returns a :class:`CapsuleOutput`;
    ``loss(out, F, y, mask=None, lam=1.0)`` the joint loss ``(L, J, U)``.

    Args:
        d_f: the feature size.
        d_y: the number of classes (capsules).
        d_k: the key size; None uses the features as keys.

    Shape:
        F: ``(..., n_f, d_f)``. Returns p: ``(..., d_y)``, r and c: ``(..., d_y, d_f)``,
        a: ``(..., d_y, n_f)``.

    Raises:
        ValueError: if a size is not an integer >= 1; in ``forward``, as :func:`capsule_attention`.
    """

    def __init__(self, d_f: int, d_y: int, d_k: int | None = None) -> None:
        check_integers("CapsuleAttention", minimum=1, d_f=d_f, d_y=d_y)
        check_integers("CapsuleAttention", minimum=1, allow_none=True, d_k=d_k)
        super().__init__()
        self.W_K = None if d_k is None else nn.Linear(d_f, d_k, bias=False)
        d_k = d_f if d_k is None else d_k
        self.Q_caps = nn.Parameter(torch.randn(d_y, d_k) / d_k**0.5)
        self.W_p = nn.Parameter(torch.randn(d_y, d_f) / d_f**0.5)
        self.b_p = nn.Parameter(torch.zeros(d_y))

    def forward(self, F: Tensor, mask: Tensor | None = None) -> CapsuleOutput:
        F = zero_masked(as_tensor(F, "F"), mask)  # a NaN in a padded slot reaches no W_K gradient
        K = F if self.W_K is None else self.W_K(F)
        return capsule_attention(K, F, self.Q_caps, self.W_p, self.b_p, mask)

    @staticmethod
    def loss(
        out: CapsuleOutput, F: Tensor, y: Tensor, mask: Tensor | None = None, lam: float = 1.0
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The joint loss ``(L, J, U)`` of :func:`capsule_loss` for ``out = self(F, mask)``.

        F: ``(B, n_f, d_f)``; y: ``(B,)``; mask: boolean ``(B, n_f)``, ``True`` =
        may attend (the same mask as the forward pass). ``f_bar`` is the mean of
        the feature vectors over the allowed positions (0 for a fully-masked example).
        """
        f_bar = masked_mean(F, mask)  # the mean feature vector over real positions (0 if none)
        return capsule_loss(out.p, out.r, f_bar, y, lam)
