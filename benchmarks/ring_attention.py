"""Ring attention on P = 1, 2, 4 local processes: per-rank peak memory, time, error and bytes sent.

    python benchmarks/ring_attention.py              # n = 16384, d = 64
    python benchmarks/ring_attention.py -n 4096      # quicker

Each P runs in freshly spawned processes (gloo on 127.0.0.1, one thread each).
The sequence is the same seeded ``(1, n, d)`` Q, K, V for every P. Per rank:
the peak RSS (``VmHWM``) during the first ring pass minus the RSS just before it, and the
median wall-clock time of ``--repeats`` further passes (each started after a
barrier). The error is the largest difference of the gathered context from
single-process SDPA. On a machine with fewer cores than P the processes share
cores, so the time shows the overhead of the ring, not its speed-up.
Results: ``benchmarks/results/ring_attention.json``, with the machine.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
OUT = ROOT / "benchmarks" / "results" / "ring_attention.json"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-n", type=int, default=16384)
    p.add_argument("-d", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--timeout", type=float, default=600.0)
    args = p.parse_args(argv)
    os.environ["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")
    import torch
    import torch.nn.functional as F

    from attnsurvey.beyond.ring import UNITS, launch, ring_step_bytes, seeded_chunk

    torch.set_num_threads(1)
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "")
    info = {"cpu": cpu, "cores": os.cpu_count(), "threads_per_rank": 1, "torch": torch.__version__,
            "python": platform.python_version(), "load_average_1min_start": os.getloadavg()[0]}
    full = [torch.cat([seeded_chunk(w, u, UNITS, args.n, args.d) for u in range(UNITS)], -2)[:, None] for w in "QKV"]
    with torch.no_grad():  # 4-D input: SDPA's fused kernel, so the parent stays small before it spawns the ranks
        ref = F.scaled_dot_product_attention(*full, is_causal=args.causal)[:, 0]
    del full
    rows = []
    print(f"n = {args.n}, d = {args.d}, float32, causal = {args.causal}")
    print(f"{'P':>2} {'rank':>4} {'peak MiB':>9} {'median s':>9} {'sent/step MiB':>14} {'sent total MiB':>15} {'max error':>10}")
    for P in (1, 2, 4):
        job = {"source": "seeded", "n": args.n, "d": args.d, "seed": 0, "is_causal": args.causal, "repeats": args.repeats}
        with tempfile.TemporaryDirectory() as tmp:
            results = launch(P, job, tmp, timeout=args.timeout)
        err = float((torch.cat([r["out"] for r in results], -2) - ref).abs().max())
        vol = ring_step_bytes(args.n, args.d, args.d, P)
        for rank, r in enumerate(results):
            row = {"P": P, "rank": rank, "peak_mib": max(r["peak_bytes"], 0) / 2**20, "seconds": r["seconds"],
                   "sent_per_step_mib": vol["per_step"] / 2**20 if P > 1 else 0.0, "sent_per_rank_mib": vol["per_rank"] / 2**20,
                   "max_abs_error": err}
            rows.append(row)
            print(f"{P:>2} {rank:>4} {row['peak_mib']:>9.1f} {row['seconds']:>9.3f} {row['sent_per_step_mib']:>14.2f} "
                  f"{row['sent_per_rank_mib']:>15.2f} {err:>10.1e}", flush=True)
    info["load_average_1min_end"] = os.getloadavg()[0]
    print("machine:", json.dumps(info))
    result = {"settings": {"n": args.n, "d": args.d, "dtype": "float32", "causal": args.causal, "repeats": args.repeats,
                           "memory": "per rank: peak RSS (VmHWM) during the first pass minus RSS before it, MiB",
                           "seconds": "per rank: median wall time of the repeats"},
              "machine": info, "ranks": rows}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
