"""Experiments of the Transformer-variants and evaluation chapters (§3.3.2 variants, §4.2).

* :func:`analytic_attention_cost`: multiply-adds and bytes of the weight matrix
  of full, local, Linformer and LSH attention as functions of ``n`` and ``d``
  (the chapter's stored outputs; measured times live in ``benchmarks/``).
* :func:`low_rank_sequences`, :func:`segment_average` and
  :func:`fit_linformer_projections`: the calibrated Linformer experiment, on
  inputs whose keys and values are low-rank along the sequence (``r`` segments
  of near-identical tokens) so that a projection to ``k >= r`` rows is justified.
* :func:`train_reversal_tagger`, :func:`reversal_accuracy`: the Transformer
  chapter's position experiment (sequence reversal), with the learned position
  table started at a chosen scale.

Shapes: batch sequences, n tokens, d width, k projected length, r segments, n_q queries, n_f feature
vectors.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F_
from torch import Tensor

from ..data.sequences import reversal_batch
from ..numeric_env import portable_adam
from ..training import accuracy, seed_everything, train
from ..transformer.linformer import linformer_attention
from ..transformer.model import SequenceTagger
from ..transformer.positional import LearnedPositionEncoding

FLOAT32_BYTES = 4
#: Rows of the position table of :func:`train_reversal_tagger` (the longest reversal it accepts).
REVERSAL_MAX_LEN = 16


def analytic_attention_cost(
    method: str, n: int, d: int, *, w: int = 32, k: int = 128, m: int = 64, n_buckets: int = 16
) -> dict[str, float | str]:
    """Analytic cost of one head of ``method`` on ``n`` tokens of width ``d`` (float32).

    LSH also sorts the ``n`` bucket ids, ``O(n log n)`` comparisons, counted as
    ``n log2 n`` in ``macs``.

    Args:
        method: ``"full"``, ``"local"``, ``"linformer"`` or ``"lsh"``.
        n: the number of tokens.
        d: the width.
        w: the half-width of ``"local"``.
        k: the projected rows of ``"linformer"``.
        m: the chunk size of ``"lsh"`` (chunks attend to themselves and the previous chunk).
        n_buckets: the buckets of ``"lsh"``.

    Returns:
        ``{"macs", "weight_bytes", "order"}``: multiply-adds of the score, context (and
        projection or hashing) products, the bytes of the attention-weight matrix the
        method materialises, and the growth order in ``n``.

    Raises:
        ValueError: for an unknown method or non-positive sizes.
    """
    if min(n, d, w + 1, k, m, n_buckets) < 1:
        raise ValueError(f"sizes must be positive, got n={n}, d={d}, w={w}, k={k}, m={m}, n_buckets={n_buckets}")
    if method == "full":
        return {"macs": 2 * n * n * d, "weight_bytes": FLOAT32_BYTES * n * n, "order": "O(n^2 d)"}
    if method == "local":
        width = min(2 * w + 1, n)
        return {"macs": 2 * n * width * d, "weight_bytes": FLOAT32_BYTES * n * width, "order": "O(n w d)"}
    if method == "linformer":
        return {"macs": 2 * k * n * d + 2 * n * k * d, "weight_bytes": FLOAT32_BYTES * n * k, "order": "O(n k d)"}
    if method == "lsh":
        hashing = n * d * max(n_buckets // 2, 1)
        sorting = n * math.log2(n) if n > 1 else 0.0
        return {
            "macs": hashing + sorting + 2 * n * 2 * m * d,
            "weight_bytes": FLOAT32_BYTES * n * 2 * m,
            "order": "O(n log n + n m d)",
        }
    raise ValueError(f"method must be 'full', 'local', 'linformer' or 'lsh', got {method!r}")


def low_rank_sequences(
    batch: int, n: int, d: int, r: int, noise: float, generator: torch.Generator
) -> tuple[Tensor, Tensor, Tensor]:
    """Queries, keys and values whose keys and values are low-rank along the sequence.

    The ``n`` positions form ``r`` contiguous segments of ``n / r`` tokens;
    every token of a segment has the segment's key and value (a standard
    normal prototype, drawn per sequence) plus Gaussian noise of standard
    deviation ``noise``. Queries are standard normal. With ``noise = 0`` the
    key and value matrices have rank at most ``r`` and the segment averages
    summarise them exactly.

    Args:
        batch: the number of sequences.
        n: the sequence length.
        d: the width.
        r: the number of segments (divides n).
        noise: the standard deviation of the noise.
        generator: the random generator.

    Shape:
        - Output: ``(Q, K, V)``, each ``(batch, n, d)``.

    Returns:
        ``(Q, K, V)``.

    Raises:
        ValueError: if ``r`` does not divide ``n``.
    """
    if r < 1 or n % r:
        raise ValueError(f"the number of segments r={r} must divide n={n}")
    seg = torch.arange(n) // (n // r)
    protos_k = torch.randn(batch, r, d, generator=generator)
    protos_v = torch.randn(batch, r, d, generator=generator)
    K = protos_k[:, seg] + noise * torch.randn(batch, n, d, generator=generator)
    V = protos_v[:, seg] + noise * torch.randn(batch, n, d, generator=generator)
    Q = torch.randn(batch, n, d, generator=generator)
    return Q, K, V


def segment_average(n: int, r: int) -> Tensor:
    """The projection that averages each of ``r`` contiguous segments of ``n / r`` positions.

    As Linformer's ``E = F`` on :func:`low_rank_sequences` it reproduces full
    attention exactly when the noise is zero (equal segment sizes cancel in the
    softmax).

    Args:
        n: the sequence length.
        r: the number of segments.

    Shape:
        - Output: ``(r, n)``.

    Returns:
        The averaging projection.

    Raises:
        ValueError: if ``r`` does not divide ``n``.
    """
    if r < 1 or n % r:
        raise ValueError(f"the number of segments r={r} must divide n={n}")
    seg = torch.arange(n) // (n // r)
    return (seg[None, :] == torch.arange(r)[:, None]).float() / (n // r)


def relative_error(c: Tensor, ref: Tensor) -> float:
    """``||c - ref|| / ||ref||`` (Frobenius norms over everything): 0 is exact, predicting zeros gives 1.

    Args:
        c: the approximation.
        ref: the reference.

    Shape:
        - c, ref: any shape, the same for both.

    Returns:
        The relative error as a Python float.
    """
    return float((c - ref).norm() / ref.norm())


def fit_linformer_projections(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    target: Tensor,
    k: int,
    *,
    steps: int = 150,
    lr: float = 0.05,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """Learn Linformer's ``E, F`` so that its output matches ``target`` (full attention) on these inputs.

    Starts from random ``N(0, 1/k)`` projections (as the untrained experiment does)
    and runs ``steps`` Adam steps on the mean squared error.

    Args:
        Q: the training queries.
        K: the training keys.
        V: the training values.
        target: their full-attention outputs.
        k: the projected length.
        steps: the number of Adam steps.
        lr: the learning rate.
        generator: the random generator of the initial projections.

    Shape:
        - Q, K, V: ``(batch, n, d)``; target: ``(batch, n, d)``.
        - Output: ``(E (k, n), F (k, n))``.

    Returns:
        The detached ``(E, F)``.

    Raises:
        ValueError: as :func:`~attnsurvey.transformer.linformer.linformer_attention`.
    """
    n = K.shape[-2]
    E = (torch.randn(k, n, generator=generator) / k**0.5).requires_grad_(True)
    F = (torch.randn(k, n, generator=generator) / k**0.5).requires_grad_(True)
    opt = portable_adam([E, F], lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        c, _ = linformer_attention(Q, K, V, E, F)
        loss = (c - target).pow(2).mean()
        loss.backward()
        opt.step()
    return E.detach(), F.detach()


def adversarial_trace(
    output_fn: Callable[[Tensor], Tensor],
    a: Tensor,
    eps: float,
    steps: int,
    *,
    generator: torch.Generator | None = None,
    **search_kw: float,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Run :func:`attnsurvey.evaluation.intrinsic.adversarial_attention` and record its objective at every step.

    The search itself is unchanged: ``output_fn`` is wrapped so that each
    candidate it evaluates is scored as the search scores it (JS divergence
    from ``a``, total variation of the output from the output at ``a``).

    Args:
        output_fn: maps weights of ``a``'s shape to output probabilities.
        a: the model's attention weights.
        eps: the allowed output change in total variation.
        steps: the number of search steps.
        generator: the random generator of the search's start.
        search_kw: further keyword options of ``adversarial_attention`` (lr, penalty).

    Shape:
        - a: ``(..., n_q, n_f)``.
        - Output: ``a_adv`` ``(..., n_q, n_f)``; ``js``, ``tvd`` ``(..., n_q)``;
          ``best_js_per_step`` ``(steps, ..., n_q)``.

    Returns:
        ``(a_adv, js, tvd, best_js_per_step)``: the search's results and, per step and
        row, the largest JS divergence of a feasible candidate (``TVD <= eps``) seen so
        far: the curve whose flattening shows convergence.

    Raises:
        ValueError: as :func:`~attnsurvey.evaluation.intrinsic.adversarial_attention`.
    """
    from ..evaluation.intrinsic import adversarial_attention, js_divergence, total_variation

    a = a.detach()
    state: dict[str, Tensor] = {}
    history: list[Tensor] = []

    def traced(w: Tensor) -> Tensor:
        out = output_fn(w)
        if "y0" not in state:
            state["y0"] = out.detach()
            state["best"] = torch.zeros(a.shape[:-1], dtype=a.dtype)
            return out
        with torch.no_grad():
            js = js_divergence(w.detach(), a)
            ok = total_variation(out.detach(), state["y0"]) <= eps
            state["best"] = torch.where(ok & (js > state["best"]), js, state["best"])
            history.append(state["best"].clone())
        return out

    adv, js, tvd = adversarial_attention(traced, a, eps=eps, steps=steps, generator=generator, **search_kw)
    return adv, js, tvd, torch.stack(history)


