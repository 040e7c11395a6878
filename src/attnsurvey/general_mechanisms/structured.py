"""Structured attention: attention weights as marginals of a linear-chain CRF.

Softmax and sparsemax treat the choice of each feature vector independently
of its neighbours. Structured attention (Kim et al., 2017; the NLP review's
"structure attention", nndl 8.2.1.4) puts a binary selection variable
``z_l in {0, 1}`` on every position and couples neighbours with a linear-chain
conditional random field:

    p(z_1..z_n) = exp( sum_l z_l e_l + sum_{l>=2} A[z_{l-1}, z_l] ) / Z

where ``e_l`` are the attention scores (unary potentials of selecting ``l``)
and ``A`` is a ``2 x 2`` transition matrix (``A[1, 1] > 0`` rewards selecting
contiguous runs). The attention weight of position ``l`` is the marginal
``a_l = p(z_l = 1)``, computed exactly with the forward-backward algorithm in
log space, and the context is ``c = sum_l a_l v_l`` (Eq. 24). The weights are
probabilities of *independent events*, so they do not sum to 1.

Masks are boolean, ``True`` = may attend: a masked position is forced to
``z_l = 0`` and gets weight 0.

Shapes: scores ``e`` ``(..., n_f)``, transitions ``A`` ``(2, 2)``, values ``V``
``(..., n_f, d_v)``; ``...`` any batch dimensions.
"""

from __future__ import annotations

import itertools

import torch
from torch import Tensor, nn

from .._checks import as_tensor, check_dim_equal, check_integers, check_min_rank, check_nonempty, check_weight
from ..attention import context
from ..catalog import catalogued
from ..masking import check_mask, zero_masked
from .scoring import make_score

CHAPTER = "chapters/ch03_2_2_attention_alignment.ipynb"


def _unary(e: Tensor, A: Tensor, mask: Tensor | None) -> Tensor:
    """Log-potentials per position and state, ``(..., n, 2)``: 0 for z=0, e_l for z=1."""
    as_tensor(e, "e")
    check_min_rank(e, 1, "e", "(..., n_f)")
    check_nonempty(e, -1, "e", "n_f")
    check_weight(A, (2, 2), "A (CRF transition)", "(2, 2)")
    if A.dtype != e.dtype:
        raise ValueError(f"e and A must share a dtype, got e={e.dtype}, A={A.dtype}")
    on = e
    if mask is not None:
        check_mask(mask, e.shape)
        on = e.masked_fill(~mask.expand(e.shape), float("-inf"))
    return torch.stack([torch.zeros_like(e), on], dim=-1)


