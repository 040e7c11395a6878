"""Exact attention in linear memory: plain `attend` vs tiled attention vs SDPA, time, memory and error.

    python benchmarks/tiled_attention.py              # the issue's targets and the cost curves, 512 ... 32768
    python benchmarks/tiled_attention.py --max-n 4096 # quicker

One head, batch 1, d = 64, float32, forward only, one thread (``BENCH_THREADS``).
Every (method, n) runs in a fresh subprocess so that its peak resident memory
is its own: the figure is the peak RSS (``ru_maxrss``) during the first call
minus the RSS just before it (inputs already allocated). Time: the median
wall-clock time of ``--repeats`` further calls. The plain core is skipped at
sizes whose ``2 n^2`` floats would not fit in the memory available.

SDPA gets ``(1, 1, n, d)`` inputs: PyTorch's fused CPU (flash) kernel needs
four dimensions and silently falls back to the n^2 math path for three.

Also: the largest forward error of tiled attention against
``F.scaled_dot_product_attention`` at n = 16384 (float32), and the largest
gradient error (dQ, dK, dV) against SDPA's autograd at n = 2048 (float64).
Results: ``benchmarks/results/tiled_attention.json`` (with the machine) and
the figure ``book/figures/tiled_attention_cost.png`` shown in chapter 6.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
OUT = ROOT / "benchmarks" / "results" / "tiled_attention.json"
FIGURE = ROOT / "book" / "figures" / "tiled_attention_cost.png"
METHODS = ("plain", "tiled", "sdpa")
D = 64
N_TARGET = 16384
N_GRAD = 2048


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _available_bytes() -> int:
    with open("/proc/meminfo") as f:
        info = dict(line.split(":", 1) for line in f)
    return int(info["MemAvailable"].split()[0]) * 1024


def _fn(method: str, n: int):
    import torch
    import torch.nn.functional as F

    from attnsurvey.beyond.tiled import tiled_attend
    from attnsurvey.general_model import attend

    g = torch.Generator().manual_seed(0)
    Q, K, V = (torch.randn(1, n, D, generator=g) for _ in range(3))
    Q4, K4, V4 = (x[:, None] for x in (Q, K, V))  # SDPA's fused CPU kernels need (B, h, n, d); 3-D falls back to math
    return {"plain": lambda: attend(Q, K, V)[0], "tiled": lambda: tiled_attend(Q, K, V),
            "sdpa": lambda: F.scaled_dot_product_attention(Q4, K4, V4)[:, 0]}[method]


def measure_one(method: str, n: int, repeats: int) -> dict:
    """In a child process: the peak extra RSS of the first call, then the median time of ``repeats`` calls."""
    import torch

    torch.set_grad_enabled(False)
    _fn(method, 256)()  # load kernels on a small input
    fn = _fn(method, n)
    before = _rss_bytes()
    out = fn()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    del out
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return {"method": method, "n": n, "seconds": statistics.median(times), "peak_mib": max(peak, 0) / 2**20}


def errors() -> dict:
    """Forward error in float32 at N_TARGET and gradient error in float64 at N_GRAD, both against SDPA."""
    import torch
    import torch.nn.functional as F

    from attnsurvey.beyond.tiled import tiled_attend

    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        Q, K, V = (torch.randn(1, 1, N_TARGET, D, generator=g) for _ in range(3))
        fwd = {c: float((tiled_attend(Q, K, V, is_causal=c) - F.scaled_dot_product_attention(Q, K, V, is_causal=c)).abs().max())
               for c in (False, True)}
    Q, K, V = (torch.randn(1, 1, N_GRAD, D, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    dO = torch.randn(1, 1, N_GRAD, D, generator=g, dtype=torch.float64)
    grad = {}
    for c in (False, True):
        mine = torch.autograd.grad(tiled_attend(Q, K, V, is_causal=c), (Q, K, V), dO)
        ref = torch.autograd.grad(F.scaled_dot_product_attention(Q, K, V, is_causal=c), (Q, K, V), dO)
        grad[c] = max(float((a - b).abs().max()) for a, b in zip(mine, ref))
    return {"forward_float32_n": N_TARGET, "forward_max_abs_error": fwd[False], "forward_causal_max_abs_error": fwd[True],
            "grad_float64_n": N_GRAD, "grad_max_abs_error": grad[False], "grad_causal_max_abs_error": grad[True]}


def machine(threads: int) -> dict:
    import torch

    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), platform.processor())
    return {"cpu": model, "cores": os.cpu_count(), "threads": threads, "torch": torch.__version__,
            "python": platform.python_version(), "machine": platform.machine(), "load_average_1min_start": os.getloadavg()[0]}


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), constrained_layout=True)
    labels = {"plain": "plain attend (scores stored)", "tiled": "tiled, online softmax", "sdpa": "torch SDPA (CPU flash)"}
    for m in METHODS:
        pts = sorted((r["n"], r["seconds"], r["peak_mib"]) for r in rows if r["method"] == m)
        axes[0].plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=labels[m])
        axes[1].plot([p[0] for p in pts], [max(p[2], 0.1) for p in pts], "o-", label=labels[m])
    for ax, lab in zip(axes, ["median time per forward call (s)", "peak extra memory (MiB)"]):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length n (one head, d = 64, float32, one thread)")
        ax.set_ylabel(lab)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--max-n", type=int, default=32768)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--child", nargs=2, metavar=("METHOD", "N"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(measure_one(args.child[0], int(args.child[1]), args.repeats)))
        return 0
    threads = os.environ.get("BENCH_THREADS", "1")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    os.environ.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    import torch

    torch.set_num_threads(int(threads))
    info = machine(int(threads))
    ns = [n for n in (512, 1024, 2048, 4096, 8192, 16384, 32768) if n <= args.max_n]
    rows = []
    for n in ns:
        for method in METHODS:
            if method == "plain" and 1.5 * 2 * n * n * 4 > _available_bytes():
                print(f"{method:6s} n={n:6d}  skipped: 2 n^2 floats do not fit in the available memory", flush=True)
                continue
            res = subprocess.run([sys.executable, __file__, "--child", method, str(n), "--repeats", str(args.repeats)],
                                 capture_output=True, text=True, env=env, check=True)
            row = json.loads(res.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(f"{method:6s} n={n:6d}  median {row['seconds']:9.4f} s  peak +{row['peak_mib']:9.1f} MiB", flush=True)
    err = errors()
    info["load_average_1min_end"] = os.getloadavg()[0]
    at = {r["method"]: r for r in rows if r["n"] == N_TARGET}
    targets = {}
    if {"plain", "tiled", "sdpa"} <= at.keys():
        targets = {"n": N_TARGET, "memory_ratio_plain_over_tiled": at["plain"]["peak_mib"] / max(at["tiled"]["peak_mib"], 1e-9),
                   "time_ratio_tiled_over_sdpa": at["tiled"]["seconds"] / at["sdpa"]["seconds"]}
    print(f"forward max |tiled - SDPA|, float32, n = {N_TARGET}: {err['forward_max_abs_error']:.2e} "
          f"(causal {err['forward_causal_max_abs_error']:.2e}); target <= 1e-5")
    print(f"gradient max |tiled - SDPA|, float64, n = {N_GRAD}: {err['grad_max_abs_error']:.2e} "
          f"(causal {err['grad_causal_max_abs_error']:.2e}); target <= 1e-4")
    if targets:
        print(f"n = {N_TARGET}: plain peak / tiled peak = {targets['memory_ratio_plain_over_tiled']:.0f} (target >= 20); "
              f"tiled time / SDPA time = {targets['time_ratio_tiled_over_sdpa']:.2f} (target <= 2)")
    print("machine:", json.dumps(info))
    result = {"settings": {"d": D, "batch": 1, "heads": 1, "dtype": "float32", "repeats": args.repeats,
                           "memory": "peak RSS during the first call minus RSS before it, MiB",
                           "seconds": "median wall time of the repeats after the first call"},
              "machine": info, "cost": rows, "errors": err, "targets": targets}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    plot(rows, FIGURE)
    print(f"wrote {OUT.relative_to(ROOT)} and {FIGURE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
