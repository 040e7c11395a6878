"""Edge-case sweep over the package's public mechanisms (issue 13).

Feeds every mechanism the inputs a reader may hand it -- empty batch (B = 0),
empty feature set (n_f = 0), no queries (n_q = 0), length 1, float16 /
bfloat16 / float64, NaN and Inf in masked slots, fully masked rows, 1-D shared
masks, inputs around 1e20, NumPy arrays / Python lists / ints -- and invalid
hyper-parameters, and classifies each case:

* ``ok``      -- a result that passes the case's check (finite, right shape,
  equal to a brute-force reference or to the clean input where one exists);
* ``clear``   -- a ``ValueError``/``TypeError`` raised by the package itself
  (so its message names the survey's symbol and the shapes seen);
* ``crash``   -- any other exception (raised deep inside torch, IndexError, ...);
* ``silent``  -- a result that fails its check (NaN/Inf, wrong shape, a
  masked slot changing the output, a mismatch with the reference), or an
  invalid hyper-parameter accepted without an error.

* ``n/a``     -- the harness itself cannot build the case (e.g. slicing a list input);
  not counted as a finding.

Usage::

    PYTHONPATH=src python scripts/edge_case_sweep.py [-v]

It prints a summary table (per group and per variation) and, with ``-v``, every
case that is not ``ok``/``clear``. It writes nothing.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import traceback
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

warnings.filterwarnings("ignore")
PKG = os.sep + "attnsurvey" + os.sep


@dataclass
class Case:
    group: str
    variation: str
    name: str
    thunk: Callable[[], Any]
    check: Callable[[Any], bool] | None = None
    expect_error: bool = False


CASES: list[Case] = []


def add(
    group: str,
    variation: str,
    name: str,
    thunk: Callable[[], Any],
    check: Callable[[Any], bool] | None = None,
    expect_error: bool = False,
) -> None:
    CASES.append(Case(group, variation, name, thunk, check, expect_error))


def tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for y in x for t in tensors(y)]
    if hasattr(x, "__dataclass_fields__"):
        return [t for f in x.__dataclass_fields__ for t in tensors(getattr(x, f))]
    if isinstance(x, float):
        return [torch.tensor(x)]
    return []


def finite(x: Any) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors(x) if t.is_floating_point())


def first(x: Any) -> torch.Tensor:
    return tensors(x)[0]


def classify(c: Case) -> tuple[str, str]:
    try:
        torch.manual_seed(0)
        out = c.thunk()
    except (ValueError, TypeError) as exc:
        frames = traceback.extract_tb(exc.__traceback__)
        if frames and PKG in frames[-1].filename:
            return "clear", f"{type(exc).__name__}: {exc}"
        if frames and frames[-1].filename == __file__:
            return "n/a", f"the harness cannot build this case: {exc}"
        return "crash", f"{type(exc).__name__} (from {frames[-1].filename.split(os.sep)[-1] if frames else '?'}): {exc}"
    except Exception as exc:
        frames = traceback.extract_tb(exc.__traceback__)
        if frames and frames[-1].filename == __file__:
            return "n/a", f"the harness cannot build this case: {exc}"
        return "crash", f"{type(exc).__name__}: {str(exc)[:160]}"
    if c.expect_error:
        return "silent", "invalid input accepted"
    try:
        good = finite(out) if c.check is None else bool(c.check(out))
    except Exception as exc:
        return "silent", f"check failed: {type(exc).__name__}: {exc}"
    return ("ok", "") if good else ("silent", "check failed (NaN/Inf, shape or reference)")


# ----------------------------------------------------------------------------------------------
# Mechanisms with the shape contract (Q (B, n_q, d), K/V (B, n_f, d), mask (B, n_q, n_f)).
# Each runner builds its own parameters in the inputs' dtype and returns (context, weights) or
# the mechanism's output. Query-less mechanisms use mask[:, 0] as their (B, n_f) mask.
# ----------------------------------------------------------------------------------------------
D = 4


def W(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(sum(shape) + len(shape))
    return (torch.randn(*shape, generator=g, dtype=torch.float64) / math.sqrt(shape[-1])).to(dtype)


def kv_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    """The (B, n_f) key mask of a (B, n_q, n_f) attention mask: keys every query may see."""
    return None if mask is None else mask.all(1) if mask.dim() == 3 else mask


def self_mask(mask: torch.Tensor | None, n: int) -> torch.Tensor | None:
    """A (B, n_f, n_f) self-attention mask from the key mask."""
    return None if mask is None else kv_mask(mask)[:, None, :].expand(-1, n, -1)


def dt(x: Any) -> torch.dtype:
    """The inputs' dtype when they are float tensors (parameters follow it), else float32."""
    return x.dtype if isinstance(x, torch.Tensor) and x.is_floating_point() else torch.float32


