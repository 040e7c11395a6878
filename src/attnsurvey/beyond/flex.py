"""FlexAttention: the general attention model as a program, compiled (beyond the survey).

The survey's general model scores every key, then aligns the scores into
weights, with masks and biases shaping the alignment. PyTorch's
``torch.nn.attention.flex_attention.flex_attention`` (He, Guessous, Liang and
Dong, 2024) takes that model as two small Python functions and compiles them
into one fused attention kernel (tiles and an online softmax, as
:mod:`attnsurvey.beyond.tiled`, never the full ``n x n`` matrix):

* a ``score_mod(score, b, h, q_idx, kv_idx) -> score`` rewrites one scaled
  dot-product score (a bias such as ALiBi's ``-m_h |i - j|``);
* a ``mask_mod(b, h, q_idx, kv_idx) -> bool`` says whether query ``q_idx`` may
  attend to key ``kv_idx`` (``True`` = may attend, the package's convention).
  ``create_block_mask`` evaluates it once per block of 128 x 128 (query, key)
  pairs, so the kernel skips the blocks where it is False everywhere and calls
  it again only inside the blocks that are partly masked.

Each factory here returns such a function for a mask or bias the package
builds as a dense tensor for its core :func:`attnsurvey.attention.attend`;
the tests check every pair ``(q_idx, kv_idx)`` against that tensor and the
compiled kernel's contexts against ``attend``'s:

==========================  ================================================================
here                         the package's dense counterpart
==========================  ================================================================
:func:`causal_mod`           :func:`attnsurvey.masking.causal_mask`
:func:`band_mod`             :func:`attnsurvey.masking.band_mask` (``|i - j| <= w``, as
                             :mod:`attnsurvey.transformer.local`)
:func:`prefix_lm_mod`        :func:`attnsurvey.masking.prefix_lm_mask`
:func:`key_padding_mod`      :func:`attnsurvey.masking.key_padding_mask` (``key_padding_mask=``)
:func:`document_mod`         :func:`attnsurvey.masking.document_mask`
:func:`sink_mod`             :func:`attnsurvey.masking.sink_mask` (StreamingLLM)
:func:`alibi_mod`            :func:`attnsurvey.beyond.positions.alibi_bias` (``bias=``)
==========================  ================================================================

Masks combine with torch's ``and_masks`` / ``or_masks``. :func:`flex_attend`
runs the compiled kernel. Conventions compared with :func:`~attnsurvey.attention.attend`:

* a fully-masked query row gets a zero context in both;
* masked positions are *not* inert in flex_attention. With torch 2.13's CPU
  kernel, an Inf or NaN value at a masked key reached the context of every
  query whose block of keys held it (the weight 0 times the value), and a
  NaN key that a query may attend left its context finite, where ``attend``
  gives NaN. :func:`flex_attend` therefore refuses non-finite keys and values.

Compilation: on the CPU, Inductor writes C++ with vector instructions: it
needs a C++ compiler, a CPU with AVX2 and ATen's native kernels, so it does not
run inside the pinned numeric environment (:mod:`attnsurvey.numeric_env` sets
``ATEN_CPU_CAPABILITY=default``). :func:`unavailable_reason` says when it
cannot run, and :func:`flex_attend` then raises :class:`FlexUnavailableError`
(the tests run the compiled checks in a child process outside the pin). The compiled
callable is made once per process (:func:`compiled_flex_attention`); a new
``score_mod`` or ``mask_mod`` function, a new Python constant captured by one,
a new shape or dtype recompiles it (seconds each), and after
``torch._dynamo.config.recompile_limit`` (8) recompilations torch runs
flex_attention uncompiled (the same result, with the full score matrix).

Shapes: ``(B, h, n, d)``: batch, heads, positions, head size, as
``F.scaled_dot_product_attention``.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from .._checks import InputTypeError, as_tensor, check_index_range, check_integers, check_rank, check_same_dtype
from ..catalog import catalogued
from ..masking import all_finite

CHAPTER = "chapters/ch06_6_sinks_and_gates.ipynb"

#: ``mask_mod(b, h, q_idx, kv_idx) -> bool tensor``: ``True`` = query ``q_idx`` may attend to key ``kv_idx``.
MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
#: ``score_mod(score, b, h, q_idx, kv_idx) -> score``: the new score of one (query, key) pair.
ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]

#: Input dtypes :func:`flex_attend` accepts (the CPU kernel accumulates in float32 for both).
DTYPES = (torch.float32, torch.bfloat16)


class FlexUnavailableError(RuntimeError):
    """flex_attention cannot be compiled here (on the CPU: no C++ compiler, no AVX2, or pinned portable kernels).

    :func:`unavailable_reason` gives the same message without raising; a caller
    (the tests) can check it first and skip.
    """


def _integer_tensor(x: object, symbol: str, rank: int, layout: str, who: str) -> Tensor:
    """Return ``x`` if it is an integer tensor of rank ``rank``; else a clear error naming ``who`` and ``symbol``."""
    if not isinstance(x, Tensor) or x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        got = f"dtype={x.dtype}" if isinstance(x, Tensor) else type(x).__name__
        raise InputTypeError(f"{who} needs {symbol} to be an integer tensor {layout}, got {got}")
    if x.dim() != rank:
        raise ValueError(f"{who} needs {symbol} of shape {layout}, got shape {tuple(x.shape)}")
    return x


@catalogued("extra:flex-attention")
def causal_mod(offset: int = 0) -> MaskMod:
    """The mask_mod of :func:`attnsurvey.masking.causal_mask`: query ``i`` may attend to keys ``j <= i + offset``.

    Args:
        offset: how many positions beyond the diagonal each query sees (>= 0).

    Returns:
        ``mask_mod(b, h, q_idx, kv_idx)``, ``True`` = may attend.

    Raises:
        InputTypeError: ``offset`` is not an int.
        ValueError: ``offset < 0``.
    """
    check_integers("causal_mod", minimum=0, offset=offset)

    def causal(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return kv_idx <= q_idx + offset

    return causal


@catalogued("extra:flex-attention")
def band_mod(w: int) -> MaskMod:
    """The mask_mod of :func:`attnsurvey.masking.band_mask`: the local window ``|i - j| <= w``.

    The package's sliding window (:mod:`attnsurvey.transformer.local`): ``2w + 1``
    keys around each query, both sides.

    Args:
        w: the window half-width (>= 0).

    Returns:
        ``mask_mod(b, h, q_idx, kv_idx)``, ``True`` = may attend.

    Raises:
        InputTypeError: ``w`` is not an int.
        ValueError: ``w < 0``.
    """
    check_integers("band_mod (window half-width)", minimum=0, w=w)

    def band(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return (q_idx - kv_idx).abs() <= w

    return band


@catalogued("extra:flex-attention")
def prefix_lm_mod(prefix_lengths: Tensor) -> MaskMod:
    """The mask_mod of :func:`attnsurvey.masking.prefix_lm_mask`: ``j <= i`` or ``j < prefix_lengths[b]``.

    Args:
        prefix_lengths: one prefix length per example, on the inputs' device.

    Shape:
        prefix_lengths: ``(B,)``.

    Returns:
        ``mask_mod(b, h, q_idx, kv_idx)``, ``True`` = may attend.

    Raises:
        InputTypeError: ``prefix_lengths`` is not an integer tensor.
        ValueError: it is not 1-D.
    """
    p = _integer_tensor(prefix_lengths, "prefix_lengths", 1, "(B,)", "prefix_lm_mod")

    def prefix_lm(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return (kv_idx <= q_idx) | (kv_idx < p[b])

    return prefix_lm


@catalogued("extra:flex-attention")
def key_padding_mod(lengths: Tensor, n_f: int) -> MaskMod:
    """The mask_mod of :func:`attnsurvey.masking.key_padding_mask`: keys ``j < lengths[b]`` may be attended.

    Args:
        lengths: one length per example, on the inputs' device, each in ``[0, n_f]``.
        n_f: the number of keys (as :func:`~attnsurvey.masking.key_padding_mask` takes it).

    Shape:
        lengths: ``(B,)``.

    Returns:
        ``mask_mod(b, h, q_idx, kv_idx)``, ``True`` = may attend.

    Raises:
        InputTypeError: ``lengths`` is not an integer tensor, or ``n_f`` not an integer.
        ValueError: it is not 1-D, or a length lies outside ``[0, n_f]``.
    """
    check_integers("key_padding_mod", minimum=0, n_f=n_f)
    n = _integer_tensor(lengths, "lengths", 1, "(B,)", "key_padding_mod")
    check_index_range(n, n_f + 1, "lengths", f"key_padding_mod (n_f={n_f} keys)")

    def key_padding(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return kv_idx < n[b]

    return key_padding


@catalogued("extra:flex-attention")
def document_mod(doc_ids: Tensor) -> MaskMod:
    """The mask_mod of :func:`attnsurvey.masking.document_mask`: query and key lie in the same packed document.

    Args:
        doc_ids: the document id of every position, on the inputs' device.

    Shape:
        doc_ids: ``(B, n)``.

    Returns:
        ``mask_mod(b, h, q_idx, kv_idx)``, ``True`` = may attend.

    Raises:
        InputTypeError: ``doc_ids`` is not an integer tensor.
        ValueError: it is not 2-D.
    """
    doc = _integer_tensor(doc_ids, "doc_ids", 2, "(B, n)", "document_mod")

    def document(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return doc[b, q_idx] == doc[b, kv_idx]

    return document


@catalogued("extra:flex-attention")
def sink_mod(n_sink: int, window: int) -> MaskMod:
    """The mask_mod of :func:`attnsurvey.masking.sink_mask`: the first ``n_sink`` keys and the last ``window`` keys, causally.

    Query ``i`` may attend to key ``j <= i`` when ``j < n_sink`` or ``i - window < j``
    (StreamingLLM's attention sinks plus its rolling window).

    Args:
        n_sink: sink keys (>= 0).
        window: keys in the rolling window, the query's own included (>= 1).

    Returns:
        ``mask_mod(b, h, q_idx, kv_idx)``, ``True`` = may attend.

    Raises:
        InputTypeError: a size is not an int.
        ValueError: ``n_sink < 0`` or ``window < 1``.
    """
    check_integers("sink_mod", minimum=0, n_sink=n_sink)
    check_integers("sink_mod", minimum=1, window=window)

    def sink(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return (kv_idx <= q_idx) & ((kv_idx < n_sink) | (q_idx - kv_idx < window))

    return sink


@catalogued("extra:flex-attention")
def alibi_mod(slopes: Tensor) -> ScoreMod:
    """The score_mod of :func:`attnsurvey.beyond.positions.alibi_bias`: ``score - m_h |i - j|``.

    Args:
        slopes: the head slopes ``m_h`` (:func:`attnsurvey.beyond.positions.alibi_slopes`),
            on the inputs' device; used in float32, the dtype of flex_attention's scores.

    Shape:
        slopes: ``(h,)``.

    Returns:
        ``score_mod(score, b, h, q_idx, kv_idx)``.

    Raises:
        InputTypeError: ``slopes`` is not a floating-point tensor.
        ValueError: it is not 1-D.
    """
    m = check_rank(as_tensor(slopes, "slopes"), 1, "slopes", "(h,)").to(torch.float32)

    def alibi(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return score - m[h] * (q_idx - kv_idx).abs()

    return alibi


def _inductor_cxx() -> str | None:
    """The C++ compiler Inductor would run (its own search, else ``$CXX`` or ``g++``), or None when none is found."""
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler  # private: guarded below

        name = get_cpp_compiler()
    except Exception:  # no compiler found (InvalidCxxCompiler), or the private API moved
        name = os.environ.get("CXX") or "g++"
    return shutil.which(name)


def unavailable_reason(device: torch.device | str = "cpu") -> str | None:
    """Why :func:`flex_attend` cannot compile flex_attention for ``device``, or None when it can.

    On the CPU, torch 2.13's Inductor compiles flex_attention from a C++ template with
    vector instructions, and refuses (``NotImplementedError`` when it compiles) unless the
    CPU has AVX2, ATen's kernels are not pinned to the portable ones
    (``ATEN_CPU_CAPABILITY=default``, which :mod:`attnsurvey.numeric_env` sets) and the
    system is not macOS; it also needs a C++ compiler (looked up with ``shutil.which``).
    On a GPU, Triton compiles it (no check here).

    Args:
        device: the device of the inputs.

    Returns:
        A message, or None.
    """
    if torch.device(device).type != "cpu":
        return None
    why = "flex_attention is compiled by torch.compile (Inductor), whose CPU kernel "
    if sys.platform == "darwin":
        return why + "torch does not support on macOS"
    if not torch.cpu._is_avx2_supported():
        return why + "needs a CPU with AVX2"
    if os.environ.get("ATEN_CPU_CAPABILITY") == "default":
        return why + (
            "needs ATen's vector kernels, and ATEN_CPU_CAPABILITY=default (the pinned numeric environment, "
            "attnsurvey.numeric_env) turns them off; run outside the pin"
        )
    if _inductor_cxx() is None:
        return why + "needs a C++ compiler, and none was found (set CXX or install g++)"
    return None


@functools.cache
def compiled_flex_attention() -> Callable[..., Tensor]:
    """``torch.compile(flex_attention, dynamic=False)``, made once per process.

    ``dynamic=False``: with torch's default automatic dynamic shapes, the compilation
    of a prefix-LM mask_mod that followed two band masks of different widths generated
    C++ that did not compile in torch 2.13's CPU template (an undeclared
    ``cur_qSplitSize8``); with static shapes the same sequence compiles.

    Returns:
        The compiled callable, with flex_attention's arguments.
    """
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def _check_inputs(Q: Tensor, K: Tensor, V: Tensor, enable_gqa: bool) -> None:
    for x, name, layout in ((Q, "Q", "(B, h, n_q, d_k)"), (K, "K", "(B, h, n_f, d_k)"), (V, "V", "(B, h, n_f, d_v)")):
        check_rank(as_tensor(x, name), 4, name, layout)
        if x.dtype not in DTYPES:
            raise InputTypeError(f"flex_attend needs float32 or bfloat16 {name}, got dtype={x.dtype}")
    check_same_dtype(Q=Q, K=K, V=V)
    shapes = f"Q {tuple(Q.shape)}, K {tuple(K.shape)}, V {tuple(V.shape)}"
    heads_ok = Q.shape[1] % K.shape[1] == 0 if enable_gqa else Q.shape[1] == K.shape[1]
    if not (Q.shape[0] == K.shape[0] == V.shape[0] and K.shape[1] == V.shape[1] and heads_ok):
        gqa = " (with enable_gqa, h of K and V dividing h of Q)" if enable_gqa else ""
        raise ValueError(f"flex_attend needs Q, K and V to share B and h{gqa}, got {shapes}")
    if K.shape[2] != V.shape[2] or Q.shape[3] != K.shape[3]:
        raise ValueError(f"flex_attend needs n_f of K == n_f of V and d_k of Q == d_k of K, got {shapes}")
    if min(Q.shape[2], K.shape[2]) == 0:
        raise ValueError(f"flex_attend needs n_q and n_f of at least 1, got {shapes}")
    if not (Q.device == K.device == V.device):
        raise ValueError(f"flex_attend needs Q, K and V on one device, got {Q.device}, {K.device}, {V.device}")
    if torch.is_grad_enabled() and any(x.requires_grad for x in (Q, K, V)):
        raise ValueError("flex_attend is forward only: call it under torch.no_grad() or on detached tensors")
    for x, name in ((K, "K"), (V, "V")):
        if not all_finite(x):
            raise ValueError(
                f"flex_attend needs finite {name}: flex_attention's kernel does not keep a NaN or Inf at a "
                "masked key out of the contexts, as attend does"
            )


@catalogued(
    "extra:flex-attention",
    title="FlexAttention: masks and biases as mask_mod/score_mod programs, compiled into one fused kernel",
)
def flex_attend(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    mask_mod: MaskMod | None = None,
    score_mod: ScoreMod | None = None,
    *,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """Attention with the scores rewritten by ``score_mod`` and aligned under ``mask_mod``, by compiled flex_attention.

    The context of :func:`attnsurvey.attention.attend` with the dense mask (``True`` =
    may attend) and bias that the mods describe: ``softmax(score_mod(Q K^T * scale))``
    over the keys ``mask_mod`` allows, times ``V``. The block mask is built from
    ``mask_mod`` for these shapes (``create_block_mask``, blocks of 128; ``n`` need
    not be a multiple of it), then the kernel compiled by :func:`compiled_flex_attention`
    runs. A fully-masked query row gets the zero context, as in ``attend``.
    Forward only: torch 2.13 compiles flex_attention for inference only on the CPU.

    Args:
        Q: queries, float32 or bfloat16.
        K: keys, same dtype and device, finite.
        V: values, same dtype and device, finite.
        mask_mod: ``mask_mod(b, h, q_idx, kv_idx)``, ``True`` = may attend; None: every key.
        score_mod: ``score_mod(score, b, h, q_idx, kv_idx)``; None: the scaled dot product.
        scale: the factor of the dot product (default ``1 / sqrt(d_k)``).
        enable_gqa: K and V may have fewer heads than Q, each shared by a group of query heads.

    Shape:
        Q: ``(B, h, n_q, d_k)``; K: ``(B, h_kv, n_f, d_k)``; V: ``(B, h_kv, n_f, d_v)``;
        returns ``(B, h, n_q, d_v)``.

    Returns:
        The contexts, in the inputs' dtype.

    Raises:
        InputTypeError: (a ``TypeError`` and ``ValueError``) a non-tensor, a dtype other
            than float32/bfloat16, or mixed dtypes.
        ValueError: shapes that are not 4-D or do not agree, ``n_q`` or ``n_f`` of 0,
            several devices, inputs that require grad while grad mode is on, or
            non-finite K or V.
        FlexUnavailableError: Inductor cannot compile it for the CPU here (no C++
            compiler, no AVX2, or the pinned portable kernels; :func:`unavailable_reason`).
    """
    _check_inputs(Q, K, V, enable_gqa)
    reason = unavailable_reason(Q.device)
    if reason is not None:
        raise FlexUnavailableError(reason)
    from torch.nn.attention.flex_attention import create_block_mask

    B, h, n_q, _ = Q.shape
    options: dict[str, Any] = {"score_mod": score_mod, "scale": scale, "enable_gqa": enable_gqa}
    if mask_mod is not None:
        options["block_mask"] = create_block_mask(mask_mod, B, h, n_q, K.shape[2], device=Q.device)
    return compiled_flex_attention()(Q, K, V, **options)
