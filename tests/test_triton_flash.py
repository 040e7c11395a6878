"""FlashAttention-2 Triton kernels against torch SDPA in float64: values, gradients, log-sum-exp, bad input.

On a machine with CUDA the kernels are compiled and run on the GPU; without one,
``TRITON_INTERPRET=1`` (set here, before Triton is imported) runs the same
kernels on CPU tensors through Triton's interpreter, slowly, hence the tiny
sizes and 16 x 16 tiles (which still give several blocks and a partial last one).
"""

from __future__ import annotations

import os
import subprocess
import sys

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: run the kernels on CPU tensors

import pytest
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

triton = pytest.importorskip("triton")
if not hasattr(triton, "knobs"):  # Triton < 3.4, installed with torch < 2.8 (make test-compat): refused by name
    pytest.skip(f"the Triton kernels need Triton >= 3.4, found {triton.__version__}", allow_module_level=True)

from attnsurvey.beyond.triton_flash import flash_attention_triton, flash_forward_triton  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
BLOCKS = {"block_q": 16, "block_k": 16}
#: (atol, rtol) against the float64 oracle: float16 rounds the inputs of every tile product (P and dS too).
TOL = {torch.float32: (2e-5, 1e-4), torch.float16: (5e-3, 1e-2)}


def qkv(n_q, n_f, d, dtype=torch.float32, b=1, h=2, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    shapes = ((b, h, n_q, d), (b, h, n_f, d), (b, h, n_f, d))
    return tuple(torch.randn(s, generator=g).to(DEVICE, dtype).requires_grad_(grad) for s in shapes)


def oracle(Q, K, V, dO, is_causal):
    """SDPA in float64 on the same (rounded) inputs: context and gradients (dQ, dK, dV)."""
    Qd, Kd, Vd = (x.detach().double().requires_grad_() for x in (Q, K, V))
    O = F.scaled_dot_product_attention(Qd, Kd, Vd, is_causal=is_causal)
    return O, torch.autograd.grad(O, (Qd, Kd, Vd), dO.double())


def close(actual, expected, dtype):
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(actual.double(), expected, atol=atol, rtol=rtol)


@pytest.mark.catalog("extra:triton-flash-attention")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["float32", "float16"])
@pytest.mark.parametrize("d", [16, 32, 64])
@pytest.mark.parametrize("n_q,n_f", [(37, 50), (50, 37)])
@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
def test_forward_and_gradients_match_sdpa(is_causal, n_q, n_f, d, dtype):
    Q, K, V = qkv(n_q, n_f, d, dtype, grad=True)
    O = flash_attention_triton(Q, K, V, is_causal, **BLOCKS)
    assert O.shape == (1, 2, n_q, d) and O.dtype == dtype
    dO = torch.randn(O.shape, generator=torch.Generator().manual_seed(9)).to(DEVICE, dtype)
    grads = torch.autograd.grad(O, (Q, K, V), dO)
    O_ref, grads_ref = oracle(Q, K, V, dO, is_causal)
    close(O, O_ref, dtype)
    for name, g, g_ref in zip(("dQ", "dK", "dV"), grads, grads_ref):
        assert g.dtype == dtype, name
        close(g, g_ref, dtype)


@pytest.mark.catalog("extra:triton-flash-attention")
@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
def test_saved_log_sum_exp_is_that_of_the_scaled_scores(is_causal):
    Q, K, V = qkv(37, 50, 32, b=2, h=1)
    _, L = flash_forward_triton(Q, K, V, is_causal, **BLOCKS)
    s = Q.double() @ K.double().transpose(-2, -1) / 32**0.5
    if is_causal:  # query i may attend keys j <= i
        allowed = torch.ones(37, 50, dtype=torch.bool, device=DEVICE).tril()
        s = s.masked_fill(~allowed, float("-inf"))
    assert L.dtype == torch.float32 and L.shape == (2, 1, 37)
    torch.testing.assert_close(L.double(), torch.logsumexp(s, -1), atol=1e-5, rtol=0)


@pytest.mark.catalog("extra:triton-flash-attention")
def test_causal_mask_is_applied_and_leaks_nothing_from_the_future():
    Q, K, V = qkv(37, 37, 16, grad=True)
    O = flash_attention_triton(Q, K, V, is_causal=True, **BLOCKS)
    # a kernel that ignored is_causal would give the full-attention result, far from this one
    full = F.scaled_dot_product_attention(Q.detach(), K.detach(), V.detach())
    assert float((O.detach() - full).abs().max()) > 0.1
    # the first 20 queries get no gradient through keys or values at positions 20 and later
    dK, dV = torch.autograd.grad(O[:, :, :20].sum(), (K, V))
    assert float(dK[:, :, 20:].abs().max()) == 0.0 and float(dV[:, :, 20:].abs().max()) == 0.0
    assert float(dV[:, :, :20].abs().min()) > 0.0