def train_reversal_tagger(
    position: str,
    seed: int,
    *,
    n: int = 8,
    vocab: int = 10,
    steps: int = 120,
    batch: int = 32,
    lr: float = 1e-2,
    learned_sd: float = 1.0,
    b: int = 8,
) -> SequenceTagger:
    """Train the Transformer chapter's two-layer tagger (d = 16, h = 2) on reversal of ``n`` tokens.

    For ``"learned"`` the position table ``P (16, 16)`` is redrawn from
    ``N(0, learned_sd^2)`` (with a generator seeded by ``seed``) after the rest of
    the model is built, so two values of ``learned_sd`` differ in the scale of the
    table only; ``learned_sd = 1`` matches the token embeddings, which
    ``nn.Embedding`` draws from ``N(0, 1)``.

    Args:
        position: ``"none"``, ``"sinusoidal"``, ``"learned"`` or ``"relative"``.
        seed: fixes the initial weights and the ``steps`` batches.
        n: the sequence length (<= 16).
        vocab: the vocabulary size.
        steps: the number of training steps.
        batch: sequences per batch.
        lr: the learning rate.
        learned_sd: the standard deviation of the learned position table (> 0).
        b: the clipping distance of ``"relative"``.

    Returns:
        The model, in eval mode.

    Raises:
        ValueError: for ``n > 16``, a non-positive ``learned_sd`` or an unknown position.
    """
    if not 1 <= n <= REVERSAL_MAX_LEN:
        raise ValueError(f"the reversal length n must be in 1..{REVERSAL_MAX_LEN}, got n={n}")
    if not learned_sd > 0:
        raise ValueError(f"learned_sd must be > 0, got {learned_sd}")
    gen = seed_everything(seed)
    tagger = SequenceTagger(
        vocab, vocab, d_model=16, h=2, d_ff=32, n_layers=2, max_len=REVERSAL_MAX_LEN, position=position, b=b
    )
    if isinstance(tagger.position, LearnedPositionEncoding):
        with torch.no_grad():
            tagger.position.P.normal_(0.0, learned_sd, generator=torch.Generator().manual_seed(seed))
    batches = [reversal_batch(batch, n, vocab, gen) for _ in range(steps)]

    def loss(m: SequenceTagger, bt: tuple[Tensor, Tensor]) -> Tensor:
        return F_.cross_entropy(m(bt[0])[0].flatten(0, 1), bt[1].flatten())

    train(tagger, loss, batches, lr=lr)
    return tagger


@torch.no_grad()
def reversal_accuracy(tagger: SequenceTagger, n: int, vocab: int = 10, n_test: int = 500, seed: int = 123) -> float:
    """Token accuracy of ``tagger`` on ``n_test`` fresh reversal sequences of length ``n``.

    Args:
        tagger: the trained tagger.
        n: the sequence length.
        vocab: the vocabulary size.
        n_test: the number of test sequences.
        seed: the test seed.

    Returns:
        The token accuracy in [0, 1].
    """
    x, y = reversal_batch(n_test, n, vocab, torch.Generator().manual_seed(seed))
    return accuracy(tagger(x)[0], y)
