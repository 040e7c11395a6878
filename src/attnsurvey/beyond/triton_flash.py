"""FlashAttention-2 as Triton GPU kernels: forward and backward (beyond the survey).

The tiled algorithm of :mod:`attnsurvey.beyond.tiled` written as GPU kernels
in Triton (Dao 2023, FlashAttention-2). A Triton *program* is one block of
threads running on one streaming multiprocessor; the tiles it loads live in
that multiprocessor's registers and shared memory (SRAM), and only the inputs,
the outputs and one number per query row travel to and from the GPU's main
memory (HBM).

* Forward (``_fwd_kernel``): one program per block of ``BLOCK_M`` queries
  of one head. It loads its query tile once, then streams the key/value
  tiles through SRAM, keeping the online-softmax statistics ``m`` (running
  maximum) and ``l`` (running sum) and the unnormalised weighted sum ``acc``
  in float32. At the end it divides ``acc`` by ``l`` once and stores the
  context and the log-sum-exp ``L = m + log l`` of each query row.
* Backward: ``D = rowsum(dO * O)`` per query row (``_bwd_preprocess``),
  then one program per block of ``BLOCK_N`` keys (``_bwd_dkdv_kernel``)
  that streams the query tiles, recomputes the weights ``P = exp(S - L)`` of
  each tile from ``L`` and accumulates ``dV += P^T dO`` and
  ``dK += dS^T Q``, ``dS = P * (dO V^T - D)``; and one program per query block
  (``_bwd_dq_kernel``) that recomputes the same tiles and accumulates
  ``dQ += dS K``. Two kernels instead of one with atomic additions to ``dQ``:
  no atomics, so the gradients are deterministic.

Inputs are ``(B, h, n, d)`` as :func:`torch.nn.functional.scaled_dot_product_attention`
takes them, float16 or float32 (every sum is accumulated in float32; matrix
products of float32 tiles use full float32 precision, not TF32). ``is_causal``
lets query ``i`` attend only to keys ``j <= i`` (positions counted from the
start of both sequences, as SDPA's ``is_causal``). On a computer without a GPU,
Triton's interpreter runs the same kernels on CPU tensors (NumPy under the
hood, slowly) when the environment variable ``TRITON_INTERPRET=1`` is set
before the first call: that is how the tests and the book run them.

The kernels themselves are ordinary ``@triton.jit`` functions in
:mod:`attnsurvey.beyond.triton_kernels`; this module validates the inputs, launches
them and wraps them for autograd. Importing it does not import Triton: the kernel
module is imported on the first call (:func:`_kernels`), and a missing Triton
raises ``ImportError`` then.
"""

from __future__ import annotations

import contextlib
import importlib
import math
from types import ModuleType
from typing import Any

import torch
from torch import Tensor

from .._checks import InputTypeError, check_integers, check_same_dtype
from ..catalog import catalogued

CHAPTER = "chapters/ch06_tiled_attention.ipynb"

#: Default tile sizes (queries per program, keys per inner step): 64 x 64 tiles
#: of float32 scores fit one program's registers with head sizes up to 128.
BLOCK_Q = 64
BLOCK_K = 64
#: Head sizes d_k (= d_v) the kernels accept: a tile row must be a power of two of at least 16 for ``tl.dot``.
HEAD_SIZES = (16, 32, 64, 128)
#: Input dtypes the kernels accept (sums are accumulated in float32 for both).
DTYPES = (torch.float16, torch.float32)

#: The kernels of :mod:`attnsurvey.beyond.triton_kernels`, in the order a forward and backward pass launch them.
KERNEL_NAMES = ("_fwd_kernel", "_bwd_preprocess", "_bwd_dkdv_kernel", "_bwd_dq_kernel")


