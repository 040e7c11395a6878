"""What the numeric pin costs: the same work under the pinned environment and under the machine's native one.

Every chapter and test runs under ``attnsurvey.numeric_env``'s pin (portable ATen kernels, MKL's
compatible code path, oneDNN limited to SSE4.1, one thread, deterministic algorithms). This
script times two workloads under three environments:

* ``pinned``: ``numeric_env.pinned_environ()`` and ``apply_torch()``, as in a chapter;
* ``native, 1 thread``: the pin's variables removed, one thread (the kernel path alone);
* ``native, N threads``: the pin's variables removed, torch's default threads (all usable cores).

Workloads:

* ``seq2seq``: chapter 1's training of one model, the attention Seq2Seq (vocabulary 8,
  d_emb 16, d_h 32, 120 steps of batch 32, lengths 3-9): many small kernels, as in the book;
* ``mha``: ``multi_head_attention`` forward + backward, batch 8, n = 512, d_model 256,
  8 heads, weights not requested: a few large matrix products.

Each repeat runs in a fresh interpreter (the kernel path is fixed when torch loads) and times
one run after a warm-up run (two training steps; one call), so one-time set-up costs, which
differ between the kernel paths, are left out: the figure is the steady cost of the work.
With ``--quick`` (the smoke test's tiny sizes) one interpreter per environment runs both
workloads and times every repeat of each after one warm-up: a third of the interpreters
(at two repeats), whose start-up is most of a quick run. The figure is the median over
``--repeats`` (default 5) with min-max; the ratio is that of the medians.

    python benchmarks/pin_cost.py               # 5 repeats, saves benchmarks/results/pin_cost.json
    python benchmarks/pin_cost.py --estimate    # only print how long that would take
    python benchmarks/pin_cost.py --quick --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import _bench

WORKLOADS = ("seq2seq", "mha")
#: Seconds one repeat of each workload took here (2-core AMD EPYC, pinned), for the estimate only.
PROBE_S = {"seq2seq": 2.0, "mha": 0.6}
START_S = 3.0  # a fresh interpreter importing torch and the package
STEPS = 120  # chapter 1's training steps


def _workload(name: str, quick: bool):
    """A callable running the workload once (a smaller one with ``quick``)."""
    import torch

    if name == "seq2seq":
        from attnsurvey.experiments.seq2seq import fit_transduction
        from attnsurvey.seq2seq import Seq2Seq
        from attnsurvey.training import seed_everything

        def run(steps: int = 2 if quick else STEPS) -> None:
            g = seed_everything(0)
            model = Seq2Seq(8, d_emb=16, d_h=32, attention=True)
            fit_transduction(model, steps, g, lengths=(3, 9), batch_size=32, lr=2e-2)

        return run
    from attnsurvey.query_related.multihead import multi_head_attention

    n, B, d, h = (64, 2, 64, 4) if quick else (512, 8, 256, 8)
    g = torch.Generator().manual_seed(0)
    X = torch.randn(B, n, d, generator=g, requires_grad=True)
    W = [(torch.randn(d, d, generator=g) / d**0.5).requires_grad_() for _ in range(4)]

    def step() -> None:
        out, _ = multi_head_attention(X, X, X, *W, h, need_weights=False)
        out.sum().backward()

    return step


def child(names: list[str], pinned: bool, threads: int, quick: bool, repeats: int = 1) -> None:
    """Run in a fresh interpreter: set threads; for each workload warm up and time ``repeats`` runs; print
    ``{workload: {"seconds": [one per run], "capability"}}`` as JSON."""
    import torch

    from attnsurvey import numeric_env

    if pinned:
        numeric_env.apply_torch()
    elif threads:
        torch.set_num_threads(threads)
    records = {}
    for name in names:
        fn = _workload(name, quick)
        fn(**({"steps": 2} if name == "seq2seq" else {}))  # warm-up: first-call set-up (kernels, allocations)
        seconds = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            seconds.append(time.perf_counter() - t0)
        records[name] = {"seconds": seconds, "capability": torch.backends.cpu.get_cpu_capability()}
    print(json.dumps(records))


def environments() -> dict[str, tuple[dict[str, str], int]]:
    """Name -> (environment, thread count to set; 0 = torch's default)."""
    from attnsurvey import numeric_env

    native = {k: v for k, v in os.environ.items() if k not in numeric_env.PINNED_ENV}
    one = {**native, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return {
        "pinned": (numeric_env.pinned_environ(native), 1),
        "native, 1 thread": (one, 1),
        f"native, {cores} threads": (native, 0),
    }


def measure(names: list[str], env_name: str, env: dict[str, str], threads: int, quick: bool, repeats: int) -> dict:
    """Workload -> the child's record: ``seconds`` (one per run of ``repeats``) and the ATen kernel path it ran
    (``capability``)."""
    args = [sys.executable, __file__, "--child", ",".join(names), "--threads", str(threads), "--repeats", str(repeats)]
    args += ["--pinned"] if env_name == "pinned" else []
    args += ["--quick"] if quick else []
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    _bench.add_common_arguments(parser)
    parser.add_argument("--child", type=lambda s: s.split(","), help=argparse.SUPPRESS)
    parser.add_argument("--pinned", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.pinned, args.threads, args.quick, args.repeats)
        return 0

    envs = environments()
    # quick: one interpreter per environment runs every repeat of both workloads; else one per repeat and workload
    interpreters, runs_each = (1, args.repeats) if args.quick else (args.repeats, 1)
    groups = [list(WORKLOADS)] if args.quick else [[w] for w in WORKLOADS]
    run_s = sum(0.5 if args.quick else PROBE_S[w] for w in WORKLOADS)
    estimated = interpreters * len(envs) * (len(groups) * START_S + runs_each * run_s)
    info = _bench.begin(estimated, args.estimate)
    if info is None:
        return 0
    raw: dict[str, dict[str, list[float]]] = {w: {e: [] for e in envs} for w in WORKLOADS}
    capability: dict[str, str] = {}
    for r in range(interpreters):
        for group in groups:
            for e, (env, threads) in envs.items():  # the environments interleaved: they see the same load
                for w, record in measure(group, e, env, threads, args.quick, runs_each).items():
                    raw[w][e] += record["seconds"]
                    capability[e] = record["capability"]
        print(f"round {r + 1}/{interpreters} done", flush=True)

    rows = {w: {e: _bench.summary(v) for e, v in by_env.items()} for w, by_env in raw.items()}
    names = list(envs)
    where = "runs, one interpreter per environment (--quick)" if args.quick else "fresh interpreters"
    print(f"\nseconds per run, median (min-max) of {args.repeats} {where}")
    print("ATen kernel path: " + ", ".join(f"{e}: {c}" for e, c in capability.items()))
    print(f"{'workload':<10}" + "".join(f"{e:>30}" for e in names) + f"{'pinned / native 1 thread':>28}")
    for w, by_env in rows.items():
        ratio = _bench.median_ratio(by_env["pinned"], by_env["native, 1 thread"])
        cells = "".join(f"{_bench.show(by_env[e], fmt='.3g'):>30}" for e in names)
        print(f"{w:<10}{cells}{ratio:>27.2f}x")
    out = _bench.out_dir(args.out, args.quick)
    info = _bench.end(info, [], args.repeats)
    settings = {
        "environments": {e: {"threads": t or "default", "cpu_capability": capability[e]} for e, (_, t) in envs.items()}
    }
    over = (
        "repeats (one interpreter per environment, --quick)" if args.quick else "repeats (one fresh interpreter each)"
    )
    settings |= _bench.settings(args, 1, estimated, over=over)
    result = {
        "settings": settings,
        "machine": info,
        "seconds": rows,
        "ratio_pinned_over_native_1_thread": {
            w: _bench.median_ratio(by_env["pinned"], by_env["native, 1 thread"]) for w, by_env in rows.items()
        },
        "targets": [],
    }
    _bench.save(out / "pin_cost.json", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
