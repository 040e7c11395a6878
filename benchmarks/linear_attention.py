"""Chunked linear attention vs softmax attention (SDPA, causal): forward time over n, and the crossover n.

    python benchmarks/linear_attention.py              # n = 256..16384, 5 repeats
    python benchmarks/linear_attention.py --estimate   # only print how long that would take
    python benchmarks/linear_attention.py --quick --repeats 2   # tiny sizes: checks the script runs

One sequence, ``--heads`` heads (default 1), d = 64, float32, forward only (no autograd),
``BENCH_THREADS`` threads (default 1), every figure in one process. Two methods:
``chunked`` is :func:`attnsurvey.beyond.linear_attention.linear_attention_chunked`
(``phi = elu + 1``, normalised, no gate, chunks of ``--chunk`` = 64 positions: time linear
in n), ``sdpa`` is ``F.scaled_dot_product_attention(..., is_causal=True)`` on
``(1, h, n, d)`` inputs (PyTorch's fused CPU kernel; time quadratic in n). At each n both
are called once to warm up, then ``--repeats`` times in alternation (so a change of load
hits both); the figures are the medians with min-max. The crossover is the smallest n of
the grid from which the chunked form is faster at every larger n of the grid.
The two compute different functions (linear attention is not softmax attention): this is
a cost comparison, not a check of one against the other. Like the other native-speed
scripts it runs outside the numeric pin and its figures never enter a compared output.
Result: ``benchmarks/results/linear_attention.json`` (per n: raw values, medians,
ratio; the crossover; the machine), for the chapter on recurrent attention to plot.
"""

from __future__ import annotations

import argparse

import _bench

D = 64
GRID = (256, 512, 1024, 2048, 4096, 8192, 16384)
QUICK_GRID = (256, 512, 1024)
METHODS = ("chunked", "sdpa")


def _calls(n: int, heads: int, chunk: int) -> dict:
    import torch
    import torch.nn.functional as F

    from attnsurvey.beyond.linear_attention import linear_attention_chunked

    g = torch.Generator().manual_seed(n)
    Q, K, V = (torch.randn(1, heads, n, D, generator=g) for _ in range(3))
    return {
        "chunked": lambda: linear_attention_chunked(Q, K, V, chunk)[0],
        "sdpa": lambda: F.scaled_dot_product_attention(Q, K, V, is_causal=True),
    }


def measure(grid: tuple[int, ...], heads: int, chunk: int, repeats: int) -> list[dict]:
    """Per n: the summaries of both methods' seconds and the ratio of the medians (chunked / SDPA)."""
    import statistics
    import time

    import torch

    rows = []
    with torch.no_grad():
        for n in grid:
            calls = _calls(n, heads, chunk)
            times: dict[str, list[float]] = {m: [] for m in METHODS}
            for call in calls.values():
                call()  # warm-up
            for _ in range(repeats):
                for m, call in calls.items():
                    t0 = time.perf_counter()
                    call()
                    times[m].append(time.perf_counter() - t0)
            ratio = statistics.median(times["chunked"]) / statistics.median(times["sdpa"])
            rows.append({"n": n, **{m: _bench.summary(t) for m, t in times.items()}, "ratio": ratio})
            print(
                f"  n = {n:6d}: chunked {_bench.show(rows[-1]['chunked'], 1e3)} ms, "
                f"SDPA {_bench.show(rows[-1]['sdpa'], 1e3)} ms, chunked / SDPA {ratio:.2f}",
                flush=True,
            )
    return rows


def crossover(rows: list[dict]) -> int | None:
    """The smallest n from which the chunked form's median is below SDPA's at every larger n (None: nowhere)."""
    found = None
    for row in reversed(rows):
        if row["ratio"] >= 1.0:
            break
        found = row["n"]
    return found


def estimate(grid: tuple[int, ...], heads: int, chunk: int, repeats: int) -> float:
    """Seconds the run should take: a probe of both methods at n = 1024, SDPA scaled as n^2 and chunked as n."""
    import torch

    with torch.no_grad():
        calls = _calls(1024, heads, chunk)
        t_lin, t_sdpa = _bench.probe(calls["chunked"]), _bench.probe(calls["sdpa"])
    return _bench.import_torch_seconds() + (repeats + 1) * sum(
        t_lin * n / 1024 + t_sdpa * (n / 1024) ** 2 for n in grid
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    _bench.add_common_arguments(p)
    p.add_argument("--heads", type=int, default=1, help="heads of the one sequence")
    p.add_argument("--chunk", type=int, default=64, help="chunk size C of the chunked form")
    args = p.parse_args(argv)
    threads = _bench.bench_threads()
    import torch

    torch.set_num_threads(threads)
    grid = QUICK_GRID if args.quick else GRID
    est = estimate(grid, args.heads, args.chunk, args.repeats)
    info = _bench.begin(est, args.estimate)
    if info is None:
        return 0
    print(f"\nforward, d = {D}, {args.heads} head(s), C = {args.chunk}, float32, median (min-max) of {args.repeats}:")
    rows = measure(grid, args.heads, args.chunk, args.repeats)
    cross = crossover(rows)
    print(f"\ncrossover: chunked linear attention is faster than causal SDPA from n = {cross} on (in this grid)")
    info = _bench.end(info, [], args.repeats)
    result = {
        "settings": {
            "d": D,
            "batch": 1,
            "heads": args.heads,
            "chunk": args.chunk,
            "dtype": "float32",
            "feature_map": "elu+1",
            "seconds": "per method and n: wall time of each forward call after one warm-up call, the two methods "
            "called in alternation in one process; ratio = median chunked / median SDPA",
            "crossover": "smallest n of the grid from which chunked is faster than SDPA at every larger n",
            **_bench.settings(args, threads, est),
        },
        "machine": info,
        "rows": rows,
        "crossover_n": cross,
        "targets": [],
    }
    _bench.save(_bench.out_dir(args.out, args.quick) / "linear_attention.json", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