def _import_triton() -> Any:
    try:
        import triton  # type: ignore[import-untyped]  # no type information
    except ImportError as err:  # pragma: no cover - triton is in requirements.txt
        raise ImportError(
            "flash_attention_triton needs the 'triton' package (pip install triton; it is in requirements.txt). "
            "Without a GPU, set TRITON_INTERPRET=1 to run the kernels on CPU tensors with Triton's interpreter."
        ) from err
    if not hasattr(triton, "knobs"):  # Triton < 3.4 (what torch < 2.8 installs): the kernels use its knobs
        raise ImportError(
            f"flash_attention_triton needs Triton >= 3.4 (triton.knobs); this is Triton {triton.__version__} "
            "(pip install 'triton>=3.4', which torch >= 2.8 installs)"
        )
    return triton


def _interpreting(triton: Any) -> bool:
    return bool(triton.knobs.runtime.interpret)


def _kernels() -> ModuleType:
    """The kernel module :mod:`~attnsurvey.beyond.triton_kernels`, imported on first use.

    ``triton.jit`` reads ``TRITON_INTERPRET`` when it decorates a kernel, that is when the
    module is imported; if the variable has changed since (the chapter reads the kernels'
    source before it sets it), the module is imported again, so its kernels match the mode.
    """
    module = importlib.import_module("attnsurvey.beyond.triton_kernels")
    if module.INTERPRETED != _interpreting(_import_triton()):
        module = importlib.reload(module)
    return module


def __getattr__(name: str) -> Any:
    """``triton_flash._fwd_kernel`` and the other :data:`KERNEL_NAMES`: the kernel's Python function (for its source).

    The chapter prints the kernels with ``inspect.getsource``, which needs the plain function
    that ``triton.jit`` wraps; reading one imports Triton and the kernel module.
    """
    if name in KERNEL_NAMES:
        return getattr(_kernels(), name).fn
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _check_tl_dot_blocks(block_q: int, block_k: int) -> tuple[int, int]:
    """Return tile sizes that ``tl.dot`` accepts (int powers of two >= 16) as plain ints for the kernels' constexprs."""
    check_integers("the Triton kernels", block_q=block_q, block_k=block_k)
    for name, value in (("block_q", block_q), ("block_k", block_k)):
        if value < 16 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two >= 16 (a tl.dot tile), got {name}={value}")
    return int(block_q), int(block_k)


def _check_inputs(Q: Tensor, K: Tensor, V: Tensor) -> None:
    for x, name, layout in ((Q, "Q", "(B, h, n_q, d_k)"), (K, "K", "(B, h, n_f, d_k)"), (V, "V", "(B, h, n_f, d_v)")):
        if not isinstance(x, Tensor):
            raise InputTypeError(f"{name} must be a torch.Tensor of shape {layout}, got {type(x).__name__}")
        if x.dim() != 4:
            raise ValueError(f"{name} must have shape {layout}, got shape {tuple(x.shape)}")
        if x.dtype not in DTYPES:
            raise InputTypeError(
                f"{name} must be float16 or float32 for the Triton kernels, got dtype={x.dtype}; "
                f"convert it with {name}.half() or {name}.float()"
            )
    check_same_dtype(Q=Q, K=K, V=V)
    shapes = f"Q {tuple(Q.shape)}, K {tuple(K.shape)}, V {tuple(V.shape)}"
    if not (Q.shape[:2] == K.shape[:2] == V.shape[:2]):
        raise ValueError(f"Q, K and V must share the batch size B and the number of heads h, got {shapes}")
    if K.shape[2] != V.shape[2]:
        raise ValueError(f"K and V must have the same number of keys n_f, got {shapes}")
    if not (Q.shape[3] == K.shape[3] == V.shape[3]):
        raise ValueError(f"the Triton kernels need d_k of Q == d_k of K == d_v of V, got {shapes}")
    if Q.shape[3] not in HEAD_SIZES:
        raise ValueError(f"the Triton kernels need a head size d_k in {HEAD_SIZES}, got d_k={Q.shape[3]} ({shapes})")
    if Q.shape[2] == 0 or K.shape[2] == 0:
        raise ValueError(f"n_q and n_f must be at least 1, got {shapes}")
    if not (Q.device == K.device == V.device):
        raise ValueError(f"Q, K and V must be on one device, got {Q.device}, {K.device}, {V.device}")


