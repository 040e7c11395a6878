"""The one attention core against ``F.scaled_dot_product_attention`` (issue 12's speed targets).

Two comparisons, each case in a fresh subprocess on ``BENCH_THREADS`` threads (default 1):

* ``attend`` on one head, batch 1, ``n = 16384``, ``d = 64``, float32, weights not
  requested (``need_weights=False``), against ``F.scaled_dot_product_attention``
  on the same tensors: fastest wall time of ``--repeats`` calls after a warm-up,
  and peak memory (peak RSS during one call minus the RSS before it, MiB).
* ``multi_head_attention`` forward + backward (weights not requested) against the
  same four projections written by hand around ``F.scaled_dot_product_attention``,
  batch 8, ``d_model = 256``, 8 heads, ``n = 512`` and ``2048``.

    python benchmarks/core_attention.py            # prints the figures, saves JSON
    python benchmarks/core_attention.py --quick    # small sizes, to check the script

The results go to ``benchmarks/results/core_attention.json`` with a machine
description. Figures from a shared, loaded machine are noisy: compare the ratio
of cases measured in the same run, not absolute times across runs.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from attention_cost import _rss_mib  # noqa: E402  (the same RSS reading as the other benchmark)

OUT = ROOT / "benchmarks" / "results" / "core_attention.json"


def _make(case: str, n: int):
    import torch
    import torch.nn.functional as F_

    from attnsurvey.attention import attend
    from attnsurvey.query_related.multihead import merge_heads, multi_head_attention, split_heads

    g = torch.Generator().manual_seed(0)
    if case in ("attend", "sdpa"):
        Q, K, V = (torch.randn(1, n, 64, generator=g) for _ in range(3))
        if case == "attend":
            return lambda: attend(Q, K, V, need_weights=False)[0]
        return lambda: F_.scaled_dot_product_attention(Q, K, V)
    B, d, h = 8, 256, 8
    X = torch.randn(B, n, d, generator=g, requires_grad=True)
    W = [(torch.randn(d, d, generator=g) / d**0.5).requires_grad_() for _ in range(4)]

    if case == "mha":
        def step():
            out, _ = multi_head_attention(X, X, X, *W, h, need_weights=False)
            out.sum().backward()
    else:  # the same projections around SDPA, by hand
        def step():
            q, k, v = (split_heads(X @ Wi.T, h) for Wi in W[:3])
            out = merge_heads(F_.scaled_dot_product_attention(q, k, v)) @ W[3].T
            out.sum().backward()
    return step


def measure_one(case: str, n: int, repeats: int) -> dict:
    """Run in a child process: peak extra RSS of one call, then the fastest of ``repeats`` calls."""
    import torch

    if case in ("attend", "sdpa"):
        torch.set_grad_enabled(False)
    _make(case, 64)()  # load kernels on a small input
    fn = _make(case, n)
    before = _rss_mib()
    fn()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB on Linux
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
    return {"case": case, "n": n, "seconds": min(walls), "peak_mib": max(peak - before, 0.0)}


def _run(case: str, n: int, repeats: int, env: dict) -> dict:
    res = subprocess.run([sys.executable, __file__, "--child", case, str(n), "--repeats", str(repeats)],
                         capture_output=True, text=True, env=env, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="small sizes (checks the script, not the targets)")
    p.add_argument("--child", nargs=2, metavar=("CASE", "N"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(measure_one(args.child[0], int(args.child[1]), args.repeats)))
        return 0
    threads = os.environ.get("BENCH_THREADS", "1")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    n_big, n_mha = (1024, (128, 256)) if args.quick else (16384, (512, 2048))
    rows = [_run(c, n_big, args.repeats, env) for c in ("attend", "sdpa")]
    for n in n_mha:
        rows += [_run(c, n, args.repeats, env) for c in ("mha", "projections+sdpa")]
    for r in rows:
        print(f"{r['case']:18s} n={r['n']:6d}  {r['seconds'] * 1e3:10.1f} ms  {r['peak_mib']:8.1f} MiB", flush=True)
    by = {(r["case"], r["n"]): r for r in rows}
    ratios = {
        f"attend/sdpa time n={n_big}": by["attend", n_big]["seconds"] / by["sdpa", n_big]["seconds"],
        f"attend/sdpa memory n={n_big}": (by["attend", n_big]["peak_mib"] + 1) / (by["sdpa", n_big]["peak_mib"] + 1),
    }
    for n in n_mha:
        ratios[f"mha/(projections+sdpa) fwd+bwd n={n}"] = by["mha", n]["seconds"] / by["projections+sdpa", n]["seconds"]
    for k, v in ratios.items():
        print(f"{k:45s} {v:6.2f}x")
    import torch

    result = {
        "settings": {"threads": int(threads), "repeats": args.repeats, "dtype": "float32", "torch": torch.__version__,
                     "machine": platform.machine(), "processor": platform.processor(), "cpus": os.cpu_count(),
                     "load_average": os.getloadavg(), "memory": "peak RSS during one call minus RSS before it, MiB (+1 in ratios)",
                     "seconds": "fastest wall time of the repeats"},
        "rows": rows,
        "ratios": ratios,
    }
    if not args.quick:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(result, indent=1) + "\n")
        print(f"saved {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
