"""§4.2 Intrinsic evaluation: judging the attention weights themselves, Eq. (46).

* :func:`alignment_error_rate`  AER of a hard alignment against sure and
  possible gold links (Och & Ney 2003), with :func:`links_to_matrix` and
  :func:`hard_alignment` to build the link sets.
* :func:`alignment_loss`, :func:`supervised_attention_loss`  supervised
  attention: task loss + lambda * cross-entropy of the weights against gold alignments.
* :func:`attention_correctness`  Eq. (46): the weight mass on the ground-truth regions.
* :func:`spearman`, :func:`kendall_tau` (with :func:`rankdata`)  rank
  correlation between model and human attention maps.
* :func:`gradient_importance`, :func:`js_divergence`, :func:`total_variation`,
  :func:`adversarial_attention`, :func:`permuted_attention`,
  :func:`permutation_output_change`  the "is attention explanation?" tests
  of Jain & Wallace (2019), discussed by Wiegreffe & Pinter (2019).

Weights ``a`` have the survey's shape ``(..., n_q, n_f)`` (one row per query);
alignment matrices are boolean ``(..., n_tgt, n_src)`` with one row per target
(query) position and one column per source (feature) position.

Shapes: ``...`` leading batch axes, B batch, n_q queries, n_f feature vectors, n_tgt target and
n_src source positions, d_y output size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F_
from torch import Tensor

from .._checks import as_tensor, check_integers, check_min_rank, check_positive, check_same_shape
from ..attention import align_scores
from ..catalog import catalogued
from ..masking import check_boolean
from ..numeric_env import portable_adam, portable_sqrt
from ..training import cross_entropy_mean

CHAPTER = "chapters/ch04_2_intrinsic_evaluation.ipynb"

#: Dtypes too narrow for the small ``eps`` of the log-based measures: computed in float32, cast back.
_HALF = (torch.float16, torch.bfloat16)

Head = Callable[[Tensor, Tensor | None], tuple[Tensor, Tensor]]


# --------------------------------------------------------------------------- Eq. (46)


@catalogued("eq46", title="Attention correctness AC = sum of the weights on ground-truth regions")
def attention_correctness(a: Tensor, G: Tensor) -> Tensor:
    """Attention correctness, Eq. (46): ``AC = sum_{i : R_i in G} a_i``.

    With weights that sum to 1 the value lies in [0, 1]: 1 when all weight is on
    ground-truth regions.

    Args:
        a: attention weights over the regions ``R_1 .. R_{n_f}``.
        G: boolean, True where region ``R_i`` belongs to the ground-truth set (in Liu
            et al.'s captioning study, the regions that annotators boxed as the referent
            of a caption word, not gaze data).

    Shape:
        - a, G: ``(..., n_f)``.
        - Output: ``(...)``.

    Returns:
        The attention correctness per row.

    Raises:
        ValueError: if G is not boolean or the shapes differ.
        TypeError: if ``a`` is not a floating-point tensor.
    """
    as_tensor(a, "a")
    check_boolean(G, "G", "region in the ground truth")
    check_same_shape(a, G, "a", "G", "attention correctness needs a and G of one shape (..., n_f)")
    return (a * G).sum(-1)


# --------------------------------------------------------------------------- AER


@catalogued("extra:aer")
def links_to_matrix(links: Iterable[tuple[int, int]], n_tgt: int, n_src: int) -> Tensor:
    """Boolean alignment matrix from ``(target j, source i)`` links.

    Args:
        links: the ``(j, i)`` pairs.
        n_tgt: the number of target positions.
        n_src: the number of source positions.

    Shape:
        - Output: ``(n_tgt, n_src)``.

    Returns:
        The alignment matrix, ``True`` = a link.

    Raises:
        ValueError: naming the link if a position does not exist.
    """
    M = torch.zeros(n_tgt, n_src, dtype=torch.bool)
    for link in links:
        j, i = link
        if not (0 <= j < n_tgt):
            raise ValueError(f"alignment link {tuple(link)} refers to target position {j}, but n_tgt={n_tgt}")
        if not (0 <= i < n_src):
            raise ValueError(f"alignment link {tuple(link)} refers to source position {i}, but n_src={n_src}")
        M[j, i] = True
    return M


@catalogued("extra:aer")
def hard_alignment(a: Tensor, threshold: float | None = None) -> Tensor:
    """Hard links from soft weights ``a``.

    Without ``threshold``: each target position links to its arg-max source.
    With ``threshold``: every link whose weight exceeds it. An empty source
    (``n_src = 0``) gives no links.

    Args:
        a: soft alignment weights.
        threshold: the weight a link must exceed (None: arg-max links).

    Shape:
        - a: ``(..., n_tgt, n_src)``.
        - Output: boolean ``(..., n_tgt, n_src)``.

    Returns:
        The links, ``True`` = a link.

    Raises:
        ValueError: unless ``a`` has rank >= 1.
        TypeError: if ``a`` is not a floating-point tensor.
    """
    as_tensor(a, "a")
    check_min_rank(a, 1, "a", "(..., n_tgt, n_src)")
    if threshold is not None:
        return a > threshold
    if a.shape[-1] == 0:
        return torch.zeros(a.shape, dtype=torch.bool, device=a.device)
    return F_.one_hot(a.argmax(-1), a.shape[-1]).bool()


@catalogued("extra:aer", title="Alignment error rate with sure and possible links (Och & Ney 2003)")
def alignment_error_rate(A: Tensor, S: Tensor, P: Tensor | None = None) -> float:
    """Alignment error rate (Och & Ney 2003) of hypothesis links ``A``.

    ``AER = 1 - (|A and S| + |A and P|) / (|A| + |S|)`` with sure links ``S``
    and possible links ``P`` (``S`` is always counted as possible, so ``P`` is
    taken as ``P or S``). Counts are summed over the batch (corpus AER). 0 is perfect.

    Args:
        A: boolean hypothesis links, ``True`` = a link.
        S: boolean sure links.
        P: boolean possible links (None: ``P = S``).

    Shape:
        - A, S, P: ``(..., n_tgt, n_src)``.

    Returns:
        The AER as a Python float.

    Raises:
        ValueError: for non-boolean inputs, different shapes, or when ``A`` and ``S``
            are both empty.
    """
    P = S if P is None else P
    for name, M in (("A", A), ("S", S), ("P", P)):
        check_boolean(M, f"alignment {name} (..., n_tgt, n_src)", "a link")
    if not (A.shape == S.shape == P.shape):
        raise ValueError(
            f"alignments must share the shape (..., n_tgt, n_src), got A {tuple(A.shape)}, "
            f"S {tuple(S.shape)}, P {tuple(P.shape)}"
        )
    P = P | S
    nA, nS = int(A.sum()), int(S.sum())
    if nA + nS == 0:
        raise ValueError("AER is undefined when both A and S are empty")
    return 1.0 - (int((A & S).sum()) + int((A & P).sum())) / (nA + nS)


# --------------------------------------------------------------------------- supervised attention


@catalogued("extra:supervised-attention")
def alignment_loss(a: Tensor, gold: Tensor, eps: float = 1e-9) -> Tensor:
    """Cross-entropy of attention weights against gold alignments.

    Each gold row is normalised to a distribution ``g`` (uniform over its links)
    and the loss is ``-sum_i g_i log a_i``, averaged over the rows that have
    at least one gold link. float16 and bfloat16 weights are computed in float32
    and the loss cast back (``eps`` underflows to 0 in float16, so ``log 0``
    would make the loss infinite).

    Args:
        a: attention weights.
        gold: boolean gold alignments, ``True`` = a gold link.
        eps: added to the weights inside the log.

    Shape:
        - a, gold: ``(..., n_q, n_f)``.
        - Output: a scalar ``()``.

    Returns:
        The loss.

    Raises:
        ValueError: on a shape mismatch or a gold mask that is not boolean.
        TypeError: if ``a`` is not a floating-point tensor.
    """
    as_tensor(a, "a")
    check_boolean(gold, "gold", "a gold link")
    if gold.shape != a.shape:
        raise ValueError(f"gold must have a's shape {tuple(a.shape)}, got {tuple(gold.shape)}")
    if a.dtype in _HALF:
        return alignment_loss(a.float(), gold, eps).to(a.dtype)
    g = gold.to(a.dtype)
    n = g.sum(-1)
    has = n > 0
    if not has.any():
        return a.sum() * 0.0
    ce = -(g * torch.log(a + eps)).sum(-1) / n.clamp_min(1)
    return ce[has].mean()


@catalogued(
    "extra:supervised-attention",
    title="Supervised attention: task loss + lambda * alignment loss against gold alignments",
)
def supervised_attention_loss(logits: Tensor, y: Tensor, a: Tensor, gold: Tensor, lam: float) -> Tensor:
    """Joint loss of supervised attention: ``CE(logits, y) + lam * alignment_loss(a, gold)``.

    ``lam = 0`` is ordinary training. An empty batch gives 0 (the package's loss convention).

    Args:
        logits: the class scores.
        y: the labels, one per row of logits.
        a: attention weights, as in :func:`alignment_loss`.
        gold: boolean gold alignments, as in :func:`alignment_loss`.
        lam: the weight of the alignment loss (>= 0).

    Shape:
        - logits: ``(..., d_y)``; y: ``(...)``; a, gold: ``(..., n_q, n_f)``.
        - Output: a scalar ``()``.

    Returns:
        The joint loss.

    Raises:
        ValueError: for ``lam < 0``, labels y whose shape is not ``logits.shape[:-1]``,
            or as :func:`alignment_loss`.
        TypeError: if logits is not a floating-point tensor.
    """
    if lam < 0:
        raise ValueError(f"lambda must be >= 0, got {lam}")
    as_tensor(logits, "logits")
    check_min_rank(logits, 1, "logits", "(..., d_y)")
    if not isinstance(y, Tensor) or y.shape != logits.shape[:-1]:
        raise ValueError(
            f"y must hold one label per row of logits (..., d_y), shape {tuple(logits.shape[:-1])}, got "
            f"{tuple(y.shape) if isinstance(y, Tensor) else type(y).__name__} (logits {tuple(logits.shape)})"
        )
    task = cross_entropy_mean(logits, y)
    if lam == 0:
        return task
    return task + lam * alignment_loss(a, gold)


# --------------------------------------------------------------------------- rank correlation


def _check_pair(x: Tensor, y: Tensor, what: str) -> tuple[Tensor, Tensor]:
    x, y = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(y, dtype=torch.float64)
    if x.dim() != 1 or x.shape != y.shape:
        raise ValueError(f"{what} needs two 1-D sequences of one length, got {tuple(x.shape)} and {tuple(y.shape)}")
    if x.numel() < 2:
        raise ValueError(f"{what} needs at least 2 values, got {x.numel()}")
    return x, y


@catalogued("extra:rank-correlation")
def rankdata(x: Tensor) -> Tensor:
    """Ranks 1..n of a 1-D tensor, ties sharing their average rank (scipy's ``"average"``).

    Args:
        x: the values (converted to float64).

    Shape:
        - x: ``(n,)``.
        - Output: ``(n,)`` float64.

    Returns:
        The ranks.

    Raises:
        TypeError: if ``torch.as_tensor`` cannot convert x.
    """
    x = torch.as_tensor(x, dtype=torch.float64)
    n = x.numel()
    order = torch.argsort(x, stable=True)
    ranks = torch.empty(n, dtype=torch.float64)
    xs = x[order]
    i = 0
    while i < n:
        j = i
        while j + 1 < n and xs[j + 1] == xs[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


@catalogued(
    "extra:rank-correlation", title="Rank correlation (Spearman, Kendall tau-b) between model and human attention"
)
def spearman(x: Tensor, y: Tensor) -> float:
    """Spearman's rank correlation: the Pearson correlation of the (average) ranks.

    Args:
        x: the first sequence.
        y: the second sequence.

    Shape:
        - x, y: ``(n,)`` with ``n >= 2``.

    Returns:
        The correlation as a Python float; NaN if either is constant (as scipy).

    Raises:
        ValueError: unless x and y are 1-D of one length n >= 2.
    """
    x, y = _check_pair(x, y, "Spearman correlation")
    rx, ry = rankdata(x), rankdata(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    den = portable_sqrt((rx**2).sum() * (ry**2).sum())
    return float("nan") if den == 0 else float((rx * ry).sum() / den)


@catalogued("extra:rank-correlation")
def kendall_tau(x: Tensor, y: Tensor) -> float:
    """Kendall's tau-b, by counting all pairs: ``(C - D) / sqrt((n0 - T_x)(n0 - T_y))``.

    ``C``/``D`` are concordant/discordant pairs, ``n0 = n(n-1)/2``, ``T_x`` and
    ``T_y`` the pairs tied in x and in y (scipy's default variant). O(n^2).

    Args:
        x: the first sequence.
        y: the second sequence.

    Shape:
        - x, y: ``(n,)`` with ``n >= 2``.

    Returns:
        Tau-b as a Python float; NaN if either is constant.

    Raises:
        ValueError: unless x and y are 1-D of one length n >= 2.
    """
    x, y = _check_pair(x, y, "Kendall tau")
    dx = torch.sign(x[:, None] - x[None, :])
    dy = torch.sign(y[:, None] - y[None, :])
    iu = torch.triu_indices(x.numel(), x.numel(), 1)
    dx, dy = dx[iu[0], iu[1]], dy[iu[0], iu[1]]
    n0 = dx.numel()
    s = float((dx * dy).sum())  # C - D (pairs tied in either count 0)
    tx, ty = int((dx == 0).sum()), int((dy == 0).sum())
    den = ((n0 - tx) * (n0 - ty)) ** 0.5
    return float("nan") if den == 0 else s / den


# --------------------------------------------------------------------------- attention as explanation


@catalogued("extra:gradient-importance", title="Gradient x input feature importance compared with attention weights")
def gradient_importance(head: Head, F: Tensor, target: Tensor | None = None, detach_attention: bool = True) -> Tensor:
    """Gradient x input importance of every feature vector for the predicted logit.

    For each example the importance of ``f_l`` is ``|sum_d dlogit_y/dF_{l,d} * F_{l,d}|``
    for the first query's target class ``y``.

    Args:
        head: ``head(F, weights)`` returns ``(logits, weights)`` (as
            :meth:`attnsurvey.experiments.evaluation.ProbeModel.head`).
        F: the feature vectors.
        target: the target class per example (None: the predicted class).
        detach_attention: True holds the weights fixed, as Jain & Wallace did, so the
            gradient measures each value's effect on the output.

    Shape:
        - F: ``(B, n_f, d_f)``; head's logits ``(B, n_q, d_y)``, weights ``(B, n_q, n_f)``;
          target: ``(B,)``.
        - Output: ``(B, n_f)``.

    Returns:
        The importance of every feature vector.

    Raises:
        TypeError: if F is not a floating-point tensor.
    """
    as_tensor(F, "F")
    F = F.detach().requires_grad_(True)
    if detach_attention:
        with torch.no_grad():
            _, a = head(F, None)
        logits, _ = head(F, a)
    else:
        logits, _ = head(F, None)
    first = logits[:, 0]
    y = first.argmax(-1) if target is None else target.reshape(-1)
    sel = first.gather(-1, y[:, None]).sum()
    (g,) = torch.autograd.grad(sel, F)
    return (g * F).sum(-1).abs().detach()


@catalogued("extra:adversarial-attention")
def js_divergence(p: Tensor, q: Tensor, eps: float = 1e-12) -> Tensor:
    """Jensen-Shannon divergence (natural log) of distributions over the last dim.

    ``JS(p, q) = KL(p || m)/2 + KL(q || m)/2`` with ``m = (p + q)/2``; in
    ``[0, log 2]``. float16 and bfloat16 are computed in float32 and cast back
    (``eps`` underflows to 0 in float16, where ``0 * log 0`` would give NaN).

    Args:
        p: the first distributions.
        q: the second distributions.
        eps: added inside the logs.

    Shape:
        - p, q: ``(..., n)``.
        - Output: ``(...)``.

    Returns:
        The divergence per row.

    Raises:
        TypeError: if p or q is not a floating-point tensor.
        ValueError: for different shapes, or an ``eps`` that is not a finite number > 0.
    """
    as_tensor(p, "p"), as_tensor(q, "q")
    check_positive("js_divergence", eps=eps)
    if p.shape != q.shape:
        raise ValueError(f"JS divergence needs p and q of one shape, got {tuple(p.shape)} and {tuple(q.shape)}")
    if p.dtype in _HALF or q.dtype in _HALF:
        out_dtype = torch.promote_types(p.dtype, q.dtype)
        work = torch.promote_types(out_dtype, torch.float32)
        return js_divergence(p.to(work), q.to(work), eps).to(out_dtype)
    m = (p + q) / 2
    kl = lambda u: (u * (torch.log(u + eps) - torch.log(m + eps))).sum(-1)  # noqa: E731
    return (kl(p) + kl(q)) / 2


@catalogued("extra:adversarial-attention")
def total_variation(p: Tensor, q: Tensor) -> Tensor:
    """Total variation distance ``sum |p - q| / 2`` over the last dim, in [0, 1].

    Args:
        p: the first distributions.
        q: the second distributions.

    Shape:
        - p, q: ``(..., n)``.
        - Output: ``(...)``.

    Returns:
        The distance per row.

    Raises:
        TypeError: if p or q is not a floating-point tensor.
        ValueError: for different shapes.
    """
    as_tensor(p, "p"), as_tensor(q, "q")
    if p.shape != q.shape:
        raise ValueError(f"total variation needs p and q of one shape, got {tuple(p.shape)} and {tuple(q.shape)}")
    return (p - q).abs().sum(-1) / 2


@catalogued(
    "extra:adversarial-attention", title="Adversarial attention: maximal JS divergence with the output change bounded"
)
def adversarial_attention(
    output_fn: Callable[[Tensor], Tensor],
    a: Tensor,
    eps: float = 0.01,
    steps: int = 200,
    lr: float = 0.1,
    penalty: float = 100.0,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Search for attention far from ``a`` that leaves the output almost unchanged.

    Maximises ``JS(a_adv, a)`` subject to ``TVD(output(a_adv), output(a)) <= eps``
    (Jain & Wallace 2019) by Adam on the logits of ``a_adv`` with the penalty
    ``penalty * relu(TVD - eps)``, keeping per row the best feasible point seen
    (``a`` itself, with JS 0, if none is found). The start is ``log a`` plus
    Gaussian noise from ``generator``.

    Args:
        output_fn: maps weights of ``a``'s shape to output probabilities.
        a: the model's attention weights.
        eps: the allowed output change in total variation (>= 0).
        steps: the number of Adam steps.
        lr: Adam's learning rate.
        penalty: the weight of the constraint penalty.
        generator: the random generator of the starting noise.

    Shape:
        - a: ``(..., n_q, n_f)``; output_fn's output: ``(..., n_q, d_y)``.
        - Output: ``(a_adv (..., n_q, n_f), js (..., n_q), tvd (..., n_q))``.

    Returns:
        ``(a_adv, js, tvd)``.

    Raises:
        ValueError: if ``eps < 0``.
        TypeError: if ``a`` is not a floating-point tensor.
    """
    as_tensor(a, "a")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    a = a.detach()
    with torch.no_grad():
        y0 = output_fn(a)
    noise = torch.randn(a.shape, generator=generator, dtype=a.dtype)
    theta = (torch.log(a + 1e-6) + noise).requires_grad_(True)
    opt = portable_adam([theta], lr=lr)
    best, best_js, best_tvd = (
        a.clone(),
        torch.zeros(a.shape[:-1], dtype=a.dtype),
        torch.zeros(a.shape[:-1], dtype=a.dtype),
    )
    for _ in range(steps):
        cand = align_scores(theta)  # the core's softmax alignment of the logits theta
        js = js_divergence(cand, a)
        tvd = total_variation(output_fn(cand), y0)
        with torch.no_grad():
            ok = (tvd <= eps) & (js > best_js)
            best = torch.where(ok[..., None], cand, best)
            best_js = torch.where(ok, js, best_js)
            best_tvd = torch.where(ok, tvd, best_tvd)
        loss = (-js + penalty * F_.relu(tvd - eps)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return best.detach(), best_js.detach(), best_tvd.detach()


@catalogued("extra:permuted-attention", title="Permuted attention weights and the resulting output change")
def permuted_attention(a: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Shuffle each row of weights ``a`` by its own random permutation.

    The set of weight values is kept; which feature vector gets which weight
    is scrambled. Rows still sum to what they summed to. Empty weights
    (``n_f = 0`` or no rows) are returned as they are.

    Args:
        a: the attention weights.
        generator: the random generator of the permutations.

    Shape:
        - a: ``(..., n_f)``.
        - Output: ``(..., n_f)``.

    Returns:
        The shuffled weights.

    Raises:
        ValueError: unless ``a`` has rank >= 1.
        TypeError: if ``a`` is not a floating-point tensor.
    """
    as_tensor(a, "a")
    check_min_rank(a, 1, "a", "(..., n_f)")
    if a.numel() == 0:
        return a.clone()
    flat = a.reshape(-1, a.shape[-1])
    perm = torch.argsort(torch.rand(flat.shape, generator=generator), dim=-1)
    return flat.gather(-1, perm).reshape(a.shape)


@catalogued("extra:permuted-attention")
@torch.no_grad()
def permutation_output_change(
    output_fn: Callable[[Tensor], Tensor], a: Tensor, n_perm: int = 20, generator: torch.Generator | None = None
) -> Tensor:
    """Median total-variation change of the output over ``n_perm`` random permutations of ``a``.

    A small value means the output does not care which feature vector receives
    which weight.

    Args:
        output_fn: maps weights of ``a``'s shape to output probabilities.
        a: the attention weights.
        n_perm: the number of permutations (>= 1).
        generator: the random generator of the permutations.

    Shape:
        - a: ``(..., n_q, n_f)``; output_fn's output: ``(..., n_q, d_y)``.
        - Output: ``(..., n_q)``.

    Returns:
        The median change per query.

    Raises:
        TypeError: if a is not a floating-point tensor or n_perm not an integer.
        ValueError: if ``n_perm < 1``.
    """
    as_tensor(a, "a")
    check_integers("permutation_output_change", n_perm=n_perm)
    if n_perm < 1:
        raise ValueError(f"n_perm must be >= 1, got {n_perm}")
    y0 = output_fn(a)
    tvds = torch.stack([total_variation(output_fn(permuted_attention(a, generator)), y0) for _ in range(n_perm)])
    return tvds.median(0).values
