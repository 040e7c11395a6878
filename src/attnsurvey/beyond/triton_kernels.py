"""The FlashAttention-2 Triton kernels of :mod:`attnsurvey.beyond.triton_flash`, written the ordinary way.

Importing this module imports Triton and decorates the kernels with ``triton.jit``;
:mod:`~attnsurvey.beyond.triton_flash` imports it on the first launch, so that
importing the package never imports Triton. ``triton.jit`` decides when it runs
whether a kernel is compiled for the GPU or interpreted on CPU tensors: set the
environment variable ``TRITON_INTERPRET=1`` before the first launch to interpret.

Each pointer argument points at a contiguous ``(B * h, n, d)`` array (L and Delta:
``(B * h, n_q)``). Triton reads parameter annotations as kernel types, so the pointer
and size arguments stay unannotated (hence the mypy setting below).
"""

# mypy: disable-error-code="no-untyped-def"

import contextlib
from collections.abc import Iterator

import triton  # type: ignore[import-untyped]  # no type information
import triton.language as tl  # type: ignore[import-untyped]  # no type information
from triton.runtime.interpreter import InterpretedFunction  # type: ignore[import-untyped]  # no type information
from triton.runtime.jit import JITFunction  # type: ignore[import-untyped]  # no type information

#: Whether ``triton.jit`` made the kernels below for the interpreter (``TRITON_INTERPRET=1`` at import).
INTERPRETED = bool(triton.knobs.runtime.interpret)


@triton.jit
def _fwd_kernel(
    Q,
    K,
    V,
    O,
    L,
    n_q,
    n_f,
    scale,
    IS_CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    D: tl.constexpr,
):
    start_m = tl.program_id(0) * BLOCK_M  # this program's query block ...
    bh = tl.program_id(1).to(tl.int64)  # ... of this (batch, head); 64-bit offsets past 2**31 elements
    Q += bh * n_q * D
    K += bh * n_f * D
    V += bh * n_f * D
    O += bh * n_q * D
    L += bh * n_q
    rows = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    row_ok = rows < n_q  # masked loads: n_q need not be a multiple of BLOCK_M
    q = tl.load(Q + rows[:, None] * D + offs_d[None, :], mask=row_ok[:, None], other=0.0)  # stays on chip
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running maximum
    l_i = tl.zeros([BLOCK_M], tl.float32)  # running sum of exp(s - m)
    acc = tl.zeros([BLOCK_M, D], tl.float32)  # running sum of exp(s - m) v, not normalised
    hi = n_f
    if IS_CAUSAL:
        hi = tl.minimum(n_f, start_m + BLOCK_M)  # key blocks right of the diagonal are skipped
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        col_ok = cols < n_f
        k = tl.load(K + cols[:, None] * D + offs_d[None, :], mask=col_ok[:, None], other=0.0)
        v = tl.load(V + cols[:, None] * D + offs_d[None, :], mask=col_ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale  # (BLOCK_M, BLOCK_N) scores, float32
        keep = col_ok[None, :]
        if IS_CAUSAL:
            keep = keep & (rows[:, None] >= cols[None, :])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))  # finite: key 0 is allowed in the first block
        alpha = tl.exp(m_i - m_new)  # rescales what was summed under the old maximum
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        m_i = m_new
    acc = acc / l_i[:, None]  # normalised once, at the end
    tl.store(O + rows[:, None] * D + offs_d[None, :], acc.to(O.dtype.element_ty), mask=row_ok[:, None])
    tl.store(L + rows, m_i + tl.log(l_i), mask=row_ok)  # one log-sum-exp per query row for backward


@triton.jit
def _bwd_preprocess(O, dO, Delta, n_q, BLOCK_M: tl.constexpr, D: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1).to(tl.int64)
    rows = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    row_ok = rows < n_q
    ptr = bh * n_q * D + rows[:, None] * D + offs_d[None, :]
    o = tl.load(O + ptr, mask=row_ok[:, None], other=0.0).to(tl.float32)
    do = tl.load(dO + ptr, mask=row_ok[:, None], other=0.0).to(tl.float32)
    tl.store(Delta + bh * n_q + rows, tl.sum(o * do, 1), mask=row_ok)  # D_i = sum_d dO_id O_id