def n_of(x: Any, axis: int) -> int:
    return len(x[0]) if axis == 1 and isinstance(x, list) else int(np.shape(x)[axis])


def _mechanisms() -> dict[str, Callable[..., Any]]:
    from attnsurvey import attention as at
    from attnsurvey import general_model as gm
    from attnsurvey.feature_related import co_attention as co
    from attnsurvey.feature_related import rotatory as ro
    from attnsurvey.general_mechanisms import alignment as al
    from attnsurvey.general_mechanisms import dimensionality as dm
    from attnsurvey.general_mechanisms import scoring as sc
    from attnsurvey.general_mechanisms import sparse_maps as sm
    from attnsurvey.general_mechanisms import structured as st
    from attnsurvey.query_related import capsule as ca
    from attnsurvey.query_related import multihead as mh
    from attnsurvey.query_related import multihop as mo
    from attnsurvey.query_related import types as ty
    from attnsurvey.transformer import lite, local, reformer, relative, synthesizer

    def t(dt: torch.dtype) -> dict[str, torch.dtype]:
        return {"dtype": dt}

    def mha(Q, K, V, m):
        dtp = dt(Q)
        return mh.multi_head_attention(
            Q, K, V, W(D, D, **t(dtp)), W(D, D, **t(dtp)), W(D, D, **t(dtp)), W(D, D, **t(dtp)), 2, m
        )

    return {
        "attend/softmax": lambda Q, K, V, m: at.attend(Q, K, V, m),
        "attend/sparsemax": lambda Q, K, V, m: at.attend(Q, K, V, m, align="sparsemax"),
        "attend/entmax15": lambda Q, K, V, m: at.attend(Q, K, V, m, align="entmax15"),
        "attend/hard": lambda Q, K, V, m: at.attend(Q, K, V, m, align="hard"),
        "attend/cosine": lambda Q, K, V, m: at.attend(Q, K, V, m, sc.cosine_score),
        "attend/euclidean": lambda Q, K, V, m: at.attend(Q, K, V, m, sc.euclidean_score),
        "attend/kpm": lambda Q, K, V, m: at.attend(Q, K, V, key_padding_mask=kv_mask(m)),
        "plain_attend": lambda Q, K, V, m: gm.plain_attend(Q, K, m),
        "sparsemax": lambda Q, K, V, m: sm.sparsemax(sc.scaled_dot_score(Q, K), m),
        "entmax15": lambda Q, K, V, m: sm.entmax15(sc.scaled_dot_score(Q, K), m),
        "additive_score+soft": lambda Q, K, V, m: al.soft_align(
            sc.additive_score(Q, K, W(D, D, **t(dt(Q))), W(D, D, **t(dt(Q))), W(D, **t(dt(Q)))), m
        ),
        "hard_align/argmax": lambda Q, K, V, m: al.hard_attend(sc.dot_score(Q, K), V[:, None], "argmax", mask=m),
        "local_align": lambda Q, K, V, m: al.local_align(
            sc.dot_score(Q, K), torch.zeros(np.shape(Q)[:-1], dtype=dt(Q)), 1.0, m
        ),
        "multidimensional_attend": lambda Q, K, V, m: dm.multidimensional_attend(
            Q, K, V, W(D, D, **t(dt(Q))), W(D, D, **t(dt(Q))), W(D, D, **t(dt(Q))), mask=m
        ),
        "structured_attend": lambda Q, K, V, m: st.structured_attend(
            sc.dot_score(Q[:, :1], K)[:, 0], W(2, 2, **t(dt(Q))), V, kv_mask(m)
        ),
        "multi_head_attention": mha,
        "self_attention": lambda Q, K, V, m: ty.self_attention(
            K, W(D, D, **t(dt(K))), W(D, D, **t(dt(K))), W(D, D, **t(dt(K))), self_mask(m, n_of(K, 1))
        ),
        "queryless_attention": lambda Q, K, V, m: ty.queryless_attention(
            K, V, W(D, D, **t(dt(K))), W(D, **t(dt(K))), W(D, **t(dt(K))), kv_mask(m)
        ),
        "learned_query_attention": lambda Q, K, V, m: ty.learned_query_attention(K, V, W(D, **t(dt(K))), kv_mask(m)),
        "mean_pool": lambda Q, K, V, m: ty.mean_pool(K, kv_mask(m)),
        "structured_self_attention": lambda Q, K, V, m: ty.structured_self_attention(
            K, W(3, D, **t(dt(K))), W(2, 3, **t(dt(K))), kv_mask(m)
        ),
        "source2token": lambda Q, K, V, m: ty.source2token(
            K, W(D, D, **t(dt(K))), W(D, D, **t(dt(K))), W(D, **t(dt(K))), mask=kv_mask(m)
        ),
        "capsule_attention": lambda Q, K, V, m: ca.capsule_attention(
            K, V, W(3, D, **t(dt(K))), W(3, D, **t(dt(K))), W(3, **t(dt(K))), kv_mask(m)
        ),
        "multi_hop_attention": lambda Q, K, V, m: mo.multi_hop_attention(
            Q[:, 0], K, V, lambda q, k: sc.dot_score(q[..., :D], k), 2, mask=kv_mask(m)
        ),
        "memory_hop": lambda Q, K, V, m: mo.memory_hop(Q[:, 0], K, V, kv_mask(m)),
        "max_pooled_co_attention": lambda Q, K, V, m: co.max_pooled_co_attention(
            Q, K, co.affinity_matrix(Q, K, W(D, D, **t(dt(Q)))), mask2=kv_mask(m)
        ),
        "max_pooled_co_attention/1-D masks": lambda Q, K, V, m: co.max_pooled_co_attention(
            Q, K, co.affinity_matrix(Q, K, W(D, D, **t(dt(Q)))), mask2=None if m is None else kv_mask(m)[0]
        ),
        "mean_key": lambda Q, K, V, m: co.mean_key(K, kv_mask(m)),
        "target_pooling": lambda Q, K, V, m: ro.target_pooling(K, kv_mask(m)),
        "relative_position_attention": lambda Q, K, V, m: relative.relative_position_attention(
            Q, K, V, W(5, D, **t(dt(Q))), W(5, D, **t(dt(Q))), m
        ),
        "gaussian_biased_attention": lambda Q, K, V, m: relative.gaussian_biased_attention(
            Q, K, V, torch.zeros(n_of(Q, 1), n_of(K, 1), dtype=dt(Q)), m
        ),
        "dense_synthesizer_weights": lambda Q, K, V, m: synthesizer.dense_synthesizer_weights(
            K,
            W(D, D, **t(dt(K))),
            W(D, **t(dt(K))),
            W(n_of(K, 1), D, **t(dt(K))),
            W(n_of(K, 1), **t(dt(K))),
            self_mask(m, n_of(K, 1)),
        ),
        "local_window_attention": lambda Q, K, V, m: local.local_window_attention(K, K, V, 1),
        "lsh_attention": lambda Q, K, V, m: reformer.lsh_attention(
            K, V, 2, max(n_of(K, 1), 1), generator=torch.Generator().manual_seed(0)
        ),
        "shared_qk_attention": lambda Q, K, V, m: reformer.shared_qk_attention(K, V, self_mask(m, n_of(K, 1))),
        "depthwise_conv": lambda Q, K, V, m: lite.depthwise_conv(K, W(D, 3, **t(dt(K)))),
        "LiteTransformerBlock": lambda Q, K, V, m: _module(lite.LiteTransformerBlock(D, 2, 8), dt(K))(
            K, key_padding_mask=kv_mask(m)
        ),
        "MultiHeadAttention": lambda Q, K, V, m: _module(mh.MultiHeadAttention(D, 2), dt(Q))(Q, K, m, X_v=V),
        "GeneralAttention": lambda Q, K, V, m: _module(gm.GeneralAttention(D, D), dt(Q))(Q, K, m),
    }


