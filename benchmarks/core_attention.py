"""The one attention core against ``F.scaled_dot_product_attention`` (issue 12's speed targets).

Two comparisons on ``BENCH_THREADS`` threads (default 1). Times: the two cases of a
pair run alternately in one subprocess (fastest of ``--repeats`` each), so both see the
same load; memory: each case alone in a fresh subprocess (peak RSS of one call).

* ``attend`` on one head, batch 1, ``n = 16384``, ``d = 64``, float32, weights not
  requested (``need_weights=False``), inputs ``(1, n, d)``, against
  ``F.scaled_dot_product_attention`` on the same tensors viewed as ``(1, 1, n, d)``
  (its fused kernel): fastest wall time of ``--repeats`` calls after a warm-up,
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
        # SDPA at its best: 4-D input, which its fused CPU kernel needs (3-D input takes the O(n^2) math path)
        Q4, K4, V4 = Q[:, None], K[:, None], V[:, None]
        return lambda: F_.scaled_dot_product_attention(Q4, K4, V4)
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


def measure_pair(case_a: str, case_b: str, n: int, repeats: int) -> dict:
    """Run in a child process: the two cases alternately, ``repeats`` times each; the fastest of each.

    Alternating in one process exposes both cases to the same load, so their ratio
    is much steadier on a shared machine than times taken in separate processes.
    """
    import torch

    if case_a in ("attend", "sdpa"):
        torch.set_grad_enabled(False)
    fns = {c: _make(c, n) for c in (case_a, case_b)}
    for fn in fns.values():
        fn()  # warm-up
    walls: dict[str, list[float]] = {c: [] for c in fns}
    for _ in range(repeats):
        for c, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            walls[c].append(time.perf_counter() - t0)
    return {c: min(w) for c, w in walls.items()}


def _run(args: list[str], repeats: int, env: dict) -> dict:
    res = subprocess.run(
        [sys.executable, __file__, *args, "--repeats", str(repeats)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="small sizes (checks the script, not the targets)")
    p.add_argument("--child", nargs=2, metavar=("CASE", "N"), help=argparse.SUPPRESS)
    p.add_argument("--pair", nargs=3, metavar=("CASE_A", "CASE_B", "N"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(measure_one(args.child[0], int(args.child[1]), args.repeats)))
        return 0
    if args.pair:
        print(json.dumps(measure_pair(args.pair[0], args.pair[1], int(args.pair[2]), args.repeats)))
        return 0
    threads = os.environ.get("BENCH_THREADS", "1")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    n_big, n_mha = (1024, (128, 256)) if args.quick else (16384, (512, 2048))
    pairs = [("attend", "sdpa", n_big)] + [("mha", "projections+sdpa", n) for n in n_mha]
    rows, ratios = [], {}
    for a, b, n in pairs:
        mem = {c: _run(["--child", c, str(n)], 1, env)["peak_mib"] for c in (a, b)}
        secs = _run(["--pair", a, b, str(n)], args.repeats, env)
        for c in (a, b):
            rows.append({"case": c, "n": n, "seconds": secs[c], "peak_mib": mem[c]})
            print(f"{c:18s} n={n:6d}  {secs[c] * 1e3:10.1f} ms  {mem[c]:8.1f} MiB", flush=True)
        what = "fwd+bwd " if a == "mha" else ""
        ratios[f"{a}/{b} {what}time n={n}"] = secs[a] / secs[b]
        ratios[f"{a}/{b} memory n={n}"] = (mem[a] + 1) / (mem[b] + 1)
    for k, v in ratios.items():
        print(f"{k:45s} {v:6.2f}x")
    import torch

    result = {
        "settings": {
            "threads": int(threads),
            "repeats": args.repeats,
            "dtype": "float32",
            "torch": torch.__version__,
            "machine": platform.machine(),
            "processor": platform.processor(),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
            "memory": "peak RSS during one call minus RSS before it, MiB (+1 in ratios)",
            "seconds": "fastest wall time of the repeats, the two cases of a pair alternating in one process",
        },
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