@triton.jit
def _bwd_dkdv_kernel(
    Q,
    K,
    V,
    dO,
    L,
    Delta,
    dK,
    dV,
    n_q,
    n_f,
    scale,
    IS_CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    D: tl.constexpr,
):
    start_n = tl.program_id(0) * BLOCK_N  # this program's key block
    bh = tl.program_id(1).to(tl.int64)
    Q += bh * n_q * D
    dO += bh * n_q * D
    K += bh * n_f * D
    V += bh * n_f * D
    dK += bh * n_f * D
    dV += bh * n_f * D
    L += bh * n_q
    Delta += bh * n_q
    cols = start_n + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    col_ok = cols < n_f
    k = tl.load(K + cols[:, None] * D + offs_d[None, :], mask=col_ok[:, None], other=0.0)
    v = tl.load(V + cols[:, None] * D + offs_d[None, :], mask=col_ok[:, None], other=0.0)
    dk = tl.zeros([BLOCK_N, D], tl.float32)
    dv = tl.zeros([BLOCK_N, D], tl.float32)
    lo = 0
    if IS_CAUSAL:
        lo = start_n  # queries before the block's first key never see it
    for start_m in range(lo, n_q, BLOCK_M):
        rows = start_m + offs_m
        row_ok = rows < n_q
        q = tl.load(Q + rows[:, None] * D + offs_d[None, :], mask=row_ok[:, None], other=0.0)
        do = tl.load(dO + rows[:, None] * D + offs_d[None, :], mask=row_ok[:, None], other=0.0)
        lse = tl.load(L + rows, mask=row_ok, other=0.0)
        delta = tl.load(Delta + rows, mask=row_ok, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        keep = row_ok[:, None] & col_ok[None, :]
        if IS_CAUSAL:
            keep = keep & (rows[:, None] >= cols[None, :])
        p = tl.exp(tl.where(keep, s, float("-inf")) - lse[:, None])  # the weights, recomputed from L
        dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision="ieee")
        dp = tl.dot(do, tl.trans(v), input_precision="ieee")
        ds = p * (dp - delta[:, None])  # gradient of the scores: softmax backward with D
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision="ieee")
    dk = dk * scale
    tl.store(dK + cols[:, None] * D + offs_d[None, :], dk.to(dK.dtype.element_ty), mask=col_ok[:, None])
    tl.store(dV + cols[:, None] * D + offs_d[None, :], dv.to(dV.dtype.element_ty), mask=col_ok[:, None])


@triton.jit
def _bwd_dq_kernel(
    Q,
    K,
    V,
    dO,
    L,
    Delta,
    dQ,
    n_q,
    n_f,
    scale,
    IS_CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    D: tl.constexpr,
):
    start_m = tl.program_id(0) * BLOCK_M  # this program's query block
    bh = tl.program_id(1).to(tl.int64)
    Q += bh * n_q * D
    dO += bh * n_q * D
    dQ += bh * n_q * D
    K += bh * n_f * D
    V += bh * n_f * D
    rows = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    row_ok = rows < n_q
    q = tl.load(Q + rows[:, None] * D + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    do = tl.load(dO + rows[:, None] * D + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    lse = tl.load(L + bh * n_q + rows, mask=row_ok, other=0.0)
    delta = tl.load(Delta + bh * n_q + rows, mask=row_ok, other=0.0)
    dq = tl.zeros([BLOCK_M, D], tl.float32)
    hi = n_f
    if IS_CAUSAL:
        hi = tl.minimum(n_f, start_m + BLOCK_M)
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        col_ok = cols < n_f
        k = tl.load(K + cols[:, None] * D + offs_d[None, :], mask=col_ok[:, None], other=0.0)
        v = tl.load(V + cols[:, None] * D + offs_d[None, :], mask=col_ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        keep = row_ok[:, None] & col_ok[None, :]
        if IS_CAUSAL:
            keep = keep & (rows[:, None] >= cols[None, :])
        p = tl.exp(tl.where(keep, s, float("-inf")) - lse[:, None])
        dp = tl.dot(do, tl.trans(v), input_precision="ieee")
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision="ieee")
    dq = dq * scale
    tl.store(dQ + rows[:, None] * D + offs_d[None, :], dq.to(dQ.dtype.element_ty), mask=row_ok[:, None])


_HELPERS: dict[int, InterpretedFunction] = {}


@contextlib.contextmanager
def library_interpreted() -> Iterator[None]:
    """While interpreted kernels run: Triton's own jitted helpers (``tl.sum``, ``tl.max``) interpreted too.

    Why this exists: ``tl.sum`` and ``tl.max`` are themselves ``@triton.jit`` functions, made
    when Triton was first imported. Whatever loads ``torch._inductor`` (``torch.compile``,
    ``torch.use_deterministic_algorithms``) imports Triton, possibly before a test or the
    chapter sets ``TRITON_INTERPRET=1``; then those helpers are GPU-only and an
    interpreted kernel that calls them fails ("Cannot call @triton.jit'd outside of the
    scope of a kernel"). For the duration of a launch this swaps them for interpreter
    versions and puts them back. It does nothing for compiled kernels, nor when Triton was
    imported with ``TRITON_INTERPRET=1`` already set (the helpers are interpreted then).

    Returns:
        A context manager (nothing is bound by ``with``).
    """
    found = []
    if INTERPRETED:
        found = [
            (mod, name, value)
            for mod in (tl, tl.standard, tl.core, tl.math)
            for name, value in list(vars(mod).items())
            if isinstance(value, JITFunction)
        ]
    for mod, name, value in found:
        if id(value) not in _HELPERS:
            _HELPERS[id(value)] = InterpretedFunction(value.fn)
        setattr(mod, name, _HELPERS[id(value)])
    try:
        yield
    finally:
        for mod, name, value in found:
            setattr(mod, name, value)