def _module(mod: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    torch.manual_seed(0)
    return mod.to(dtype).eval()


def inputs(B: int = 2, n_q: int = 3, n_f: int = 5, dtype: torch.dtype = torch.float32, scale: float = 1.0):
    g = torch.Generator().manual_seed(1)
    Q, K, V = (torch.randn(B, n, D, generator=g, dtype=torch.float64).to(dtype) * scale for n in (n_q, n_f, n_f))
    m = torch.ones(B, n_q, n_f, dtype=torch.bool)
    if n_f > 1:
        m[..., -1] = False  # last key masked everywhere (a padded slot)
    return Q, K, V, m


def shape_ok(out: Any, ref: Any) -> bool:
    return all(a.shape == b.shape for a, b in zip(tensors(out), tensors(ref)))


def close(out: Any, ref: Any, tol: float = 1e-5) -> bool:
    return shape_ok(out, ref) and all(
        torch.allclose(a.double(), b.double(), atol=tol, rtol=tol, equal_nan=False)
        for a, b in zip(tensors(out), tensors(ref))
        if a.is_floating_point()
    )


#: mechanisms without a mask argument (a NaN anywhere may reach every output)
MASKLESS = {"local_window_attention", "lsh_attention", "depthwise_conv"}
#: wrappers whose scores the harness computes outside the mechanism (a score function called on
#: NaN keys without the mask gives NaN gradients before the mechanism is reached: not checked for grads)
COMPOSED = {
    "sparsemax",
    "entmax15",
    "additive_score+soft",
    "local_align",
    "structured_attend",
    "hard_align/argmax",
    "max_pooled_co_attention",
    "max_pooled_co_attention/1-D masks",
}
#: self-attention mechanisms: the padded slot is also a query, whose own row is not compared
SELF_ROWS = {"self_attention", "shared_qk_attention", "dense_synthesizer_weights", "LiteTransformerBlock"}


def build_mechanism_cases() -> None:
    for name, run in _mechanisms().items():
        g = "mechanism"
        # B = 0, n_f = 0, n_q = 0, length 1: a finite result of the right (empty) shape or a clear error.
        for var, kw in {
            "B=0": dict(B=0),
            "n_f=0": dict(n_f=0),
            "n_q=0": dict(n_q=0),
            "n=1": dict(n_q=1, n_f=1),
        }.items():
            add(g, var, name, lambda kw=kw, run=run: run(*inputs(**kw)))
        for dt in (torch.float16, torch.bfloat16, torch.float64):
            add(
                g,
                str(dt).replace("torch.", ""),
                name,
                lambda dt=dt, run=run: run(*inputs(dtype=dt)),
                check=lambda out, dt=dt: finite(out)
                and all(t.dtype == dt for t in tensors(out) if t.is_floating_point()),
            )

        # NaN / Inf in the masked slot: output equal to the clean input's.
        def poisoned(value: float, run=run):
            Q, K, V, m = inputs(dtype=torch.float64)
            K2, V2 = K.clone(), V.clone()
            K2[:, -1] = value
            V2[:, -1] = value
            return run(Q, K2, V2, m), run(Q, K, V, m)

        if name not in MASKLESS:

            def inert(pair, self_rows=name in SELF_ROWS) -> bool:
                if self_rows:  # the padded token's own output row is not a real token's
                    return close(first(pair[0])[:, :-1], first(pair[1])[:, :-1], 1e-9)
                return close(pair[0], pair[1], 1e-9)

            for value in (float("nan"), float("inf")):
                add(g, f"{value} in masked slot", name, lambda v=value, p=poisoned: p(v), check=inert)

            def poisoned_grads(run=run, name=name):
                """Gradients of Q and K with NaN in the masked slot: finite (0 * NaN must not reach them)."""
                Q, K, V, m = inputs(dtype=torch.float64)
                K2, V2 = K.clone(), V.clone()
                K2[:, -1] = float("nan")
                V2[:, -1] = float("nan")
                Qg, Kg, Vg = (x.requires_grad_(True) for x in (Q, K2, V2))
                out = first(run(Qg, Kg, Vg, m))
                rows = out[:, :-1] if name in SELF_ROWS else out
                rows.sum().backward()
                return [x.grad for x in (Qg, Kg, Vg) if x.grad is not None]

            if name not in COMPOSED:
                add(
                    g,
                    "grad, nan in masked slot",
                    name,
                    poisoned_grads,
                    check=lambda grads: all(torch.isfinite(t).all() for t in grads),
                )

        # Fully masked row (first query of the first batch sees nothing): finite, other rows unchanged.
        def fully_masked(run=run):
            Q, K, V, m = inputs(dtype=torch.float64)
            m2 = m.clone()
            m2[0, 0] = False
            return run(Q, K, V, m2)

        add(g, "fully masked row", name, fully_masked)
        add(g, "scale 1e20", name, lambda run=run: run(*inputs(dtype=torch.float64, scale=1e20)))
        add(g, "numpy input", name, lambda run=run: run(*[x.numpy() if x.is_floating_point() else x for x in inputs()]))
        add(g, "list input", name, lambda run=run: run(*[x.tolist() if x.is_floating_point() else x for x in inputs()]))
        add(
            g,
            "int input",
            name,
            lambda run=run: run(*[(x * 3).long() if x.is_floating_point() else x for x in inputs()]),
        )


# ----------------------------------------------------------------------------------------------
# Scores at extreme scale, against a float64 reference computed on rescaled inputs.
# ----------------------------------------------------------------------------------------------
def build_score_cases() -> None:
    from attnsurvey.general_mechanisms import scoring as sc

    Q, K, _, _ = inputs(dtype=torch.float32)
    for s in (1e20, 1e30):
        add(
            "score",
            f"scale {s:g}",
            "cosine_score",
            lambda s=s: sc.cosine_score(Q * s, K * s),
            check=lambda e: close(e, sc.cosine_score(Q.double(), K.double()), 1e-5),
        )
        add(
            "score",
            f"scale {s:g}",
            "euclidean_score",
            lambda s=s: sc.euclidean_score(Q * s, K * s),
            check=lambda e, s=s: finite(e) or s > 1e19 and bool((e <= 0).all()),
        )
    add(
        "score",
        "huge norms",
        "euclidean_score/1e20",
        lambda: sc.euclidean_score(Q * 1e20, K * 1e20),
        check=lambda e: bool(torch.isfinite(e).all())
        and torch.allclose(e.double() / 1e20, sc.euclidean_score(Q.double(), K.double()), rtol=1e-4),
    )
    Qh, Kh = (Q * 300).half(), (K * 300).half()  # float16: squares of a few hundred overflow
    add(
        "score",
        "float16 x300",
        "cosine_score",
        lambda: sc.cosine_score(Qh, Kh),
        check=lambda e: close(e, sc.cosine_score(Q.double(), K.double()), 1e-2),
    )
    add("score", "float16 x300", "euclidean_score", lambda: sc.euclidean_score(Qh, Kh), check=finite)
    add(
        "score",
        "scale 1e20",
        "CosineScore module",
        lambda: sc.CosineScore()(Q * 1e20, K * 1e20),
        check=lambda e: close(e, sc.cosine_score(Q.double(), K.double()), 1e-5),
    )


# ----------------------------------------------------------------------------------------------
# Empty batches and positions in the local-alignment family, the seq2seq model and losses.
# ----------------------------------------------------------------------------------------------
def build_empty_and_loss_cases() -> None:
    from attnsurvey import seq2seq as s2s
    from attnsurvey import training
    from attnsurvey.evaluation import extrinsic as ex
    from attnsurvey.evaluation import intrinsic as it
    from attnsurvey.feature_related import co_attention as co
    from attnsurvey.general_mechanisms import alignment as al
    from attnsurvey.general_mechanisms import pointer as pt
    from attnsurvey.query_related import capsule as ca
    from attnsurvey.transformer import lite

    e0 = torch.zeros(0, 5)
    add("empty", "B=0", "window_mask", lambda: al.window_mask(5, torch.zeros(0), 1))
    add("empty", "B=0", "gaussian_emphasis", lambda: al.gaussian_emphasis(5, torch.zeros(0), 1.0))
    add("empty", "B=0", "monotonic_position", lambda: al.monotonic_position(torch.zeros(0, dtype=torch.long), 5))
    add("empty", "B=0", "local_align", lambda: al.local_align(e0, torch.zeros(0), 1.0))
    add(
        "empty",
        "B=0",
        "Seq2Seq",
        lambda: _module(s2s.Seq2Seq(7), torch.float32)(
            torch.zeros(0, 4, dtype=torch.long), torch.zeros(0, 3, dtype=torch.long), torch.zeros(0, dtype=torch.long)
        ),
    )
    add(
        "empty",
        "B=0",
        "Seq2Seq.greedy_decode",
        lambda: _module(s2s.Seq2Seq(7), torch.float32).greedy_decode(
            torch.zeros(0, 4, dtype=torch.long), 3, torch.zeros(0, dtype=torch.long)
        )
        if hasattr(s2s.Seq2Seq, "greedy_decode")
        else s2s.greedy_decode,
    )
    add("empty", "n_f=0", "max_pooled_affinity_scores", lambda: co.max_pooled_affinity_scores(torch.zeros(2, 3, 0)))
    add("empty", "n_f=0", "hard_alignment", lambda: it.hard_alignment(torch.zeros(2, 0)))
    add("empty", "n_f=0", "permuted_attention", lambda: it.permuted_attention(torch.zeros(2, 0)))
    add(
        "empty",
        "n_f=0",
        "permutation_output_change",
        lambda: it.permutation_output_change(lambda a: a.sum(-1), torch.zeros(2, 0)),
    )
    add("empty", "B=0", "permuted_attention", lambda: it.permuted_attention(torch.zeros(0, 4)))
    add("empty", "n_f=0", "js_divergence", lambda: it.js_divergence(torch.zeros(2, 0), torch.zeros(2, 0)))
    add("mean", "empty", "bleu", lambda: ex.bleu([], []))
    add("mean", "empty", "wer", lambda: ex.wer([], []))
    add("mean", "empty", "kendall_tau", lambda: it.kendall_tau(torch.zeros(0), torch.zeros(0)))
    add(
        "mean",
        "no gold links",
        "alignment_loss",
        lambda: it.alignment_loss(torch.full((2, 3), 1 / 3), torch.zeros(2, 3, dtype=torch.bool)),
    )
    add("mean", "empty", "psnr", lambda: ex.psnr(torch.ones(0, 4), torch.ones(0, 4), 1.0))
    add("empty", "n_f=0", "depthwise_conv", lambda: lite.depthwise_conv(torch.zeros(2, 0, 4), torch.ones(4, 3)))
    add("empty", "n_f=0", "LiteTransformerBlock", lambda: lite.LiteTransformerBlock(4, 2, 8)(torch.zeros(2, 0, 4)))

    # Padding must not leak into real tokens (LiteTransformerBlock's convolution branch).
    def lite_leak():
        torch.manual_seed(0)
        blk = lite.LiteTransformerBlock(4, 2, 8).double().eval()
        X = torch.randn(1, 5, 4, dtype=torch.float64)
        m = torch.tensor([[True, True, True, False, False]])
        X2 = X.clone()
        X2[:, 3:] = 1e3
        return (
            first(blk(X, key_padding_mask=m))[:, :3],
            first(blk(X2, key_padding_mask=m))[:, :3],
            first(blk(X[:, :3])),
        )

    add(
        "mask",
        "padding leak",
        "LiteTransformerBlock",
        lite_leak,
        check=lambda o: close(o[0], o[1], 1e-9) and close(o[0], o[2], 1e-9),
    )

    # 1-D shared masks in the pooling functions.
    A = torch.randn(2, 3, 5)
    add(
        "mask",
        "1-D shared mask",
        "max_pooled_affinity_scores",
        lambda: co.max_pooled_affinity_scores(
            A, mask1=torch.ones(3, dtype=torch.bool), mask2=torch.tensor([True] * 4 + [False])
        ),
    )
    from attnsurvey.feature_related import rotatory as ro
    from attnsurvey.query_related import types as ty

    F5, m5 = torch.randn(2, 5, 4), torch.tensor([True] * 4 + [False])
    w4, W4 = torch.randn(4), torch.randn(4, 4)
    for name, fn in {
        "mean_key": lambda: co.mean_key(F5, m5),
        "target_pooling": lambda: ro.target_pooling(F5, m5),
        "mean_pool": lambda: ty.mean_pool(F5, m5),
        "learned_query_attention": lambda: ty.learned_query_attention(F5, F5, w4, m5),
        "queryless_attention": lambda: ty.queryless_attention(F5, F5, W4, w4, w4, m5),
        "source2token": lambda: ty.source2token(F5, W4, W4, w4, mask=m5),
        "capsule_attention": lambda: ca.capsule_attention(
            F5, F5, torch.randn(3, 4), torch.randn(3, 4), torch.randn(3), m5
        ),
        "structured_self_attention": lambda: ty.structured_self_attention(F5, torch.randn(3, 4), torch.randn(2, 3), m5),
    }.items():
        add("mask", "1-D shared mask", name, fn)

    # pointer log-probabilities for allowed positions.
    add(
        "pointer",
        "allowed tiny prob",
        "pointer_log_probs",
        lambda: pt.pointer_log_probs(torch.tensor([[0.0, -1000.0, 5.0]]), torch.tensor([[True, True, False]])),
        check=lambda lp: abs(float(lp[0, 1]) + 1000.0) < 1e-3,
    )

    # Means over empty or all-padding inputs: a finite, documented value or a clear error.
    logits0, t0 = torch.zeros(0, 3, 5), torch.zeros(0, 3, dtype=torch.long)
    add("mean", "empty", "sequence_loss", lambda: s2s.sequence_loss(logits0, t0))
    add(
        "mean",
        "all padding",
        "sequence_loss",
        lambda: s2s.sequence_loss(torch.zeros(2, 3, 5), torch.zeros(2, 3, dtype=torch.long)),
    )
    add("mean", "empty", "token_accuracy", lambda: s2s.token_accuracy(logits0, t0))
    add(
        "mean",
        "all padding",
        "token_accuracy",
        lambda: s2s.token_accuracy(torch.zeros(2, 3, 5), torch.zeros(2, 3, dtype=torch.long)),
    )
    add("mean", "empty", "sequence_accuracy", lambda: s2s.sequence_accuracy(t0, t0))
    add("mean", "empty", "accuracy", lambda: training.accuracy(torch.zeros(0, 5), torch.zeros(0, dtype=torch.long)))
    add(
        "mean",
        "all ignored",
        "accuracy",
        lambda: training.accuracy(torch.zeros(3, 5), torch.full((3,), -1), ignore_index=-1),
    )
    add(
        "mean",
        "empty",
        "capsule_loss",
        lambda: ca.capsule_loss(
            torch.zeros(0, 3), torch.zeros(0, 3, 4), torch.zeros(0, 4), torch.zeros(0, dtype=torch.long)
        ),
    )
    add(
        "mean",
        "empty",
        "supervised_attention_loss",
        lambda: it.supervised_attention_loss(
            torch.zeros(0, 3), torch.zeros(0, dtype=torch.long), torch.zeros(0, 5), torch.zeros(0, 5), 1.0
        ),
    )
    add("mean", "empty", "alignment_loss", lambda: it.alignment_loss(torch.zeros(0, 5), torch.zeros(0, 5)))
    add("mean", "empty", "perplexity", lambda: ex.perplexity(torch.zeros(0, 5), torch.zeros(0, dtype=torch.long)))
    add(
        "mean",
        "all ignored",
        "perplexity",
        lambda: ex.perplexity(torch.zeros(3, 5), torch.zeros(3, dtype=torch.long), ignore_index=0),
    )
    add(
        "mean", "empty", "attention_correctness", lambda: it.attention_correctness(torch.zeros(0, 5), torch.zeros(0, 5))
    )
    add(
        "mean",
        "empty",
        "alignment_error_rate",
        lambda: it.alignment_error_rate(torch.zeros(2, 3, dtype=torch.bool), torch.zeros(2, 3, dtype=torch.bool)),
    )
    add(
        "mean",
        "empty",
        "precision_recall_f1",
        lambda: ex.precision_recall_f1(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)),
    )
    add("mean", "empty", "spearman", lambda: it.spearman(torch.zeros(0), torch.zeros(0)))
    add("mean", "empty", "concentration", lambda: al.concentration(torch.zeros(0, 5)))
    add(
        "mean", "empty", "score_function_surrogate", lambda: al.score_function_surrogate(torch.zeros(0), torch.zeros(0))
    )

    def baseline():
        b = al.MovingAverageBaseline()
        b.update(torch.ones(3))
        b.update(torch.zeros(0))
        return b.update(torch.ones(3))

    add("mean", "empty batch", "MovingAverageBaseline", baseline)
    add(
        "mean",
        "empty",
        "pointer_loss",
        lambda: pt.pointer_loss(pt.PointerNetwork(), (torch.zeros(0, 4, 1), torch.zeros(0, 4, dtype=torch.long))),
    )

    # Tiny Gaussian widths; sigma = 0 is the documented limit (1 at l = p, 0 elsewhere).
    add(
        "sigma",
        "sigma=0",
        "gaussian_emphasis",
        lambda: al.gaussian_emphasis(5, torch.tensor([2.0]), 0.0),
        check=lambda g: torch.equal(g, torch.tensor([[0.0, 0.0, 1.0, 0.0, 0.0]])),
    )
    add("sigma", "sigma=1e-30", "gaussian_emphasis", lambda: al.gaussian_emphasis(5, torch.tensor([2.3]), 1e-30))
    add(
        "sigma",
        "sigma=1e-30",
        "local_align",
        lambda: al.local_align(torch.zeros(1, 5), torch.tensor([2.3]), 2.0, sigma=1e-30),
    )


