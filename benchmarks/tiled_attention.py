"""Exact attention in linear memory: plain `attend` vs tiled attention vs SDPA, time, memory and error.

    python benchmarks/tiled_attention.py              # the targets and the cost curves (5 repeats)
    python benchmarks/tiled_attention.py --estimate   # only print how long that would take
    python benchmarks/tiled_attention.py --quick --repeats 2   # tiny sizes: checks the script runs
    BENCH_THREADS=1 python benchmarks/tiled_attention.py --speed-only  # only the speed targets against SDPA's flash kernel

One head, batch 1, d = 64, float32, forward only, ``BENCH_THREADS`` threads (default 1).
Every (method, n, repeat) runs in a fresh process (see ``_bench.Fresh``): after a
warm-up call on n = 256 it makes one call at n, whose peak resident memory minus
the RSS just before it is the memory figure, then times further calls (as many as
fit in 0.1 s, at least one; their median is the repeat's time), except where that
first call took 0.5 s or more: then its time is the repeat's time (the kernels are
loaded by the warm-up; one more call would double the cost of the largest sizes). The figures are
the median over ``--repeats`` such processes, with min-max. Plain ``attend`` (it
stores the n x n scores and weights) is measured up to ``--plain-max-n`` (16,384:
at 32,768 it needs 8 GiB and about a minute per call) and skipped where its
``2 n^2`` floats would not fit in the available memory; tiled attention and SDPA
go to 32,768.

SDPA gets ``(1, 1, n, d)`` inputs: PyTorch's fused CPU (flash) kernel needs
four dimensions and silently falls back to the n^2 math path for three.

Also, on ``--repeats`` seeds: the largest forward error of tiled attention
against ``F.scaled_dot_product_attention`` at n = 16,384 (float32, causal and
not), and the largest gradient error (dQ, dK, dV) against SDPA's autograd at
n = 2,048 (float64); the target table uses the largest over the seeds.
Speed targets (``--speed-only`` runs just these, in this process, and writes
``benchmarks/results/tiled_attention_speed.json``): the fused-tile version
(:func:`attnsurvey.beyond.tiled_fused.fused_tiled_attend`: the same tiles and merge, one
fused kernel call per tile) forward against SDPA's fused CPU (flash) kernel at
n = 16,384 (at most 1.2 times its time) and forward + backward at n = 4,096 (at most
1.3 times), d = 64, float32; the teaching version's ratios are reported beside them.
Each figure is the median of ``--repeats`` calls after one warm-up call, the three
methods called in alternation. Its exactness is a target too: the forward error
against SDPA (float32) and the gradient error against float64 autograd of ``attend``.
Results: ``benchmarks/results/tiled_attention.json`` (raw values, machine) and
the figure ``book/figures/tiled_attention_cost.png`` shown in chapter 6.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import _bench

METHODS = ("plain", "tiled", "sdpa")
D = 64
GRID = (512, 1024, 2048, 4096, 8192, 16384, 32768)
N_TARGET = 16384
N_GRAD = 2048
N_SPEED_FWD, N_SPEED_BWD = 16384, 4096
#: The inputs every figure is measured on (recorded in the JSON's settings).
SHAPE = {"d": D, "batch": 1, "heads": 1, "dtype": "float32"}
QUICK = {"grid": (512, 1024), "n_target": 1024, "n_grad": 256, "speed": (1024, 512)}


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
    return {
        "plain": lambda: attend(Q, K, V)[0],
        "tiled": lambda: tiled_attend(Q, K, V),
        "sdpa": lambda: F.scaled_dot_product_attention(Q4, K4, V4)[:, 0],
    }[method]


def measure_one(method: str, n: int) -> dict:
    """In a fresh child: peak extra RSS (MiB) and time of the first call at n, then the median time of more calls."""
    import torch

    torch.set_grad_enabled(False)
    _fn(method, 256)()  # load the kernels on a small input
    fn = _fn(method, n)
    peak_mib, first = _bench.measure_call(fn)
    return {"peak_mib": peak_mib, "first_seconds": first, "seconds": _bench.timed_calls(fn, first=first)}


def errors(n_fwd: int, n_grad: int, seed: int) -> dict:
    """Forward error in float32 at n_fwd and gradient error in float64 at n_grad, both against SDPA."""
    import torch
    import torch.nn.functional as F

    from attnsurvey.beyond.tiled import tiled_attend

    g = torch.Generator().manual_seed(1000 + seed)
    out = {}
    with torch.no_grad():
        Q, K, V = (torch.randn(1, 1, n_fwd, D, generator=g) for _ in range(3))
        for c in (False, True):
            diff = tiled_attend(Q, K, V, is_causal=c) - F.scaled_dot_product_attention(Q, K, V, is_causal=c)
            out["forward_causal" if c else "forward"] = float(diff.abs().max())
    Q, K, V = (torch.randn(1, 1, n_grad, D, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    dO = torch.randn(1, 1, n_grad, D, generator=g, dtype=torch.float64)
    for c in (False, True):
        mine = torch.autograd.grad(tiled_attend(Q, K, V, is_causal=c), (Q, K, V), dO)
        ref = torch.autograd.grad(F.scaled_dot_product_attention(Q, K, V, is_causal=c), (Q, K, V), dO)
        out["grad_causal" if c else "grad"] = max(float((a - b).abs().max()) for a, b in zip(mine, ref))
    return out


SPEED_METHODS = ("tiled", "fused", "sdpa")


def _attention(method: str):
    import torch.nn.functional as F

    from attnsurvey.beyond.tiled import tiled_attend
    from attnsurvey.beyond.tiled_fused import fused_tiled_attend

    return {"tiled": tiled_attend, "fused": fused_tiled_attend, "sdpa": F.scaled_dot_product_attention}[method]


def speed(n_fwd: int, n_bwd: int, repeats: int) -> dict:
    """Median seconds of tiled attention (teaching and fused-tile) and SDPA (4-D, fused kernel).

    Forward at n_fwd, forward + backward at n_bwd; ``ratio`` is tiled / SDPA, ``fused_ratio`` fused / SDPA.
    """
    import statistics
    import time

    import torch

    g = torch.Generator().manual_seed(0)

    def fwd(method, n):
        Q, K, V = (torch.randn(1, 1, n, D, generator=g) for _ in range(3))
        f = _attention(method)

        def call():
            with torch.no_grad():
                return f(Q, K, V)

        return call

    def fwd_bwd(method, n):
        Q, K, V = (torch.randn(1, 1, n, D, generator=g, requires_grad=True) for _ in range(3))
        dO = torch.randn(1, 1, n, D, generator=g)
        f = _attention(method)
        return lambda: torch.autograd.grad(f(Q, K, V), (Q, K, V), dO)

    out = {}
    for what, make, n in (("forward", fwd, n_fwd), ("forward+backward", fwd_bwd, n_bwd)):
        calls = {m: make(m, n) for m in SPEED_METHODS}
        times: dict[str, list[float]] = {m: [] for m in calls}
        for m in calls:
            calls[m]()  # warm-up
        for _ in range(repeats):
            for m, call in calls.items():  # alternate, so a change of load hits every method
                t0 = time.perf_counter()
                call()
                times[m].append(time.perf_counter() - t0)
        out[what] = {"n": n, **{m: _bench.summary(t) for m, t in times.items()}}
        sdpa = statistics.median(times["sdpa"])
        out[what]["ratio"] = statistics.median(times["tiled"]) / sdpa
        out[what]["fused_ratio"] = statistics.median(times["fused"]) / sdpa
    return out


def fused_errors(n_fwd: int, n_grad: int, seeds: int) -> dict:
    """Largest error of the fused-tile version over ``seeds`` seeds, causal and not.

    Forward in float32 at n_fwd against SDPA; gradients in float64 at n_grad against float64
    autograd of plain attention (:func:`attnsurvey.attention.attend`).
    """
    import torch
    import torch.nn.functional as F

    from attnsurvey.attention import attend
    from attnsurvey.beyond.tiled_fused import fused_tiled_attend

    out: dict[str, float] = {}
    for seed in range(seeds):
        g = torch.Generator().manual_seed(2000 + seed)
        with torch.no_grad():
            Q, K, V = (torch.randn(1, 1, n_fwd, D, generator=g) for _ in range(3))
            for c in (False, True):
                diff = fused_tiled_attend(Q, K, V, is_causal=c) - F.scaled_dot_product_attention(Q, K, V, is_causal=c)
                key = "forward_causal" if c else "forward"
                out[key] = max(out.get(key, 0.0), float(diff.abs().max()))
        Q, K, V = (torch.randn(1, n_grad, D, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
        dO = torch.randn(1, n_grad, D, generator=g, dtype=torch.float64)
        for c in (False, True):
            mask = torch.ones(n_grad, n_grad, dtype=torch.bool).tril() if c else None
            mine = torch.autograd.grad(fused_tiled_attend(Q, K, V, is_causal=c), (Q, K, V), dO)
            ref = torch.autograd.grad(attend(Q, K, V, mask)[0], (Q, K, V), dO)
            key = "grad_causal" if c else "grad"
            out[key] = max(out.get(key, 0.0), *(float((a - b).abs().max()) for a, b in zip(mine, ref)))
    return out


def speed_targets(sp: dict) -> list[dict]:
    """The speed targets of the fused-tile version (issue 42): forward <= 1.2 x SDPA, forward + backward <= 1.3 x."""
    return [
        _bench.target(
            f"time fused-tile / SDPA flash, forward, n = {sp['forward']['n']}", sp["forward"]["fused_ratio"], 1.2
        ),
        _bench.target(
            f"time fused-tile / SDPA flash, forward+backward, n = {sp['forward+backward']['n']}",
            sp["forward+backward"]["fused_ratio"],
            1.3,
        ),
    ]


def fused_error_targets(err: dict, n_fwd: int, n_grad: int) -> list[dict]:
    """Exactness of the fused-tile version: float32 rounding forward, float64 rounding for the gradients."""
    return [
        _bench.target(f"fused-tile {what} max error{c}, {dtype}, n = {n_}", err[key + k], limit, unit="")
        for what, key, dtype, n_, limit in (
            ("forward (vs SDPA)", "forward", "float32", n_fwd, 1e-5),
            ("gradient (vs float64 autograd of attend)", "grad", "float64", n_grad, 1e-12),
        )
        for k, c in (("", ""), ("_causal", ", causal"))
    ]


def print_speed(sp: dict, repeats: int) -> None:
    print(f"\nspeed, d = {D}, float32, median (min-max) of {repeats} calls after a warm-up, seconds:")
    for what, r in sp.items():
        print(
            f"  {what:16s} n = {r['n']:6d}: tiled {_bench.show(r['tiled'])}, fused-tile {_bench.show(r['fused'])}, "
            f"SDPA {_bench.show(r['sdpa'])}; tiled / SDPA {r['ratio']:.2f}, fused-tile / SDPA {r['fused_ratio']:.2f}"
        )


def plan(grid: tuple[int, ...], plain_max_n: int) -> list[tuple[str, int]]:
    """The (method, n) points measured, plain only where it fits in memory."""
    points = []
    for n in grid:
        for method in METHODS:
            if method == "plain" and (n > plain_max_n or 1.5 * 2 * n * n * 4 > _available_bytes()):
                continue
            points.append((method, n))
    return points


def estimate(points: list[tuple[str, int]], repeats: int, n_target: int, n_grad: int) -> float:
    """Seconds the run should take: a probe of each method at n = 4096 (at most the largest n measured)
    here, scaled as n^2."""
    import torch

    torch.set_grad_enabled(False)
    n0 = min(4096, max(n for _, n in points))
    t0 = {m: _bench.probe(_fn(m, n0)) for m in METHODS}
    torch.set_grad_enabled(True)

    def t(m: str, n: int) -> float:
        return t0[m] * (n / n0) ** 2

    per_repeat = sum(
        _bench.CHILD_OVERHEAD_S + t(m, n) + (0 if t(m, n) >= _bench.LONG_CALL_S else max(t(m, n), 0.1))
        for m, n in points
    )
    errs = 2 * (t("tiled", n_target) + t("sdpa", n_target)) + 12 * t("tiled", n_grad)
    return _bench.import_torch_seconds() + repeats * (per_repeat + errs)  # + the fork server's start


def plot(cost: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.9), constrained_layout=True)
    labels = {
        "plain": "plain attend (scores stored)",
        "tiled": "tiled, online softmax",
        "sdpa": "torch SDPA (CPU flash)",
    }
    for m in METHODS:
        pts = sorted((r["n"], r["seconds"], r["peak_mib"]) for r in cost if r["method"] == m)
        if not pts:
            continue
        ns = [p[0] for p in pts]
        for ax, k in zip(axes, (1, 2)):
            med = [max(p[k]["median"], 0.1 if k == 2 else 0.0) for p in pts]
            lo = [m_ - max(p[k]["min"], 0.1 if k == 2 else 0.0) for m_, p in zip(med, pts)]
            hi = [max(p[k]["max"], 0.1 if k == 2 else 0.0) - m_ for m_, p in zip(med, pts)]
            ax.errorbar(ns, med, yerr=[lo, hi], fmt="o-", capsize=3, label=labels[m])
    for ax, lab in zip(
        axes, ["time per forward call (s): median, min-max", "peak extra memory (MiB): median, min-max"]
    ):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length n (one head, d = 64, float32)")
        ax.set_ylabel(lab)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=8)
    _bench.save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    _bench.add_common_arguments(p)
    p.add_argument("--max-n", type=int, default=max(GRID), help="largest n of the curves (never below the target n)")
    p.add_argument("--plain-max-n", type=int, default=N_TARGET, help="largest n for plain attend")
    p.add_argument("--speed-only", action="store_true", help="only the speed targets against SDPA's flash kernel")
    args = p.parse_args(argv)
    threads = _bench.bench_threads()
    n_speed = QUICK["speed"] if args.quick else (N_SPEED_FWD, N_SPEED_BWD)
    if args.speed_only:
        import torch

        torch.set_num_threads(threads)
        t_est = _bench.probe(_fn("tiled", 4096))
        est = _bench.import_torch_seconds() + 3 * (args.repeats + 1) * t_est * ((n_speed[0] / 4096) ** 2 + 3)
        info = _bench.begin(est, args.estimate)
        if info is None:
            return 0
        sp = speed(*n_speed, args.repeats)
        print_speed(sp, args.repeats)
        n_grad_speed = QUICK["n_grad"] if args.quick else N_GRAD
        ferr = fused_errors(n_speed[0], n_grad_speed, args.repeats)
        targets = [*speed_targets(sp), *fused_error_targets(ferr, n_speed[0], n_grad_speed)]
        info = _bench.end(info, targets, args.repeats)
        result = {
            "settings": {
                **SHAPE,
                "seconds": "per method: wall time of each call after one warm-up call, the methods called in "
                "alternation in one process; ratio = tiled / SDPA, fused_ratio = fused-tile / SDPA (medians)",
                "errors": "max abs difference over the seeds: forward vs SDPA (float32), gradients vs float64 "
                "autograd of attend",
                **_bench.settings(args, threads, est),
            },
            "machine": info,
            "speed": sp,
            "fused_errors": ferr,
            "targets": targets,
        }
        _bench.save(_bench.out_dir(args.out, args.quick) / "tiled_attention_speed.json", result)
        return 0
    grid, n_target, n_grad = (
        (QUICK["grid"], QUICK["n_target"], QUICK["n_grad"]) if args.quick else (GRID, N_TARGET, N_GRAD)
    )
    grid = tuple(n for n in grid if n <= max(args.max_n, n_target))
    points = plan(grid, max(args.plain_max_n, n_target))
    import torch

    torch.set_num_threads(threads)
    est = estimate(points, args.repeats, n_target, n_grad)
    info = _bench.begin(est, args.estimate)
    if info is None:
        return 0
    fresh = _bench.Fresh(["attnsurvey.beyond.tiled", "attnsurvey.general_model"])
    raw = fresh.rounds(measure_one, points, args.repeats)
    cost = []
    print(f"\n{'method':6s} {'n':>6s}  {'time s: median (min-max)':>32s}  {'peak MiB: median (min-max)':>30s}")
    for (method, n), runs in raw.items():
        row = {
            "method": method,
            "n": n,
            "seconds": _bench.summary([x["seconds"] for x in runs]),
            "first_call_seconds": _bench.summary([x["first_seconds"] for x in runs]),
            "peak_mib": _bench.summary([x["peak_mib"] for x in runs]),
        }
        cost.append(row)
        print(f"{method:6s} {n:6d}  {_bench.show(row['seconds']):>32s}  {_bench.show(row['peak_mib']):>30s}")
    errs = [errors(n_target, n_grad, seed) for seed in range(args.repeats)]
    err = {k: _bench.summary([e[k] for e in errs]) for k in errs[0]}
    print(f"\nlargest |tiled - SDPA| over {args.repeats} seeds:")
    print(
        f"  forward, float32, n = {n_target}: {err['forward']['max']:.2e} (causal {err['forward_causal']['max']:.2e})"
    )
    print(f"  gradients, float64, n = {n_grad}: {err['grad']['max']:.2e} (causal {err['grad_causal']['max']:.2e})")
    sp = speed(*n_speed, args.repeats)
    print_speed(sp, args.repeats)
    ferr = fused_errors(n_target, n_grad, args.repeats)
    at = {r["method"]: r for r in cost if r["n"] == n_target}
    targets = [
        _bench.target(
            f"peak memory tiled / plain, n = {n_target}",
            _bench.median_ratio(at["tiled"]["peak_mib"], at["plain"]["peak_mib"]),
            1 / 20,
        ),
        *(
            _bench.target(f"{what} max error vs SDPA{c}, {dtype}, n = {n_}", err[key + k]["max"], limit, unit="")
            for what, key, dtype, n_, limit in (
                ("forward", "forward", "float32", n_target, 1e-5),
                ("gradient", "grad", "float64", n_grad, 1e-4),
            )
            for k, c in (("", ""), ("_causal", ", causal"))
        ),
        _bench.target(
            f"time tiled / SDPA, n = {n_target}",
            _bench.median_ratio(at["tiled"]["seconds"], at["sdpa"]["seconds"]),
            2.0,
        ),
        *speed_targets(sp),
        *fused_error_targets(ferr, n_target, n_grad),
    ]
    info = _bench.end(info, targets, args.repeats)
    result = {
        "settings": {
            **SHAPE,
            "n_target": n_target,
            "n_grad": n_grad,
            "memory": "per repeat (a fresh process): peak RSS during the first call at n minus RSS before it, MiB",
            "seconds": "per repeat: median wall time of the calls after the first (as many as fit in 0.1 s, >= 1); "
            "the first call's time where it took >= 0.5 s",
            "errors": "max abs difference from SDPA, one value per seed",
            **_bench.settings(args, threads, est),
        },
        "machine": info,
        "cost": cost,
        "errors": err,
        "speed": sp,
        "fused_errors": ferr,
        "targets": targets,
    }
    out = _bench.out_dir(args.out, args.quick)
    _bench.save(out / "tiled_attention.json", result)
    fig = _bench.figure_path(out, "tiled_attention_cost.png")
    title = (
        f"median and min-max of {args.repeats} fresh processes each; {info['cpu']}, {threads} thread(s), "
        f"torch {info['torch']}, load {info['load_average_start'][0]:.1f}-{info['load_average_end'][0]:.1f}"
    )
    plot(cost, fig, title)
    print(f"wrote {fig}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
