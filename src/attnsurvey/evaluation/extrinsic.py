"""§4.1 Extrinsic evaluation: the task metrics attention models are judged by.

The survey (§4.1) lists the measures each field reports: BLEU and perplexity
for language, word and phoneme error rates for speech, error rate, precision
and recall for classification, and PSNR, SSIM and IoU for vision. Each is
written here from its definition, for teaching, and tested against the library
people actually use (``sacrebleu``, ``jiwer``, ``scikit-image``):

* :func:`bleu`        corpus BLEU (Papineni et al.), sacrebleu's statistics and smoothing
* :func:`perplexity`  ``exp`` of the mean negative log-likelihood
* :func:`edit_counts`, :func:`wer`, :func:`per`  Levenshtein alignment; word / phoneme error rate
* :func:`precision_recall_f1`  binary, micro or macro averaged
* :func:`box_iou`, :func:`mask_iou`  intersection over union
* :func:`psnr`, :func:`ssim`  peak signal-to-noise ratio; structural similarity (Wang et al. 2004)

The last item of §4.1 is the ablation that tests whether the weights matter:
replace the learned attention weights by a uniform average (:func:`uniform_weights`)
in a trained model (:class:`attnsurvey.experiments.evaluation.ProbeModel`, a small task model of Fig. 1 whose
attention weights can be overridden) and measure the drop (:func:`uniform_attention_ablation`).

Shapes: ``...`` any leading axes, V vocabulary size, H x W image, B batch, n_q queries, n_f feature
vectors.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F_
from torch import Tensor, nn

from .._checks import (
    InputTypeError,
    as_tensor,
    check_batch_broadcast,
    check_integers,
    check_nonnegative,
    check_positive,
)
from ..catalog import catalogued
from ..masking import check_attn_mask, check_boolean
from ..training import accuracy

CHAPTER = "chapters/ch04_1_extrinsic_evaluation.ipynb"

Tokenizer = Callable[[str], list[str]]


def _check_corpus(hypotheses: Sequence, references: Sequence, what: str) -> None:
    if isinstance(hypotheses, str) or isinstance(references, str):
        raise ValueError(f"{what} takes lists of sentences, not a single string")
    if len(hypotheses) == 0:
        raise ValueError(f"{what} needs at least one hypothesis, got an empty list")
    if len(hypotheses) != len(references):
        raise ValueError(
            f"{what} needs one reference per hypothesis, got {len(hypotheses)} hypotheses "
            f"and {len(references)} references"
        )


# --------------------------------------------------------------------------- BLEU


@catalogued("extra:bleu")
def ngram_counts(tokens: Sequence[str], n: int) -> Counter:
    """Counts of the ``n``-grams (tuples) of a token list.

    Args:
        tokens: the token list.
        n: the n-gram length.

    Returns:
        A ``Counter`` from n-gram tuple to its count.

    Raises:
        ValueError: unless ``n`` is an integer >= 1 (there are no 0-grams to count).
    """
    check_integers("ngram_counts", minimum=1, n=n)
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


@catalogued("extra:bleu", title="Corpus BLEU with clipped n-gram precisions, brevity penalty and sacrebleu's smoothing")
def bleu(
    hypotheses: Sequence[str],
    references: Sequence[str] | Sequence[Sequence[str]],
    max_n: int = 4,
    smooth: str = "exp",
    smooth_value: float | None = None,
    tokenize: Tokenizer = str.split,
) -> float:
    """Corpus BLEU in [0, 100] (Papineni et al. 2002), as sacrebleu computes it.

    ``BLEU = BP * exp(mean_n log p_n)``, where ``p_n`` is the clipped n-gram
    precision summed over the whole corpus (each hypothesis n-gram counts at
    most as often as in the reference that has most of it) and
    ``BP = exp(1 - r / c)`` if the total hypothesis length ``c`` is below the
    total reference length ``r`` (per sentence, the reference length closest to
    the hypothesis length; ties go to the shorter), else 1.

    Args:
        hypotheses: one string per sentence.
        references: one string per sentence, or one list of alternative references per sentence.
        max_n: the longest n-gram (>= 1).
        smooth: as in sacrebleu: ``"none"``, ``"floor"`` (zero counts replaced by
            ``smooth_value``, default 0.1), ``"add-k"`` (add ``smooth_value``, default 1,
            to counts for n > 1) or ``"exp"`` (the k-th zero precision becomes
            ``1 / (2^k total_n)``; sacrebleu's default).
        smooth_value: the value of ``"floor"`` and ``"add-k"`` (None: their default).
        tokenize: splits a string into tokens (default whitespace, which equals
            sacrebleu's ``tokenize="none"``).

    Returns:
        The corpus BLEU score in [0, 100].

    Raises:
        ValueError: for an empty corpus, mismatched lengths, a sentence without a
            reference, ``max_n < 1``, or an unknown smoothing.
    """
    _check_corpus(hypotheses, references, "BLEU")
    if smooth not in {"none", "floor", "add-k", "exp"}:
        raise ValueError(f"smooth must be 'none', 'floor', 'add-k' or 'exp', got {smooth!r}")
    if max_n < 1:
        raise ValueError(f"max_n must be >= 1, got {max_n}")
    default = {"floor": 0.1, "add-k": 1.0}.get(smooth, 0.0)
    k = default if smooth_value is None else smooth_value
    correct = [0.0] * max_n
    total = [0.0] * max_n
    c_len = r_len = 0
    for i, (hyp, refs) in enumerate(zip(hypotheses, references)):
        refs = [refs] if isinstance(refs, str) else list(refs)
        if not refs:
            raise ValueError(f"sentence {i} has no reference")
        h = tokenize(hyp)
        rs = [tokenize(r) for r in refs]
        c_len += len(h)
        r_len += min((abs(len(r) - len(h)), len(r)) for r in rs)[1]
        for n in range(1, max_n + 1):
            h_counts = ngram_counts(h, n)
            max_ref: Counter = Counter()
            for r in rs:
                max_ref |= ngram_counts(r, n)  # element-wise maximum
            correct[n - 1] += sum(min(c, max_ref[g]) for g, c in h_counts.items())
            total[n - 1] += max(len(h) - n + 1, 0)
    if not any(correct) or c_len == 0:
        return 0.0
    bp = 1.0 if c_len >= r_len else math.exp(1.0 - r_len / c_len)
    log_p = 0.0
    zeros = 0
    for n in range(1, max_n + 1):
        m, t = correct[n - 1], total[n - 1]
        if smooth == "add-k" and n > 1:
            m, t = m + k, t + k
        if t == 0:
            return 0.0  # no n-grams of this order at all: the geometric mean is 0
        if m == 0:
            if smooth == "exp":
                zeros += 1
                p = 1.0 / (2**zeros * t)
            elif smooth == "floor":
                p = k / t
            else:
                return 0.0
        else:
            p = m / t
        log_p += math.log(p)
    return 100.0 * bp * math.exp(log_p / max_n)


# --------------------------------------------------------------------------- perplexity


@catalogued("extra:perplexity", title="Perplexity, exp of the mean negative log-likelihood")
def perplexity(logits: Tensor, targets: Tensor, ignore_index: int | None = None) -> float:
    """Perplexity ``exp(-(1/N) sum_t log p(y_t | ...))`` of a language model.

    Positions whose target equals ``ignore_index`` (padding) are skipped. A model
    that is uniform over ``V`` tokens has perplexity exactly ``V``.

    Args:
        logits: unnormalised scores over the vocabulary.
        targets: integer token ids.
        ignore_index: a target id that is not scored (None: score all).

    Shape:
        - logits: ``(..., V)``; targets: ``(...)``.

    Returns:
        The perplexity as a Python float.

    Raises:
        ValueError: on shape mismatch, an out-of-range target, or when no position is
            left to score.
        TypeError: (:class:`~attnsurvey._checks.InputTypeError`) for logits that are not
            floating point or targets that are not a ``torch.long`` (or ``uint8``) tensor.
    """
    as_tensor(logits, "logits")
    if not isinstance(targets, Tensor) or targets.dtype not in (torch.long, torch.uint8):
        raise InputTypeError(
            f"targets must be a tensor of integer token ids (torch.long), got "
            f"{f'dtype={targets.dtype}' if isinstance(targets, Tensor) else type(targets).__name__}; "
            "convert it with targets.long()"
        )
    if logits.shape[:-1] != targets.shape:
        raise ValueError(
            f"perplexity needs logits (..., V) and targets (...) with the same leading shape, got "
            f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)}"
        )
    V = logits.shape[-1]
    keep = torch.ones_like(targets, dtype=torch.bool) if ignore_index is None else targets != ignore_index
    if keep.sum() == 0:
        raise ValueError("perplexity needs at least one scored token, got none")
    t = targets[keep]
    if (t < 0).any() or (t >= V).any():
        raise ValueError(f"targets must lie in [0, V={V}), got values in [{int(t.min())}, {int(t.max())}]")
    nll = F_.cross_entropy(logits[keep].double(), t)  # mean negative log-likelihood of the targets
    return float(torch.exp(nll))


# --------------------------------------------------------------------------- WER / PER


@catalogued("extra:wer")
def edit_counts(reference: Sequence[str], hypothesis: Sequence[str]) -> tuple[int, int, int, int]:
    """Minimal Levenshtein alignment of two token sequences: ``(S, D, I, H)``.

    Substitutions, deletions (reference tokens missed), insertions (extra
    hypothesis tokens) and hits, by dynamic programming over the
    ``(len(reference) + 1) x (len(hypothesis) + 1)`` cost table, then a
    backtrace. Among alignments of equal cost the backtrace prefers hits and
    substitutions, then deletions; ``S + D + I`` is the edit distance
    whichever is chosen.

    Args:
        reference: the reference tokens.
        hypothesis: the hypothesis tokens.

    Returns:
        ``(S, D, I, H)``, four counts.
    """
    n, m = len(reference), len(hypothesis)
    cost = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n + 1):
        cost[i][0] = i
    for j in range(m + 1):
        cost[0][j] = j
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            sub = cost[i - 1][j - 1] + (reference[i - 1] != hypothesis[j - 1])
            cost[i][j] = min(sub, cost[i - 1][j] + 1, cost[i][j - 1] + 1)
    S = D = I = H = 0
    i, j = n, m
    while i > 0 or j > 0:
        if i > 0 and j > 0 and cost[i][j] == cost[i - 1][j - 1] + (reference[i - 1] != hypothesis[j - 1]):
            if reference[i - 1] == hypothesis[j - 1]:
                H += 1
            else:
                S += 1
            i, j = i - 1, j - 1
        elif i > 0 and cost[i][j] == cost[i - 1][j] + 1:
            D += 1
            i -= 1
        else:
            I += 1
            j -= 1
    return S, D, I, H


def _tokens(x: str | Sequence[str]) -> list[str]:
    return x.split() if isinstance(x, str) else list(x)


def _error_rate(
    references: str | Sequence[str | Sequence[str]],
    hypotheses: str | Sequence[str | Sequence[str]],
    what: str,
    unit: str,
) -> float:
    if isinstance(references, str) and isinstance(hypotheses, str):  # one sentence pair (a str with a list: error)
        references, hypotheses = [references], [hypotheses]
    _check_corpus(hypotheses, references, what)
    errors = n_ref = 0
    for ref, hyp in zip(references, hypotheses):
        r, h = _tokens(ref), _tokens(hyp)
        S, D, I, _ = edit_counts(r, h)
        errors += S + D + I
        n_ref += len(r)
    if n_ref == 0:
        raise ValueError(f"{what} is undefined for empty references (0 reference {unit}s)")
    return errors / n_ref


@catalogued("extra:wer", title="Word error rate (S + D + I) / N from a Levenshtein alignment")
def wer(references: str | Sequence[str], hypotheses: str | Sequence[str]) -> float:
    """Word error rate ``(S + D + I) / N`` over a corpus, ``N`` = number of reference words.

    Argument order as in ``jiwer.wer(reference, hypothesis)``. Counts are summed
    over the corpus before dividing (so long sentences weigh more), as jiwer does.
    WER can exceed 1 when the hypothesis has many insertions.

    Args:
        references: the reference sentences, strings split on whitespace (or token lists).
        hypotheses: the hypothesis sentences, in the same form.

    Returns:
        The WER as a Python float.

    Raises:
        ValueError: for an empty corpus, mismatched lengths, a single string paired with
            a list, or references with no words.
    """
    return _error_rate(references, hypotheses, "WER", "word")


@catalogued("extra:per", title="Phoneme error rate: the edit-distance rate on phoneme sequences")
def per(references: str | Sequence[Sequence[str]], hypotheses: str | Sequence[Sequence[str]]) -> float:
    """Phoneme error rate: the WER computation on phoneme sequences.

    Args:
        references: one entry per utterance, a list of phoneme symbols
            (``["h", "@", "l", "oU"]``) or a string of space-separated phonemes.
        hypotheses: the recognised phonemes, in the same form.

    Returns:
        ``(S + D + I) / N`` over the corpus, ``N`` the number of reference phonemes.

    Raises:
        ValueError: like :func:`wer`.
    """
    return _error_rate(references, hypotheses, "PER", "phoneme")


# --------------------------------------------------------------------------- classification


@catalogued("extra:precision-recall-f1", title="Precision, recall and F1 (binary, micro, macro)")
def precision_recall_f1(
    predicted: Tensor, target: Tensor, average: str = "binary", num_classes: int | None = None, positive: int = 1
) -> tuple[float, float, float]:
    """Precision ``TP/(TP+FP)``, recall ``TP/(TP+FN)`` and F1 (their harmonic mean), §4.1.

    The classes are, as in scikit-learn's ``precision_recall_fscore_support``, the
    labels that occur in ``predicted`` or ``target`` (a class absent from both
    is not averaged), or ``0 .. num_classes - 1`` when ``num_classes`` is given
    (scikit-learn's ``labels=range(num_classes)``: an absent class then counts
    with precision, recall and F1 of 0). A ratio with a zero denominator is
    defined as 0 (scikit-learn's ``zero_division=0``).

    Args:
        predicted: integer predicted labels.
        target: integer true labels.
        average: ``"binary"`` (class ``positive`` only), ``"micro"`` (pool TP, FP, FN over
            the classes) or ``"macro"`` (unweighted mean of the per-class values).
        num_classes: the number of classes (None: the labels that occur).
        positive: the positive class of ``"binary"``.

    Shape:
        - predicted, target: any shape, the same for both.

    Returns:
        ``(precision, recall, f1)`` as Python floats.

    Raises:
        ValueError: on shape mismatch, empty input, unknown ``average`` or ``num_classes < 1``.
    """
    if predicted.shape != target.shape:
        raise ValueError(
            f"predicted and target labels must have the same shape, got {tuple(predicted.shape)} "
            f"and {tuple(target.shape)}"
        )
    if predicted.numel() == 0:
        raise ValueError("precision/recall need at least one label, got none")
    if average not in {"binary", "micro", "macro"}:
        raise ValueError(f"average must be 'binary', 'micro' or 'macro', got {average!r}")
    if num_classes is not None and num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    p, t = predicted.reshape(-1).long(), target.reshape(-1).long()
    if average == "binary":
        classes = [positive]
    elif num_classes is not None:
        classes = list(range(num_classes))
    else:
        classes = torch.unique(torch.cat([p, t])).tolist()  # the labels present in either input
    tp = torch.tensor([float(((p == c) & (t == c)).sum()) for c in classes])
    fp = torch.tensor([float(((p == c) & (t != c)).sum()) for c in classes])
    fn = torch.tensor([float(((p != c) & (t == c)).sum()) for c in classes])

    def ratio(a: Tensor, b: Tensor) -> Tensor:
        return torch.where(b > 0, a / b.clamp_min(1), torch.zeros_like(a))

    if average == "micro":
        tp, fp, fn = tp.sum(0, keepdim=True), fp.sum(0, keepdim=True), fn.sum(0, keepdim=True)
    prec, rec = ratio(tp, tp + fp), ratio(tp, tp + fn)
    f1 = ratio(2 * prec * rec, prec + rec)
    return float(prec.mean()), float(rec.mean()), float(f1.mean())


# --------------------------------------------------------------------------- IoU


@catalogued("extra:iou", title="Intersection over union of boxes and masks")
def box_iou(box_a: Tensor, box_b: Tensor) -> Tensor:
    """Intersection over union of axis-aligned boxes ``(x1, y1, x2, y2)``.

    Two boxes that do not overlap have IoU 0; two empty boxes have IoU 0.

    Args:
        box_a: the first boxes.
        box_b: the second boxes (broadcast against box_a).

    Shape:
        - box_a, box_b: ``(..., 4)``.
        - Output: ``(...)``, the broadcast leading shape.

    Returns:
        The IoU of every pair of boxes.

    Raises:
        ValueError: if the last dimension is not 4, the leading shapes do not broadcast,
            or a box has ``x2 < x1`` or ``y2 < y1``.
        TypeError: if a box tensor is not floating point.
    """
    for name, b in (("box_a", box_a), ("box_b", box_b)):
        as_tensor(b, name)
        if b.dim() < 1 or b.shape[-1] != 4:
            raise ValueError(f"{name} must have shape (..., 4) = (x1, y1, x2, y2), got {tuple(b.shape)}")
    check_batch_broadcast(box_a, box_b, "box_a (..., 4)", "box_b (..., 4)", tail=1)
    for name, b in (("box_a", box_a), ("box_b", box_b)):
        if (b[..., 2] < b[..., 0]).any() or (b[..., 3] < b[..., 1]).any():
            raise ValueError(f"{name} has a box with x2 < x1 or y2 < y1")
    iw = (torch.minimum(box_a[..., 2], box_b[..., 2]) - torch.maximum(box_a[..., 0], box_b[..., 0])).clamp_min(0)
    ih = (torch.minimum(box_a[..., 3], box_b[..., 3]) - torch.maximum(box_a[..., 1], box_b[..., 1])).clamp_min(0)
    inter = iw * ih
    area = lambda b: (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])  # noqa: E731
    union = area(box_a) + area(box_b) - inter
    return torch.where(union > 0, inter / union.clamp_min(1e-12), torch.zeros_like(union))


@catalogued("extra:iou")
def mask_iou(mask_a: Tensor, mask_b: Tensor) -> Tensor:
    """IoU ``|A and B| / |A or B|`` of boolean masks over the last two dims.

    These are region (segmentation) masks, not attention masks. Two empty masks
    have IoU 0.

    Args:
        mask_a: boolean region mask, ``True`` = the pixel lies in the region.
        mask_b: boolean region mask of the same shape.

    Shape:
        - mask_a, mask_b: ``(..., H, W)``.
        - Output: ``(...)``.

    Returns:
        The IoU per mask pair.

    Raises:
        ValueError: if the masks are not boolean or differ in shape.
    """
    check_boolean(mask_a, "mask_a", "the pixel lies in the region")
    check_boolean(mask_b, "mask_b", "the pixel lies in the region")
    if mask_a.shape != mask_b.shape:
        raise ValueError(f"masks must have the same shape, got {tuple(mask_a.shape)} and {tuple(mask_b.shape)}")
    inter = (mask_a & mask_b).sum((-2, -1)).double()
    union = (mask_a | mask_b).sum((-2, -1)).double()
    return torch.where(union > 0, inter / union.clamp_min(1), torch.zeros_like(union))


# --------------------------------------------------------------------------- PSNR / SSIM


def _check_images(x: Tensor, y: Tensor, data_range: float) -> None:
    as_tensor(x, "image x")
    as_tensor(y, "image y")
    if x.shape != y.shape:
        raise ValueError(f"images must have the same shape, got x {tuple(x.shape)} and y {tuple(y.shape)}")
    if x.numel() == 0:
        raise ValueError(f"images are empty, shape {tuple(x.shape)}")
    if not data_range > 0:
        raise ValueError(f"data_range must be positive (e.g. 1.0 or 255), got {data_range}")


@catalogued("extra:psnr", title="Peak signal-to-noise ratio, with identical images giving inf")
def psnr(x: Tensor, y: Tensor, data_range: float) -> float:
    """Peak signal-to-noise ratio ``10 log10(R^2 / MSE)`` in decibels.

    Identical images have MSE 0 and PSNR ``math.inf``, returned explicitly.

    Args:
        x: the first image.
        y: the second image.
        data_range: R, the span of possible pixel values (1.0 for floats in [0, 1], 255
            for bytes); required, not guessed from the dtype.

    Shape:
        - x, y: any shape, the same for both.

    Returns:
        The PSNR in dB as a Python float.

    Raises:
        ValueError: for different shapes, empty images or R <= 0.
        TypeError: if an image is not a floating-point tensor.
    """
    _check_images(x, y, data_range)
    mse = float(((x.double() - y.double()) ** 2).mean())
    if mse == 0.0:
        return math.inf
    return 10.0 * math.log10(data_range**2 / mse)


@catalogued("extra:ssim")
def ssim_window(
    kind: str = "gaussian", win_size: int | None = None, sigma: float = 1.5, truncate: float = 3.5
) -> Tensor:
    """The 2-D averaging window of SSIM, normalised to sum 1 (float64).

    Args:
        kind: ``"uniform"``: a ``win_size x win_size`` box; ``"gaussian"``:
            ``exp(-r^2 / (2 sigma^2))`` truncated at radius ``int(truncate * sigma + 0.5)``
            (an 11 x 11 window for sigma = 1.5), as in Wang et al. and
            ``scipy.ndimage.gaussian_filter``.
        win_size: the side of the uniform box (default 7, scikit-image's default).
        sigma: the width of the Gaussian.
        truncate: the Gaussian's radius in units of sigma.

    Shape:
        - Output: ``(s, s)`` with odd ``s``.

    Returns:
        The window.

    Raises:
        ValueError: for an even or non-positive ``win_size``, an unknown ``kind``, or a Gaussian
            ``sigma`` that is not a finite number > 0 (``sigma = 0`` would be ``exp(-0 / 0)``, NaN).
    """
    check_integers("ssim_window", minimum=1, allow_none=True, win_size=win_size)
    check_nonnegative("ssim_window", sigma=sigma)
    if kind == "gaussian":
        check_positive("ssim_window (a Gaussian window)", sigma=sigma)
    if kind == "uniform":
        s = 7 if win_size is None else win_size
        if s < 1 or s % 2 == 0:
            raise ValueError(f"win_size must be odd and >= 1, got {s}")
        return torch.full((s, s), 1.0 / (s * s), dtype=torch.float64)
    if kind == "gaussian":
        r = int(truncate * sigma + 0.5)
        x = torch.arange(-r, r + 1, dtype=torch.float64)
        g = torch.exp(-(x**2) / (2 * sigma**2))
        g = g / g.sum()
        return g[:, None] * g[None, :]
    raise ValueError(f"window must be 'gaussian' or 'uniform', got {kind!r}")


@catalogued("extra:ssim", title="Structural similarity with a Gaussian or uniform window (Wang et al. 2004)")
def ssim(
    x: Tensor,
    y: Tensor,
    data_range: float,
    window: str = "gaussian",
    win_size: int | None = None,
    sigma: float = 1.5,
    K1: float = 0.01,
    K2: float = 0.03,
    sample_covariance: bool = False,
) -> float:
    """Mean structural similarity of two grey images (Wang et al. 2004).

    Local means ``mu``, variances ``sigma^2`` and covariance ``sigma_xy`` are
    window averages (:func:`ssim_window`); per pixel
    ``SSIM = (2 mu_x mu_y + C1)(2 sigma_xy + C2) / ((mu_x^2 + mu_y^2 + C1)(sigma_x^2 + sigma_y^2 + C2))``
    with ``C1 = (K1 R)^2``, ``C2 = (K2 R)^2``. The mean is taken over the
    pixels whose window lies inside the image (a "valid" convolution), which is
    what scikit-image reports after cropping. Identical images give 1.

    Args:
        x: the first image.
        y: the second image.
        data_range: R, as in :func:`psnr`.
        window: ``"gaussian"`` or ``"uniform"`` (see :func:`ssim_window`).
        win_size: the side of the uniform window (None: its default).
        sigma: the width of the Gaussian window.
        K1: the constant of ``C1``.
        K2: the constant of ``C2``.
        sample_covariance: True multiplies (co)variances by ``N/(N-1)``, ``N`` the
            window size (scikit-image's default; with the uniform window it gives Wang
            et al.'s unweighted statistics, which divide by ``N-1``). False keeps the
            window weights as they are, the population form of Wang et al.'s
            Gaussian-weighted statistics (their Eqs. 14-16).

    Shape:
        - x, y: ``(H, W)``.

    Returns:
        The mean SSIM as a Python float.

    Raises:
        ValueError: for different shapes, empty or non-2-D images, R <= 0, or images smaller
            than the window.
        TypeError: if an image is not a floating-point tensor.
    """
    _check_images(x, y, data_range)
    if x.dim() != 2:
        raise ValueError(f"ssim takes grey images of shape (H, W), got {tuple(x.shape)}")
    w = ssim_window(window, win_size, sigma)
    s = w.shape[0]
    if x.shape[0] < s or x.shape[1] < s:
        raise ValueError(f"images of shape {tuple(x.shape)} are smaller than the {s}x{s} SSIM window")
    X, Y = x.double()[None, None], y.double()[None, None]
    k = w[None, None]

    def filt(z: Tensor) -> Tensor:
        return F_.conv2d(z, k)

    mx, my = filt(X), filt(Y)
    norm = s * s / (s * s - 1) if sample_covariance else 1.0
    vx = norm * (filt(X * X) - mx**2)
    vy = norm * (filt(Y * Y) - my**2)
    vxy = norm * (filt(X * Y) - mx * my)
    C1, C2 = (K1 * data_range) ** 2, (K2 * data_range) ** 2
    S = ((2 * mx * my + C1) * (2 * vxy + C2)) / ((mx**2 + my**2 + C1) * (vx + vy + C2))
    return float(S.mean())


# --------------------------------------------------------------------------- ablation


@catalogued(
    "extra:uniform-attention-ablation",
    title="Ablation: replace learned attention weights by a uniform average and measure the drop",
)
def uniform_weights(a: Tensor, mask: Tensor | None = None) -> Tensor:
    """Uniform attention weights of ``a``'s shape: ``1 / n_f`` each.

    With a boolean ``mask`` (True = may attend) the weight ``1 / (number of
    allowed positions)`` goes to the allowed positions only; a fully-masked row
    stays zero. Using these weights turns the context vector (Eq. 4) into an
    unweighted average of the values, the ablation of §4.1.

    Args:
        a: attention weights (only the shape, dtype and device are used).
        mask: boolean, broadcastable to ``a``, ``True`` = may attend.

    Shape:
        - a: ``(..., n_q, n_f)``.
        - Output: ``(..., n_q, n_f)``.

    Returns:
        The uniform weights.

    Raises:
        ValueError: for a mask that is not boolean or does not broadcast to ``a``.
        TypeError: if ``a`` is not a floating-point tensor.
    """
    as_tensor(a, "a")
    allowed = torch.ones_like(a, dtype=torch.bool) if mask is None else check_attn_mask(mask, a.shape).expand_as(a)
    w = allowed.to(a.dtype)
    return w / w.sum(-1, keepdim=True).clamp_min(1.0)


@catalogued("extra:uniform-attention-ablation")
@torch.no_grad()
def uniform_attention_ablation(model: nn.Module, x: Tensor, y: Tensor) -> tuple[float, float]:
    """Accuracy of a trained model with its learned weights and with uniform weights.

    ``model(x, weights=None)`` returns ``(logits, weights)`` and uses ``weights``
    when given (e.g. :class:`attnsurvey.experiments.evaluation.ProbeModel`). The drop
    between the two accuracies measures how much the model relies on *where* it looks.

    Args:
        model: the trained model.
        x: the model inputs.
        y: the labels.

    Shape:
        - x: ``(B, n_f)`` (or ``(B, n_f, d_in)``); y: ``(B, n_q)``.

    Returns:
        ``(accuracy with learned attention, accuracy with uniform attention)``.
    """
    logits, a = model(x)
    learned = accuracy(logits, y)
    logits_u, _ = model(x, weights=uniform_weights(a))
    return learned, accuracy(logits_u, y)
