"""FlashAttention-2 in Triton vs PyTorch SDPA's flash backend on one GPU: time, peak memory and error.

    python benchmarks/triton_flash.py                     # n = 1024 ... 16384, 5 repeats
    python benchmarks/triton_flash.py --ns 512 1024 --repeats 2 --causal

Needs a CUDA GPU: without one it says so and exits with status 0 (the kernels'
correctness is checked on CPU by ``tests/test_triton_flash.py`` through Triton's
interpreter; speed on a CPU interpreter means nothing).

Setting: float16 inputs ``(B, h, n, d)`` (SDPA's flash backend takes no float32),
``B = 4``, ``h = 16``, ``d = 64`` by default. For each n and each method
(``flash_attention_triton`` from :mod:`attnsurvey.beyond.triton_flash`, and
``F.scaled_dot_product_attention`` restricted to ``SDPBackend.FLASH_ATTENTION``):

* time of the forward and of forward + backward, with CUDA events: after two
  warm-up calls (the first compiles the Triton kernels), each repeat is the
  median of ``--iters`` timed calls; the figure is the median over ``--repeats``
  repeats, with min-max;
* peak memory: the peak allocated bytes during one forward + backward call,
  minus the bytes allocated before it (inputs included in neither);
* the largest difference of the context and of dQ, dK, dV from SDPA's flash
  backend (one seed; both in float16, so expect about 1e-3).

Results, with the GPU, torch and Triton versions, go to
``benchmarks/results/triton_flash.json`` (or ``--out``). The book's chapter 6 quotes
no GPU figure: they depend on the GPU and its software.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import _bench

NS = (1024, 2048, 4096, 8192, 16384)
METHODS = ("triton", "sdpa_flash")


def _inputs(n: int, args: argparse.Namespace, seed: int = 0):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    shape = (args.batch, args.heads, n, args.d)
    return [torch.randn(shape, generator=g, device="cuda", dtype=torch.float16).requires_grad_() for _ in range(3)]


def _method(name: str, causal: bool):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from attnsurvey.beyond.triton_flash import flash_attention_triton

    def sdpa(Q, K, V):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):  # raises rather than fall back to another backend
            return F.scaled_dot_product_attention(Q, K, V, is_causal=causal)

    return {"triton": lambda Q, K, V: flash_attention_triton(Q, K, V, is_causal=causal), "sdpa_flash": sdpa}[name]


def _time_ms(call, iters: int) -> float:
    """Median of ``iters`` CUDA-event timings of ``call`` (milliseconds)."""
    import torch

    times = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def measure(name: str, n: int, args: argparse.Namespace) -> dict:
    """Forward and forward+backward times (ms, one value per repeat) and the peak extra memory (MiB)."""
    import torch

    fn = _method(name, args.causal)
    Q, K, V = _inputs(n, args)
    dO = torch.randn_like(Q)

    def forward():
        with torch.no_grad():
            fn(Q, K, V)

    def forward_backward():
        torch.autograd.grad(fn(Q, K, V), (Q, K, V), dO)

    for _ in range(2):  # compile / warm up
        forward_backward()
    torch.cuda.synchronize()
    fwd = [_time_ms(forward, args.iters) for _ in range(args.repeats)]
    both = [_time_ms(forward_backward, args.iters) for _ in range(args.repeats)]
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    forward_backward()
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - before) / 2**20
    return {"forward_ms": _bench.summary(fwd), "forward_backward_ms": _bench.summary(both), "peak_mib": peak}


def errors(n: int, args: argparse.Namespace) -> dict:
    """Largest |triton - SDPA flash| of the context and of each gradient, float16, one seed."""
    import torch

    Q, K, V = _inputs(n, args, seed=1)
    dO = torch.randn_like(Q)
    out = {}
    results = {}
    for name in METHODS:
        c = _method(name, args.causal)(Q, K, V)
        results[name] = (c, *torch.autograd.grad(c, (Q, K, V), dO))
    for i, what in enumerate(("context", "dQ", "dK", "dV")):
        out[what] = float((results["triton"][i].float() - results["sdpa_flash"][i].float()).abs().max())
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ns", type=int, nargs="+", default=list(NS), help="sequence lengths n (n_q = n_f)")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--d", type=int, default=64, choices=(16, 32, 64, 128))
    p.add_argument("--causal", action="store_true")
    p.add_argument("--repeats", type=int, default=_bench.DEFAULT_REPEATS)
    p.add_argument("--iters", type=int, default=10, help="timed calls per repeat (their median is the repeat)")
    p.add_argument("--out", default=None, help="folder for the JSON (default benchmarks/results)")
    args = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("benchmarks/triton_flash.py needs a CUDA GPU; none is available here, so nothing was measured.")
        print("(The kernels are tested on CPU through Triton's interpreter: pytest tests/test_triton_flash.py)")
        return 0
    import triton  # type: ignore[import-untyped]  # no type information

    info = _bench.machine()
    info.pop("_t0", None)
    info.update(gpu=torch.cuda.get_device_name(), cuda=torch.version.cuda, triton=triton.__version__)
    print(
        f"{info['gpu']}, torch {info['torch']}, CUDA {info['cuda']}, Triton {info['triton']}; "
        f"float16, B={args.batch}, h={args.heads}, d={args.d}, causal={args.causal}; "
        f"median (min-max) of {args.repeats} repeats of {args.iters} calls"
    )
    header = f"{'method':10s} {'n':>6s}  {'forward ms':>24s}  {'forward+backward ms':>24s}  {'peak MiB':>9s}"
    print(header)
    rows = []
    for n in args.ns:
        for name in METHODS:
            r = {"method": name, "n": n, **measure(name, n, args)}
            rows.append(r)
            print(
                f"{name:10s} {n:6d}  {_bench.show(r['forward_ms']):>24s}  "
                f"{_bench.show(r['forward_backward_ms']):>24s}  {r['peak_mib']:9.1f}"
            )
    errs = {n: errors(n, args) for n in args.ns[:1]}
    for n, e in errs.items():
        print(f"largest |triton - SDPA flash| at n = {n}: " + ", ".join(f"{k} {v:.1e}" for k, v in e.items()))
    result = {
        "settings": {
            "dtype": "float16",
            "batch": args.batch,
            "heads": args.heads,
            "d": args.d,
            "causal": args.causal,
            "repeats": args.repeats,
            "iters": args.iters,
            "time": "per repeat: median of iters CUDA-event timings after two warm-up calls, ms",
            "memory": "peak allocated bytes during one forward+backward minus the bytes allocated before, MiB",
        },
        "machine": info,
        "cost": rows,
        "errors": {str(n): e for n, e in errs.items()},
    }
    _bench.save(Path(args.out or _bench.RESULTS) / "triton_flash.json", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
