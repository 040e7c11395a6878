"""Time and peak memory of full, local, Linformer and LSH attention against sequence length.

Also the activation memory that reversible residual layers save. The results
go to ``benchmarks/results/attention_cost.json`` and the figure of the
measured curves to ``book/figures/attention_cost.png``, which the chapter
``ch03_3_4_transformer_variants`` shows as an image (its stored outputs hold
only analytic costs, so nothing measured is compared by nbval).

    python benchmarks/attention_cost.py              # 256 ... 8192 tokens
    python benchmarks/attention_cost.py --max-n 2048 # quicker
    python benchmarks/attention_cost.py --plot-only  # redraw the figure from the JSON

Every (method, n) runs in a fresh subprocess so that its peak resident memory
(``ru_maxrss``) is its own: the figure reported is the peak RSS during the call
minus the RSS just before it (inputs already allocated), in MiB. Times: the
fastest wall-clock time of ``--repeats`` calls after one warm-up call, and the
median process CPU time (more stable on a busy machine). Single head, batch 1,
``d = 64``, float32, on ``BENCH_THREADS`` threads (default 1: on a shared machine, a second
thread mostly measures how long the OpenMP barrier waits for a descheduled core).
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
OUT = ROOT / "benchmarks" / "results" / "attention_cost.json"
FIGURE = ROOT / "book" / "figures" / "attention_cost.png"
METHODS = ("full", "local", "linformer", "lsh")
SETTINGS = {"d": 64, "local_w": 32, "linformer_k": 128, "lsh_buckets": 16, "lsh_chunk": 64}


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _make(method: str, n: int):
    import torch

    from attnsurvey.general_model import attend
    from attnsurvey.transformer.linformer import linformer_attention
    from attnsurvey.transformer.local import local_window_attention
    from attnsurvey.transformer.reformer import lsh_attention, random_rotations

    g = torch.Generator().manual_seed(0)
    d = SETTINGS["d"]
    Q, K, V = (torch.randn(1, n, d, generator=g) for _ in range(3))
    if method == "full":
        return lambda: attend(Q, K, V)
    if method == "local":
        return lambda: local_window_attention(Q, K, V, SETTINGS["local_w"])
    if method == "linformer":
        k = SETTINGS["linformer_k"]
        E, F = torch.randn(k, n, generator=g) / k**0.5, torch.randn(k, n, generator=g) / k**0.5
        return lambda: linformer_attention(Q, K, V, E, F)
    if method == "lsh":
        R = random_rotations(d, SETTINGS["lsh_buckets"], g)
        return lambda: lsh_attention(Q, V, SETTINGS["lsh_buckets"], SETTINGS["lsh_chunk"], R=R)
    raise ValueError(method)


def measure_one(method: str, n: int, repeats: int) -> dict:
    """Run in a child process: peak extra RSS of one call, then the median time."""
    import torch

    torch.set_grad_enabled(False)
    _make(method, 256)()  # load kernels on a small input
    fn = _make(method, n)
    before = _rss_mib()
    out = fn()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB on Linux
    del out
    walls, cpus = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return {
        "method": method,
        "n": n,
        "seconds": min(walls),
        "cpu_seconds": statistics.median(cpus),
        "peak_mib": max(peak - before, 0.0),
    }


def reversible_memory(n: int = 512, d: int = 64, layers=(1, 2, 4, 8)) -> list[dict]:
    """Activation bytes autograd keeps for backward: plain residual stack vs reversible stack."""
    import torch
    from torch import nn

    from attnsurvey.transformer.reformer import ReversibleSequence, saved_activation_bytes

    rows = []
    for L in layers:
        torch.manual_seed(0)
        blocks = [(nn.Sequential(nn.Linear(d // 2, 2 * d), nn.ReLU(), nn.Linear(2 * d, d // 2)),) * 2 for _ in range(L)]
        x = torch.randn(1, n, d, requires_grad=True)
        row = {"layers": L}
        for name, saving in (("plain", False), ("reversible", True)):
            seq = ReversibleSequence(blocks, memory_saving=saving)
            row[name + "_mib"] = saved_activation_bytes(lambda m, t: m(t), seq, x) / 2**20
        rows.append(row)
    return rows


def plot(result: dict, path: Path = FIGURE) -> Path:
    """Draw the measured time and peak memory against n (log-log) and save it as a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["attention"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), constrained_layout=True)
    for m in METHODS:
        pts = sorted((r["n"], r["cpu_seconds"] * 1e3, r["peak_mib"]) for r in rows if r["method"] == m)
        axes[0].plot([p[0] for p in pts], [max(p[1], 1e-2) for p in pts], "o-", label=m)
        axes[1].plot([p[0] for p in pts], [max(p[2], 1e-2) for p in pts], "o-", label=m)
    for ax, lab in zip(axes, ["CPU time per call (ms)", "peak extra memory (MiB)"]):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length n")
        ax.set_ylabel(lab)
        ax.legend()
    s = result["settings"]
    fig.suptitle(
        f"measured: d={s['d']}, {s['threads']} thread(s), torch {s['torch']}, {s['machine']}, "
        f"load {s['load_average_1min']:.1f}",
        fontsize=9,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--max-n", type=int, default=8192)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--plot-only", action="store_true", help="redraw the figure from the stored JSON, measure nothing")
    p.add_argument("--child", nargs=2, metavar=("METHOD", "N"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(measure_one(args.child[0], int(args.child[1]), args.repeats)))
        return 0
    if args.plot_only:
        print(f"wrote {plot(json.loads(OUT.read_text())).relative_to(ROOT)}")
        return 0
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "OMP_NUM_THREADS": os.environ.get("BENCH_THREADS", "1"),
        "MKL_NUM_THREADS": os.environ.get("BENCH_THREADS", "1"),
    }
    ns = [n for n in (256, 512, 1024, 2048, 4096, 8192) if n <= args.max_n]
    rows = []
    for method in METHODS:
        for n in ns:
            res = subprocess.run(
                [sys.executable, __file__, "--child", method, str(n), "--repeats", str(args.repeats)],
                capture_output=True,
                text=True,
                env=env,
                check=True,
            )
            row = json.loads(res.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(
                f"{method:10s} n={n:5d}  wall {row['seconds'] * 1e3:9.2f} ms  cpu {row['cpu_seconds'] * 1e3:9.2f} ms  "
                f"{row['peak_mib']:8.1f} MiB",
                flush=True,
            )
    rev = reversible_memory()
    for r in rev:
        print(
            f"reversible layers={r['layers']}: plain {r['plain_mib']:.2f} MiB, reversible {r['reversible_mib']:.2f} MiB"
        )
    import torch

    result = {
        "settings": {
            **SETTINGS,
            "batch": 1,
            "heads": 1,
            "dtype": "float32",
            "threads": int(env["OMP_NUM_THREADS"]),
            "repeats": args.repeats,
            "torch": torch.__version__,
            "machine": platform.machine(),
            "memory": "peak RSS during one call minus RSS before it, MiB",
            "seconds": "fastest wall time of the repeats",
            "cpu_seconds": "median process CPU time",
            "load_average_1min": os.getloadavg()[0],
        },
        "attention": rows,
        "reversible": rev,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)} and {plot(result).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