def build_hyperparameter_cases() -> None:
    from attnsurvey.feature_related import rotatory as ro
    from attnsurvey.general_mechanisms import alignment as al
    from attnsurvey.query_related import multihead as mh
    from attnsurvey.query_related import multihop as mo
    from attnsurvey.query_related.types import SelfAttention
    from attnsurvey.transformer import local, model, relative

    e = torch.zeros(1, 5)
    bad = {
        "window D=-1 (window_mask)": lambda: al.window_mask(5, torch.tensor([2.0]), -1),
        "window D=-1 (local_align)": lambda: al.local_align(e, torch.tensor([2.0]), -1.0),
        "window D=-1 (LocalAttention)": lambda: al.LocalAttention(4, 4, -1.0),
        "window w=-1 (local_window_attention)": lambda: local.local_window_attention(*inputs()[1:3], inputs()[2], -1),
        "window w=-1 (local_window_mask)": lambda: local.local_window_mask(5, -1),
        "sigma=-1 (gaussian_emphasis)": lambda: al.gaussian_emphasis(5, torch.tensor([2.0]), -1.0),
        "sigma=-1 (local_align)": lambda: al.local_align(e, torch.tensor([2.0]), 2.0, sigma=-1.0),
        "h=3 !| d_model (MultiHeadAttention)": lambda: mh.MultiHeadAttention(8, 3),
        "h=0 (MultiHeadAttention)": lambda: mh.MultiHeadAttention(8, 0),
        "h=3 !| d_model (multi_head_attention)": lambda: mh.multi_head_attention(
            *(torch.zeros(1, 2, 8),) * 3, *(torch.zeros(8, 8),) * 4, 3
        ),
        "h=3 !| d_model (EncoderLayer)": lambda: model.EncoderLayer(8, 3, 16),
        "h=3 !| d_model (RelativeSelfAttention)": lambda: relative.RelativeSelfAttention(8, 3),
        "hops=0 (multi_hop_attention)": lambda: mo.multi_hop_attention(
            torch.zeros(1, 4), torch.zeros(1, 3, 4), torch.zeros(1, 3, 4), lambda q, k: q @ k.transpose(-1, -2), 0
        ),
        "hops=0 (MultiHopAttention)": lambda: mo.MultiHopAttention(4, 4, 0),
        "hops=0 (EndToEndMemoryNetwork)": lambda: mo.EndToEndMemoryNetwork(10, 4, 0, 3),
        "hops=0 (RotatoryAttention)": lambda: ro.RotatoryAttention(4, 4, hops=0),
        "d_k=0 (SelfAttention)": lambda: SelfAttention(4, d_k=0),
    }
    from attnsurvey.general_mechanisms.scoring import CosineScore

    bad["temperature 0 (CosineScore scale=0)"] = lambda: CosineScore(scale=0.0)
    from attnsurvey import attention as at

    Q, K, V, m = inputs()
    bad["scale=inf (attend)"] = lambda: at.attend(Q, K, V, m, scale=float("inf"))
    bad["scale=nan (attend)"] = lambda: at.attend(Q, K, V, m, scale=float("nan"))
    bad["temperature 0 (CosineScore scale=-1)"] = lambda: CosineScore(scale=-1.0)
    bad["dropout_p=1.5 (attend)"] = lambda: at.attend(Q, K, V, m, dropout_p=1.5)
    for name, fn in bad.items():
        add("hyper-parameter", name.split(" ")[0], name, fn, expect_error=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-v", "--verbose", action="store_true", help="list every case that is not ok/clear")
    args = ap.parse_args()
    torch.set_num_threads(1)
    build_mechanism_cases()
    build_score_cases()
    build_empty_and_loss_cases()
    build_hyperparameter_cases()
    results = [(c, *classify(c)) for c in CASES]
    by_group: dict[str, Counter] = defaultdict(Counter)
    by_var: dict[str, Counter] = defaultdict(Counter)
    for c, verdict, _ in results:
        by_group[c.group][verdict] += 1
        by_var[c.variation][verdict] += 1
    kinds = ("ok", "clear", "crash", "silent", "n/a")
    for title, table in (("group", by_group), ("variation", by_var)):
        print(f"\n{title:<26}" + "".join(f"{k:>8}" for k in kinds) + f"{'total':>8}")
        for key in sorted(table):
            row = table[key]
            print(f"{key:<26}" + "".join(f"{row[k]:>8}" for k in kinds) + f"{sum(row.values()):>8}")
    total = Counter(v for _, v, _ in results)
    print(f"\n{'TOTAL':<26}" + "".join(f"{total[k]:>8}" for k in kinds) + f"{len(results):>8}")
    if args.verbose:
        print()
        for c, verdict, why in results:
            if verdict in ("crash", "silent"):
                print(f"{verdict:<7} {c.group}/{c.variation}/{c.name}: {why[:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
