"""Ring attention on P = 1, 2, 4 local processes: per-rank peak memory, time, error, bytes sent and work.

    python benchmarks/ring_attention.py              # n = 16384, d = 64, 5 repeats
    python benchmarks/ring_attention.py --estimate   # only print how long that would take
    python benchmarks/ring_attention.py --quick --repeats 2
    python benchmarks/ring_attention.py --causal --layouts contiguous zigzag --ps 4   # causal load balance

Each repeat of each P starts P fresh processes (gloo on 127.0.0.1, one thread
each) with :func:`attnsurvey.beyond.ring.launch`. The sequence is the same seeded
``(1, n, d)`` Q, K, V for every P. Per rank and repeat: the peak RSS (``VmHWM``)
during the first ring pass minus the RSS just before it, and the wall-clock time
of one more pass (started after a barrier). Reported: the median over the
``--repeats`` launches with min-max, every value in the JSON. The error is the
largest difference of the gathered context from single-process SDPA, over the
repeats. On a machine with fewer cores than P the processes share cores, so the
time shows the overhead of the ring, not its speed-up. ``--layouts`` runs each
layout of :mod:`attnsurvey.beyond.ring` (``contiguous``, ``zigzag``); with
``--causal`` the table shows each rank's time per pass next to the score entries
it computed (counted by the ring), with and without balancing.
Results: ``benchmarks/results/ring_attention.json``, with the machine.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import _bench

PS = (1, 2, 4)


def estimate(n: int, d: int, repeats: int, ps: list[int]) -> float:
    """Seconds the run should take: start-up of P interpreters, then two passes of about the work of tiled attention."""
    import torch

    from attnsurvey.beyond.tiled import tiled_attend

    n0 = 1024
    x = torch.randn(1, n0, d)
    with torch.no_grad():
        t_pass = _bench.probe(lambda: tiled_attend(x, x, x)) * (n / n0) ** 2
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    per_launch = {P: 1.0 + _bench.import_torch_seconds() * -(-P // cores) + 2 * t_pass / min(P, cores) for P in ps}
    return repeats * sum(per_launch.values())


def padded(n: int, P: int, layout: str) -> int:
    """The padded length of the layout (what the ranks hold together)."""
    from attnsurvey.beyond.ring import padded_length

    return padded_length(n, P, layout)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    _bench.add_common_arguments(p)
    p.add_argument("-n", type=int, default=16384)
    p.add_argument("-d", type=int, default=64)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds one launch may take")
    p.add_argument("--ps", type=int, nargs="+", default=list(PS), help="numbers of ranks (default 1 2 4)")
    p.add_argument("--layouts", nargs="+", default=["contiguous"], choices=["contiguous", "zigzag"])
    args = p.parse_args(argv)
    n = 256 if args.quick else args.n
    threads = _bench.bench_threads()
    os.environ["PYTHONPATH"] = str(_bench.SRC) + os.pathsep + os.environ.get("PYTHONPATH", "")
    import torch
    import torch.nn.functional as F

    from attnsurvey.beyond.ring import UNITS, launch, ring_step_bytes, seeded_chunk, unshard

    torch.set_num_threads(threads)
    est = estimate(n, args.d, args.repeats, args.ps) * len(args.layouts)
    ps = args.ps
    info = _bench.begin(est, args.estimate)
    if info is None:
        return 0
    full = [torch.cat([seeded_chunk(w, u, UNITS, n, args.d) for u in range(UNITS)], -2)[:, None] for w in "QKV"]
    with torch.no_grad():  # 4-D input: SDPA's fused kernel, so the parent stays small before it spawns the ranks
        ref = F.scaled_dot_product_attention(*full, is_causal=args.causal)[:, 0]
    del full
    job = {"source": "seeded", "n": n, "d": args.d, "seed": 0, "is_causal": args.causal, "repeats": 1}
    runs = [(P, layout) for layout in args.layouts for P in ps]
    raw: dict[tuple, list[list[dict]]] = {run: [] for run in runs}  # raw[P, layout][repeat][rank]
    errors: dict[tuple, list[float]] = {run: [] for run in runs}
    for r in range(args.repeats):
        for P, layout in runs:
            with tempfile.TemporaryDirectory() as tmp:
                results = launch(P, {**job, "layout": layout, "threads": threads}, tmp, timeout=args.timeout)
            out = unshard([x["out"] for x in results], n, layout)
            errors[P, layout].append(float((out - ref).abs().max()))
            raw[P, layout].append(
                [
                    {
                        "peak_mib": max(x["peak_bytes"], 0) / 2**20,
                        "seconds": x["seconds"],
                        "score_entries": x["work"]["score_entries"],
                    }
                    for x in results
                ]
            )
        print(f"round {r + 1}/{args.repeats} done", flush=True)
    rows = []
    print(f"\nn = {n}, d = {args.d}, float32, causal = {args.causal}, {args.repeats} launches per P")
    print(
        f"{'P':>2} {'layout':>10} {'rank':>4} {'peak MiB: median (min-max)':>28} {'s per pass: median (min-max)':>30} "
        f"{'score entries':>14} {'sent/step MiB':>14} {'sent total MiB':>15}"
    )
    for P, layout in runs:
        vol = ring_step_bytes(padded(n, P, layout), args.d, args.d, P)
        for rank in range(P):
            row = {
                "P": P,
                "layout": layout,
                "rank": rank,
                "peak_mib": _bench.summary([rep[rank]["peak_mib"] for rep in raw[P, layout]]),
                "seconds": _bench.summary([rep[rank]["seconds"] for rep in raw[P, layout]]),
                "score_entries": raw[P, layout][0][rank]["score_entries"],
                "sent_per_step_mib": vol["per_step"] / 2**20 if P > 1 else 0.0,
                "sent_per_rank_mib": vol["per_rank"] / 2**20,
            }
            rows.append(row)
            print(
                f"{P:>2} {layout:>10} {rank:>4} {_bench.show(row['peak_mib']):>28} {_bench.show(row['seconds']):>30} "
                f"{row['score_entries']:>14} {row['sent_per_step_mib']:>14.2f} {row['sent_per_rank_mib']:>15.2f}",
                flush=True,
            )
    per_p = {}
    for P, layout in runs:
        # the ring is as fast as its slowest rank and a machine must hold its largest rank: max over ranks per repeat
        per_p[f"{P} {layout}"] = {
            "peak_mib_largest_rank": _bench.summary([max(x["peak_mib"] for x in rep) for rep in raw[P, layout]]),
            "seconds_slowest_rank": _bench.summary([max(x["seconds"] for x in rep) for rep in raw[P, layout]]),
            "max_abs_error": _bench.summary(errors[P, layout]),
        }
    print(f"\n{'P layout':>13} {'largest rank peak MiB':>26} {'slowest rank s/pass':>26} {'max error':>10}")
    for key, s in per_p.items():
        print(
            f"{key:>13} {_bench.show(s['peak_mib_largest_rank']):>26} {_bench.show(s['seconds_slowest_rank']):>26} "
            f"{s['max_abs_error']['max']:>10.1e}"
        )
    targets = [
        _bench.target(f"max error vs one process, P = {key}, float32", s["max_abs_error"]["max"], 1e-5, unit="")
        for key, s in per_p.items()
    ]
    info = _bench.end(info, targets, args.repeats)
    result = {
        "settings": {
            "n": n,
            "d": args.d,
            "dtype": "float32",
            "causal": args.causal,
            "layouts": args.layouts,
            "memory": "per rank and launch: peak RSS (VmHWM) during the first pass minus RSS before it, MiB",
            "seconds": "per rank and launch: wall time of one more pass, after a barrier",
            **_bench.settings(args, threads, est, over="launches", threads_key="threads_per_rank"),
        },
        "machine": info,
        "ranks": rows,
        "per_P": per_p,
        "targets": targets,
    }
    _bench.save(_bench.out_dir(args.out, args.quick) / "ring_attention.json", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