@pytest.mark.catalog("extra:triton-flash-attention")
def test_tile_sizes_change_only_rounding_and_heads_are_independent():
    Q, K, V = qkv(50, 37, 16, b=2, h=3)
    ref = flash_attention_triton(Q, K, V, block_q=64, block_k=64)  # one tile per head
    for bq, bk in ((16, 32), (32, 16)):
        torch.testing.assert_close(flash_attention_triton(Q, K, V, block_q=bq, block_k=bk), ref, atol=1e-6, rtol=0)
    one = flash_attention_triton(Q[1:, 2:], K[1:, 2:], V[1:, 2:], **BLOCKS)
    torch.testing.assert_close(one, ref[1:, 2:], atol=1e-6, rtol=0)


@pytest.mark.catalog("extra:triton-flash-attention")
@settings(max_examples=6)
@given(perm_seed=st.integers(0, 2**16), n_f=st.integers(1, 40))
def test_permuting_keys_with_their_values_changes_nothing(perm_seed, n_f):
    Q, K, V = qkv(17, n_f, 16, h=1, seed=perm_seed)
    perm = torch.randperm(n_f, generator=torch.Generator().manual_seed(perm_seed)).to(DEVICE)
    a = flash_attention_triton(Q, K, V, **BLOCKS)
    b = flash_attention_triton(Q, K[:, :, perm], V[:, :, perm], **BLOCKS)
    torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "shapes,match",
    [
        (((2, 5, 16), (1, 2, 5, 16), (1, 2, 5, 16)), r"Q must have shape \(B, h, n_q, d_k\), got shape \(2, 5, 16\)"),
        (((1, 2, 5, 16), (1, 3, 5, 16), (1, 3, 5, 16)), r"share the batch size B and the number of heads h"),
        (((1, 2, 5, 16), (1, 2, 6, 16), (1, 2, 7, 16)), r"same number of keys n_f, got .*K \(1, 2, 6, 16\)"),
        (((1, 2, 5, 16), (1, 2, 6, 16), (1, 2, 6, 32)), r"d_k of Q == d_k of K == d_v of V"),
        (((1, 2, 5, 24), (1, 2, 6, 24), (1, 2, 6, 24)), r"head size d_k in \(16, 32, 64, 128\), got d_k=24"),
        (((1, 2, 0, 16), (1, 2, 6, 16), (1, 2, 6, 16)), r"n_q and n_f must be at least 1"),
    ],
)
def test_bad_shapes_name_the_symbols_and_shapes(shapes, match):
    Q, K, V = (torch.zeros(s, device=DEVICE) for s in shapes)
    with pytest.raises(ValueError, match=match):
        flash_attention_triton(Q, K, V)


def test_bad_dtypes_and_block_sizes_are_refused():
    Q, K, V = qkv(5, 5, 16)
    with pytest.raises(TypeError, match=r"Q must be float16 or float32.*float64"):
        flash_attention_triton(Q.double(), K.double(), V.double())
    with pytest.raises(TypeError, match=r"dtype mismatch: Q=torch.float32, K=torch.float16"):
        flash_attention_triton(Q, K.half(), V)
    with pytest.raises(TypeError, match=r"K must be a torch.Tensor"):
        flash_attention_triton(Q, K.tolist(), V)
    with pytest.raises(ValueError, match=r"block_q must be a power of two >= 16.*got block_q=24"):
        flash_attention_triton(Q, K, V, block_q=24)
    with pytest.raises(ValueError, match=r"block_k must be a power of two >= 16.*got block_k=8"):
        flash_attention_triton(Q, K, V, block_k=8)


def test_cpu_tensors_without_the_interpreter_say_how_to_run(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    Q, K, V = (x.cpu() for x in qkv(5, 5, 16))
    with pytest.raises(ValueError, match=r"run on CUDA tensors, got tensors on cpu.*TRITON_INTERPRET=1"):
        flash_attention_triton(Q, K, V)


def test_missing_triton_raises_a_clear_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # makes `import triton` fail
    Q, K, V = qkv(5, 5, 16)
    with pytest.raises(ImportError, match=r"needs the 'triton' package"):
        flash_attention_triton(Q, K, V)


def test_importing_the_package_and_module_does_not_import_triton():
    code = (
        "import sys, attnsurvey, attnsurvey.beyond.triton_flash; "
        "sys.exit(1 if any(m == 'triton' or m.startswith('triton.') for m in sys.modules) else 0)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
