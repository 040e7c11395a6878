"""Digests of primitive results under the pinned numeric environment, to compare two machines.

Stored chapter outputs are produced under ``attnsurvey.numeric_env``'s pin; where a
machine's trained outputs differ from them anyway (the book's Reproducibility page,
"Across CPU families"), run this on both machines and compare: the first family
that differs names the kernel to look at::

    python -m attnsurvey.numeric_env exec -- python scripts/numeric_fingerprint.py

It lives outside the package on purpose: it calls torch's kernels (softmax, SDPA)
directly to probe them, which the package's own code does only through its core.
``.ci/run`` prints it last on every run.
"""

from __future__ import annotations

import hashlib
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
from attnsurvey import numeric_env


def fingerprint() -> dict[str, str]:
    """Digests of primitive results under the pin, to find which one differs between two machines.

    Each value is the first 12 hex digits of the SHA-256 of the bytes of one
    family of results, computed from fixed seeds: ``gemm``, ``gemv`` (with
    dot) and ``bmm`` (MKL's sgemm, sgemv/sdot and sgemm_batch, on aligned and
    offset operands), ``libm32`` and ``libm64`` (exp, tanh, sin, erf, log, pow
    in float32 and float64), ``vml`` (``torch.sqrt``, ``log2``, ``atan``, ``tan``: MKL
    VML kernels that use the approximate ``rcpps``/``rsqrtps`` instructions, whose bits
    differ between Intel and AMD; the package routes around them, see
    ``numeric_env``), ``random`` (randn, rand, randint,
    multinomial), ``aten`` (softmax, log_softmax, layer_norm, cumsum, sum,
    sigmoid), ``sdpa`` (``F.scaled_dot_product_attention`` forward and
    backward), ``rnn`` (GRU and LSTM forward and backward), ``train`` (200 steps of the package's
    fused Adam on a tiny softmax-attention model, whose chaotic dynamics magnify any
    last-bit difference). Raises ``RuntimeError`` (as ``numeric_env.check``)
    outside the pinned environment.
    """
    numeric_env.apply_torch()
    numeric_env.check()
    import torch
    import torch.nn.functional as F_

    def digest(*tensors: torch.Tensor) -> str:
        h = hashlib.sha256()
        for t in tensors:
            h.update(t.detach().contiguous().numpy().tobytes())
        return h.hexdigest()[:12]

    g = torch.Generator().manual_seed(0)
    out: dict[str, str] = {}
    mats = [torch.randn(m, k, generator=g) for m, k in ((32, 288), (288, 8), (64, 64), (300, 300), (5, 7), (7, 3))]
    out["gemm"] = digest(mats[0] @ mats[1], mats[3] @ mats[3], mats[3][1:, 1:] @ mats[3][1:, 1:], mats[4] @ mats[5])
    out["gemv"] = digest(mats[2] @ mats[2][:, 0], mats[2].T @ mats[2][0], mats[2][0] @ mats[2][1])
    batches = [torch.randn(b, m, k, generator=g) for b, m, k in ((32, 9, 6), (32, 6, 16), (8, 50, 16), (8, 16, 50))]
    out["bmm"] = digest(batches[0] @ batches[1], batches[2] @ batches[3], batches[2] @ batches[2].transpose(1, 2))
    x32 = torch.randn(4099, generator=g, dtype=torch.float32) * 4
    for name, x in (("libm32", x32), ("libm64", x32.double())):
        out[name] = digest(
            *(f(x) for f in (torch.exp, torch.tanh, torch.sin, torch.erf)), torch.log(x.abs() + 1e-3), x.abs() ** 0.37
        )
    # the MKL VML kernels whose code holds rcpps/rsqrtps (vendor-specific bits): the package avoids them
    out["vml"] = digest(torch.sqrt(x32.abs()), torch.log2(x32.abs() + 1e-3), torch.atan(x32), torch.tan(x32))
    out["random"] = digest(
        torch.randn(1000, generator=g),
        torch.rand(1000, generator=g),
        torch.randint(0, 97, (1000,), generator=g).float(),
        torch.multinomial(torch.rand(10, generator=g), 50, replacement=True, generator=g).float(),
    )
    s = torch.randn(16, 33, generator=g) * 3
    out["aten"] = digest(
        torch.softmax(s, -1),
        torch.log_softmax(s, -1),
        F_.layer_norm(s, (33,)),
        torch.cumsum(s, -1),
        s.sum(-1),
        torch.sigmoid(s),
    )
    q = torch.randn(2, 2, 50, 16, generator=g, requires_grad=True)
    o = F_.scaled_dot_product_attention(q, q, q, is_causal=True)
    o.square().sum().backward()
    assert q.grad is not None
    out["sdpa"] = digest(o, q.grad)
    torch.manual_seed(0)
    rnns = (torch.nn.GRU(8, 6, batch_first=True, bidirectional=True), torch.nn.LSTM(8, 6, batch_first=True))
    xs = torch.randn(3, 11, 8, generator=g)
    ys = [rnn(xs)[0] for rnn in rnns]
    sum(y.square().sum() for y in ys).backward()
    out["rnn"] = digest(*ys, *(p.grad for rnn in rnns for p in rnn.parameters() if p.grad is not None))
    torch.manual_seed(0)
    W_q, W_k, W_o = (torch.nn.Linear(8, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 4))
    params = [p for m in (W_q, W_k, W_o) for p in m.parameters()]
    opt = numeric_env.portable_adam(params, lr=0.05)
    X = torch.randn(32, 10, 8, generator=g)
    y = X[:, :, :4].sum(1).argmax(-1)
    for _ in range(200):
        a = torch.softmax(W_q(X) @ W_k(X).transpose(-1, -2) / 8**0.5, -1)
        loss = F_.cross_entropy(W_o((a @ X).mean(1)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    out["train"] = digest(*params)
    return out


def machine() -> str:
    """One line naming the CPU model, libc and torch build (for a fingerprint's report)."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    libc = " ".join(platform.libc_ver())
    return f"cpu: {cpu}; libc: {libc}; torch {torch.__version__}; python {platform.python_version()}"


def main() -> int:
    print(f"numeric fingerprint ({machine()})")
    for name, value in fingerprint().items():
        print(f"  {name:7} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
