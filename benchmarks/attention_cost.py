"""Time and peak memory of full, local, Linformer and LSH attention against sequence length.

Also the activation memory that reversible residual layers save. The results
go to ``benchmarks/results/attention_cost.json`` and the figure of the
measured curves to ``book/figures/attention_cost.png``, which the chapter
``ch03_3_4_transformer_variants`` shows as an image (its stored outputs hold
only analytic costs, so nothing measured is compared by nbval).

    python benchmarks/attention_cost.py              # 256 ... 8192 tokens
    python benchmarks/attention_cost.py --max-n 2048 # quicker
    python benchmarks/attention_cost.py --plot-only  # redraw the figure from the JSON

    python benchmarks/attention_cost.py --estimate   # only print how long a run would take
    python benchmarks/attention_cost.py --quick --repeats 2

Every (method, n) runs in ``--repeats`` fresh processes (default 5; see
``_bench.Fresh``) so that each peak resident memory is its own: per process, the
peak RSS during the first call minus the RSS just before it (inputs already
allocated), in MiB, then the wall-clock and process CPU time of further calls
(median of as many as fit in 0.1 s, at least one; the first call's time where
it took 0.5 s or more). Reported: the median over the
processes with min-max; every value in the JSON. Single head, batch 1,
``d = 64``, float32, on ``BENCH_THREADS`` threads (default 1: on a shared machine, a second
thread mostly measures how long the OpenMP barrier waits for a descheduled core).
The issues name no target for these figures; the reversible-layer figures are
exact counts of the bytes autograd saves (not timed, not repeated).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import _bench

OUT = _bench.RESULTS / "attention_cost.json"
FIGURE = _bench.FIGURES / "attention_cost.png"
GRID = (256, 512, 1024, 2048, 4096, 8192)
METHODS = ("full", "local", "linformer", "lsh")
SETTINGS = {"d": 64, "local_w": 32, "linformer_k": 128, "lsh_buckets": 16, "lsh_chunk": 64}


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


def measure_one(method: str, n: int) -> dict:
    """In a fresh child: peak extra RSS of the first call, then the median wall and CPU time of more calls."""
    import torch

    torch.set_grad_enabled(False)
    _make(method, 256)()  # load kernels on a small input
    fn = _make(method, n)
    c0 = time.process_time()
    peak_mib, first = _bench.measure_call(fn)
    walls, cpus = [first], [time.process_time() - c0]
    if first < _bench.LONG_CALL_S:  # else the first call is the repeat's time, as in _bench.timed_calls
        walls, cpus = [], []
    while len(walls) < 9 and (not walls or sum(walls) < 0.1):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return {"seconds": statistics.median(walls), "cpu_seconds": statistics.median(cpus), "peak_mib": peak_mib}


def estimate(ns: list[int], repeats: int) -> float:
    """Seconds a run should take: each method probed at n = 1024 here, full attention scaled as n^2, the rest as n."""
    import torch

    torch.set_grad_enabled(False)
    t0 = {m: _bench.probe(_make(m, 1024)) for m in METHODS}
    torch.set_grad_enabled(True)
    per_repeat = sum(
        _bench.CHILD_OVERHEAD_S + 2 * max(t0[m] * (n / 1024) ** (2 if m == "full" else 1), 0.05)
        for m in METHODS
        for n in ns
    )
    return _bench.import_torch_seconds() + repeats * per_repeat


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
    """Draw the measured CPU time and peak memory against n (log-log; median, min-max) and save it as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["attention"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.9), constrained_layout=True)
    for m in METHODS:
        pts = sorted((r["n"], r["cpu_seconds"], r["peak_mib"]) for r in rows if r["method"] == m)
        for ax, k, scale in ((axes[0], 1, 1e3), (axes[1], 2, 1.0)):
            med = [max(p[k]["median"] * scale, 1e-2) for p in pts]
            lo = [md - max(p[k]["min"] * scale, 1e-2) for md, p in zip(med, pts)]
            hi = [max(p[k]["max"] * scale, 1e-2) - md for md, p in zip(med, pts)]
            ax.errorbar([p[0] for p in pts], med, yerr=[lo, hi], fmt="o-", capsize=3, label=m)
    for ax, lab in zip(axes, ["CPU time per call (ms): median, min-max", "peak extra memory (MiB): median, min-max"]):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length n")
        ax.set_ylabel(lab)
        ax.legend()
    s, mc = result["settings"], result["machine"]
    fig.suptitle(
        f"measured: d={s['d']}, {s['threads']} thread(s), {s['repeats']} fresh processes per point; {mc['cpu']}, "
        f"torch {mc['torch']}, load {mc['load_average_start'][0]:.1f}-{mc['load_average_end'][0]:.1f}",
        fontsize=8,
    )
    return _bench.save_figure(fig, path, dpi=90)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    _bench.add_common_arguments(p)
    p.add_argument("--max-n", type=int, default=max(GRID))
    p.add_argument("--plot-only", action="store_true", help="redraw the figure from the stored JSON, measure nothing")
    args = p.parse_args(argv)
    if args.plot_only:
        print(f"wrote {plot(json.loads(OUT.read_text()))}")
        return 0
    threads = _bench.bench_threads()
    ns = [n for n in ((256, 512) if args.quick else GRID) if n <= args.max_n]
    import torch

    torch.set_num_threads(threads)
    est = estimate(ns, args.repeats)
    info = _bench.begin(est, args.estimate)
    if info is None:
        return 0
    fresh = _bench.Fresh(
        ["attnsurvey.general_model", "attnsurvey.transformer.linformer", "attnsurvey.transformer.local",
         "attnsurvey.transformer.reformer"]
    )  # fmt: skip
    points = [(m, n) for m in METHODS for n in ns]
    raw = fresh.rounds(measure_one, points, args.repeats)
    rows = []
    print(f"\n{'method':10s} {'n':>5s}  {'wall ms: median (min-max)':>27s}  {'cpu ms':>22s}  {'peak MiB':>22s}")
    for (m, n), runs in raw.items():
        row = {"method": m, "n": n, **{k: _bench.summary([x[k] for x in runs]) for k in runs[0]}}
        rows.append(row)
        print(
            f"{m:10s} {n:5d}  {_bench.show(row['seconds'], 1e3):>27s}  {_bench.show(row['cpu_seconds'], 1e3):>22s}  "
            f"{_bench.show(row['peak_mib']):>22s}"
        )
    rev = reversible_memory()
    for r in rev:
        print(
            f"reversible layers={r['layers']}: plain {r['plain_mib']:.2f} MiB, reversible {r['reversible_mib']:.2f} MiB"
        )
    info = _bench.end(info, [], args.repeats)
    result = {
        "settings": {
            **SETTINGS,
            "batch": 1,
            "heads": 1,
            "dtype": "float32",
            "memory": "per repeat (a fresh process): peak RSS during the first call minus RSS before it, MiB",
            "seconds": "per repeat: median wall time of the calls after the first (as many as fit in 0.1 s, >= 1)",
            "cpu_seconds": "per repeat: median process CPU time of the same calls",
            "reversible": "bytes autograd saves for backward (exact count, not timed)",
            **_bench.settings(args, threads, est),
        },
        "machine": info,
        "attention": rows,
        "reversible": rev,
    }
    out = _bench.out_dir(args.out, args.quick)
    _bench.save(out / "attention_cost.json", result)
    print(f"wrote {plot(result, _bench.figure_path(out, 'attention_cost.png'))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