def _forward_backward(u: Tensor, A: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Log forward messages alpha, backward messages beta ``(..., n, 2)`` and log Z ``(...,)``."""
    n = u.shape[-2]
    alphas = [u[..., 0, :]]
    for l in range(1, n):
        # alpha_l(s) = u_l(s) + logsumexp_{s'} (alpha_{l-1}(s') + A[s', s])
        prev = alphas[-1].unsqueeze(-1) + A  # (..., s', s)
        alphas.append(u[..., l, :] + torch.logsumexp(prev, dim=-2))
    betas = [torch.zeros_like(u[..., 0, :])]
    for l in range(n - 2, -1, -1):
        # beta_l(s) = logsumexp_{s'} (A[s, s'] + u_{l+1}(s') + beta_{l+1}(s'))
        nxt = A + (u[..., l + 1, :] + betas[0]).unsqueeze(-2)  # (..., s, s')
        betas.insert(0, torch.logsumexp(nxt, dim=-1))
    alpha = torch.stack(alphas, dim=-2)
    beta = torch.stack(betas, dim=-2)
    log_Z = torch.logsumexp(alpha[..., -1, :], dim=-1)
    return alpha, beta, log_Z


@catalogued("extra:structured-attention")
def crf_log_partition(e: Tensor, A: Tensor, mask: Tensor | None = None) -> Tensor:
    """``log Z`` of the binary linear-chain CRF (forward algorithm, log space).

    Its gradient with respect to e is the vector of marginals.

    Args:
        e: scores (unary potential of ``z_l = 1``).
        A: transition log-potentials, ``A[i, j]`` for ``z_{l-1} = i, z_l = j``.
        mask: boolean broadcastable to e, ``True`` = may attend (``False`` forces ``z_l = 0``).

    Shape:
        e: ``(..., n_f)``; A: ``(2, 2)``. Returns ``(...,)``.

    Returns:
        ``log Z`` of every row.

    Raises:
        TypeError: for non-float scores.
        ValueError: for empty scores, a wrong A shape, e and A of different
            dtypes, or a bad mask.
    """
    as_tensor(e, "e")
    work = torch.float32 if e.dtype in (torch.float16, torch.bfloat16) else e.dtype
    return _forward_backward(_unary(e, A, mask).to(work), A.to(work))[2].to(e.dtype)


@catalogued(
    "extra:structured-attention",
    title="Structured attention: marginals of a binary linear-chain CRF (forward-backward)",
)
def crf_marginals(e: Tensor, A: Tensor, mask: Tensor | None = None) -> Tensor:
    """Structured attention weights ``a_l = p(z_l = 1)`` by forward-backward in log space.

    ``a_l = exp(alpha_l(1) + beta_l(1) - log Z)``. Stable for scores up to
    +-1e4. float16/bfloat16 inputs are computed in float32 and cast back.

    Args:
        e: scores (unary potential of ``z_l = 1``).
        A: transition log-potentials.
        mask: boolean broadcastable to e, ``True`` = may attend; a masked
            position gets weight 0, a fully-masked row all zeros.

    Shape:
        e: ``(..., n_f)``; A: ``(2, 2)``. Returns ``(..., n_f)``.

    Returns:
        The marginals, in ``[0, 1]``.

    Raises:
        TypeError: for non-float scores.
        ValueError: for empty scores, a wrong A shape, e and A of different
            dtypes, or a bad mask.
    """
    u = _unary(e, A, mask)
    work = torch.float32 if e.dtype in (torch.float16, torch.bfloat16) else e.dtype  # log-space sums need range
    alpha, beta, log_Z = _forward_backward(u.to(work), A.to(work))
    return torch.exp(alpha[..., 1] + beta[..., 1] - log_Z.unsqueeze(-1)).to(e.dtype)


def crf_brute_force(e: Tensor, A: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Oracle: ``(log Z, marginals)`` by enumerating all ``2^n_f`` selections (n_f <= 14).

    Args:
        e: scores (unary potential of ``z_l = 1``).
        A: transition log-potentials.
        mask: boolean broadcastable to e, ``True`` = may attend.

    Shape:
        e: ``(..., n_f)``; A: ``(2, 2)``. Returns log_Z: ``(...,)``, marginals: ``(..., n_f)``.

    Returns:
        ``(log Z, marginals)``.

    Raises:
        TypeError: for non-float scores.
        ValueError: for empty scores, a wrong A shape, e and A of different
            dtypes, or a bad mask; or ``n_f > 14``.
    """
    u = _unary(e, A, mask)
    n = u.shape[-2]
    if n > 14:
        raise ValueError(f"brute-force enumeration is limited to n_f <= 14, got n_f={n}")
    Z = torch.tensor(list(itertools.product([0, 1], repeat=n)), dtype=torch.long)  # (2^n, n)
    # log-potential of each assignment: unary terms + transitions
    un = u.unsqueeze(-3).expand(*u.shape[:-2], Z.shape[0], n, 2)
    idx = Z.expand(*u.shape[:-2], *Z.shape).unsqueeze(-1)
    score = un.gather(-1, idx).squeeze(-1).sum(-1)
    if n > 1:
        score = score + A[Z[:, :-1], Z[:, 1:]].sum(-1)
    log_Z = torch.logsumexp(score, dim=-1)
    probs = torch.exp(score - log_Z.unsqueeze(-1))  # (..., 2^n)
    marg = probs @ Z.to(probs.dtype)
    return log_Z, marg


@catalogued("extra:structured-attention")
def structured_attend(e: Tensor, A: Tensor, V: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Structured attention: CRF marginals as weights, then ``c = sum_l a_l v_l`` (Eq. 24).

    Args:
        e: scores.
        A: transition log-potentials.
        V: values.
        mask: boolean broadcastable to e, ``True`` = may attend (a fully-masked
            row gives ``a = 0``, ``c = 0``).

    Shape:
        e: ``(..., n_f)``; A: ``(2, 2)``; V: ``(..., n_f, d_v)``.
        Returns c: ``(..., d_v)``, a: ``(..., n_f)``.

    Returns:
        ``(c, a)``: the context and the weights.

    Raises:
        TypeError: if e, A or V is not a floating-point tensor.
        ValueError: for empty scores, a wrong A shape, e and A of different
            dtypes, or a bad mask; or on a shape mismatch of the weights and V.
    """
    as_tensor(e, "e"), as_tensor(A, "A"), as_tensor(V, "V")
    a = crf_marginals(e, A, mask)
    check_min_rank(V, 2, "V", "(..., n_f, d_v)")
    check_dim_equal(a.shape[-1], V.shape[-2], "context (Eq. 24)", "n_f of a", "n_f of V")
    return context(a.unsqueeze(-2), V).squeeze(-2), a


@catalogued("extra:structured-attention")
class StructuredAttention(nn.Module):
    """Structured attention with a learned score (Table II) and transition matrix ``A`` ``(2, 2)``.

    ``forward(q, K, V, mask=None)`` with mask boolean ``(..., n_f)`` (``True`` =
    may attend) returns ``(c, a)``; a masked key holding NaN/Inf reaches no
    output and no gradient (the score's included).

    Args:
        d_q: the query size.
        d_k: the key size.
        score: a Table II name (default ``"general"``).

    Shape:
        q: ``(..., d_q)``; K: ``(..., n_f, d_k)``; V: ``(..., n_f, d_v)``.
        Returns c: ``(..., d_v)``, a: ``(..., n_f)``.

    Raises:
        ValueError: if a size is not an integer >= 1 or ``score`` is unknown; in ``forward``, as
            :func:`structured_attend`.
    """

    def __init__(self, d_q: int, d_k: int, score: str = "general") -> None:
        check_integers("StructuredAttention", minimum=1, d_q=d_q, d_k=d_k)
        super().__init__()
        self.score = make_score(score, d_q, d_k)
        self.A = nn.Parameter(torch.zeros(2, 2))

    def forward(self, q: Tensor, K: Tensor, V: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        as_tensor(q, "q"), as_tensor(K, "K"), as_tensor(V, "V")
        e = self.score(q.unsqueeze(-2), zero_masked(K, mask)).squeeze(-2)  # padded keys inert in gradients too
        return structured_attend(e, self.A.to(e.dtype), V, mask)