def _check_device(x: Tensor, interpret: bool) -> None:
    if interpret:
        if x.device.type != "cpu":
            raise ValueError(
                f"TRITON_INTERPRET=1 runs the kernels on CPU tensors, got tensors on {x.device}; "
                "unset TRITON_INTERPRET to compile them for the GPU"
            )
    elif x.device.type != "cuda":
        raise ValueError(
            f"the Triton kernels run on CUDA tensors, got tensors on {x.device}; on a computer without a GPU set "
            "the environment variable TRITON_INTERPRET=1 (e.g. TRITON_INTERPRET=1 python ...) to run them "
            "on CPU tensors with Triton's interpreter"
        )


def _grid(n: int, block: int, bh: int) -> tuple[int, int]:
    return (-(-n // block), bh)


def _launch_forward(
    Q: Tensor, K: Tensor, V: Tensor, is_causal: bool, block_q: int, block_k: int
) -> tuple[Tensor, Tensor]:
    """Run the forward kernel on validated inputs; returns ``(O, L)`` with ``L`` float32 ``(B, h, n_q)``."""
    k = _kernels()
    _check_device(Q, k.INTERPRETED)
    B, h, n_q, d = Q.shape
    n_f = K.shape[2]
    Q, K, V = (x.contiguous() for x in (Q, K, V))
    O = torch.empty_like(Q)
    L = torch.empty((B, h, n_q), dtype=torch.float32, device=Q.device)
    with _on(Q), k.library_interpreted():
        k._fwd_kernel[_grid(n_q, block_q, B * h)](
            Q, K, V, O, L, n_q, n_f, 1.0 / math.sqrt(d), is_causal, block_q, block_k, d
        )
    return O, L


def _on(x: Tensor) -> Any:
    """The CUDA device context of ``x`` (so the kernel launches on its GPU), or a no-op on CPU."""
    return torch.cuda.device(x.device) if x.device.type == "cuda" else contextlib.nullcontext()


class FlashAttentionTritonFunction(torch.autograd.Function):
    """Autograd wrapper of the Triton kernels: saves Q, K, V, O and L; backward recomputes the weights.

    Called through :func:`flash_attention_triton`, which validates the inputs.
    """

    @staticmethod
    def forward(ctx: Any, Q: Tensor, K: Tensor, V: Tensor, is_causal: bool, block_q: int, block_k: int) -> Tensor:
        O, L = _launch_forward(Q, K, V, is_causal, block_q, block_k)
        ctx.save_for_backward(Q, K, V, O, L)
        ctx.is_causal, ctx.block_q, ctx.block_k = is_causal, block_q, block_k
        return O

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Tensor) -> tuple[Tensor | None, ...]:
        (dO,) = grad_outputs  # one output, the context
        Q, K, V, O, L = ctx.saved_tensors
        k = _kernels()
        B, h, n_q, d = Q.shape
        n_f = K.shape[2]
        Q, K, V, O = (x.contiguous() for x in (Q, K, V, O))
        dO = dO.to(Q.dtype).contiguous()
        delta = torch.empty_like(L)
        dQ, dK, dV = torch.empty_like(Q), torch.empty_like(K), torch.empty_like(V)
        scale = 1.0 / math.sqrt(d)
        bq, bk = ctx.block_q, ctx.block_k
        with _on(Q), k.library_interpreted():
            k._bwd_preprocess[_grid(n_q, bq, B * h)](O, dO, delta, n_q, bq, d)
            k._bwd_dkdv_kernel[_grid(n_f, bk, B * h)](
                Q, K, V, dO, L, delta, dK, dV, n_q, n_f, scale, ctx.is_causal, bq, bk, d
            )
            k._bwd_dq_kernel[_grid(n_q, bq, B * h)](
                Q, K, V, dO, L, delta, dQ, n_q, n_f, scale, ctx.is_causal, bq, bk, d
            )
        return dQ, dK, dV, None, None, None


@catalogued(
    "extra:triton-flash-attention",
    title="FlashAttention-2 forward and backward as Triton GPU kernels (online softmax, log-sum-exp, recomputation)",
)
def flash_attention_triton(
    Q: Tensor, K: Tensor, V: Tensor, is_causal: bool = False, *, block_q: int = BLOCK_Q, block_k: int = BLOCK_K
) -> Tensor:
    """Exact scaled dot-product attention (Eq. 2-4) by the FlashAttention-2 Triton kernels, with autograd.

    The same context as ``F.scaled_dot_product_attention(Q, K, V, is_causal=is_causal)``
    with the scale ``1 / sqrt(d_k)``; gradients for Q, K and V come from the
    Triton backward kernels, which recompute the weights from the saved
    log-sum-exp instead of storing them.

    Args:
        Q: queries, float16 or float32, on a CUDA device (or on the CPU when the
            environment variable ``TRITON_INTERPRET=1`` is set).
        K: keys, same dtype and device as ``Q``.
        V: values, same dtype and device as ``Q``.
        is_causal: query ``i`` attends only to keys ``j <= i`` (counted from
            the first position of both sequences, as SDPA's ``is_causal``).
        block_q: queries per program (a power of two >= 16; ``n_q`` need not
            be a multiple of it).
        block_k: keys per inner step (a power of two >= 16; ``n_f`` need not
            be a multiple of it).

    Shape:
        Q: ``(B, h, n_q, d_k)``; K: ``(B, h, n_f, d_k)``; V: ``(B, h, n_f, d_v)``
        with ``d_v = d_k`` in :data:`HEAD_SIZES` (16, 32, 64 or 128);
        returns ``(B, h, n_q, d_v)``.

    Returns:
        The context vectors, in the dtype of the inputs (accumulated in float32).

    Raises:
        InputTypeError: (a ``TypeError`` and ``ValueError``) a non-tensor, a
            dtype other than float16/float32, or mixed dtypes.
        ValueError: shapes that are not 4-D or do not agree (the message names
            Q, K, V and their shapes), a head size outside :data:`HEAD_SIZES`,
            ``n_q`` or ``n_f`` of 0, a block size that is not a power of two
            >= 16, tensors on several devices, or tensors on a device the
            kernels cannot run on (CPU tensors without ``TRITON_INTERPRET=1``).
        TypeError: a block size that is not an int.
        ImportError: Triton is not installed.
    """
    _check_inputs(Q, K, V)
    bq, bk = _check_tl_dot_blocks(block_q, block_k)
    return FlashAttentionTritonFunction.apply(Q, K, V, bool(is_causal), bq, bk)


@catalogued("extra:triton-flash-attention")
def flash_forward_triton(
    Q: Tensor, K: Tensor, V: Tensor, is_causal: bool = False, *, block_q: int = BLOCK_Q, block_k: int = BLOCK_K
) -> tuple[Tensor, Tensor]:
    """The forward kernel alone: the context and the log-sum-exp ``L`` it saves for backward (no autograd).

    Args:
        Q: queries (as :func:`flash_attention_triton`).
        K: keys.
        V: values.
        is_causal: query ``i`` attends only to keys ``j <= i``.
        block_q: queries per program (power of two >= 16).
        block_k: keys per inner step (power of two >= 16).

    Shape:
        Q: ``(B, h, n_q, d_k)``; K: ``(B, h, n_f, d_k)``; V: ``(B, h, n_f, d_v)``;
        returns c ``(B, h, n_q, d_v)`` and L ``(B, h, n_q)``.

    Returns:
        ``(c, L)``: the context in the inputs' dtype and ``L_i = log sum_j exp(s_ij)``
        over the allowed keys of each query row, float32, with ``s = Q K^T / sqrt(d_k)``.

    Raises:
        InputTypeError: as :func:`flash_attention_triton`.
        ValueError: as :func:`flash_attention_triton`.
        TypeError: a block size that is not an int.
        ImportError: Triton is not installed.
    """
    _check_inputs(Q, K, V)
    bq, bk = _check_tl_dot_blocks(block_q, block_k)
    with torch.no_grad():
        return _launch_forward(Q, K, V, bool(is_causal), bq, bk)
