"""The one attention core against ``F.scaled_dot_product_attention``: speed targets and graph breaks.

Small-size figures first (``--only small`` runs just these, in one process):

* masked ``attend`` at ``(B, h, n, d) = (8, 4, 32, 16)`` (a key-padding mask
  ``(B, 1, 1, n)``, weights not requested) against ``F.scaled_dot_product_attention``
  with the same mask, calls alternating in rounds; target: within 1.5x;
* graph breaks under ``torch._dynamo.explain`` in masked ``attend`` and in
  ``MultiHeadAttention.forward`` with a key-padding mask; target: 0;
* one training step of the trained Transformer of ``chapters/ch06_4_trained_transformer.ipynb``
  (batch 32) in the chapter's own loop (:func:`attnsurvey.training.train`: forward,
  backward, gradient clipping, the portable Adam), reported in ms. ``--src PATH``
  imports the package from another checkout's ``src`` (e.g. the main branch), which
  gives the "before" figure of a change.

Then two large comparisons on ``BENCH_THREADS`` threads (default 1):

* ``attend`` on one head, batch 1, ``n = 16384``, ``d = 64``, float32, weights not
  requested (``need_weights=False``), inputs ``(1, n, d)``, against
  ``F.scaled_dot_product_attention`` on the same tensors viewed as ``(1, 1, n, d)``
  (its fused kernel), forward only;
* ``multi_head_attention`` forward + backward (weights not requested) against the
  same four projections written by hand around ``F.scaled_dot_product_attention``,
  batch 8, ``d_model = 256``, 8 heads, ``n = 512`` and ``2048``.

Time: the two cases of a pair run alternately in one fresh process, ``--repeats``
rounds (default 5) after a warm-up, the order swapped every round, so both see the
same load; the figure is the median per case and the median of the per-round
ratios, with min-max. Memory: each case alone in a fresh process per repeat (peak
RSS during one call minus the RSS before it); the ratio is that of the medians.

    python benchmarks/core_attention.py              # the targets, 5 repeats, saves JSON
    python benchmarks/core_attention.py --estimate   # only print how long that would take
    python benchmarks/core_attention.py --quick --repeats 2
    python benchmarks/core_attention.py --only small                         # the small figures only
    python benchmarks/core_attention.py --only small --src /work/main/src    # the same for another checkout
    python benchmarks/core_attention.py --only small --before /tmp/base/src  # plus the training step, paired

Results: ``benchmarks/results/core_attention.json`` with the machine and raw values.
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

import _bench

TARGET = 1.2
SMALL_TARGET = 1.5
SMALL = (8, 4, 32, 16)
PAIRS = (("attend", "sdpa", 16384), ("mha", "projections+sdpa", 512), ("mha", "projections+sdpa", 2048))
#: --quick: one pair of each kind (forward only; forward + backward), at sizes that take milliseconds
QUICK_PAIRS = (("attend", "sdpa", 1024), ("mha", "projections+sdpa", 128))


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


def _grad(case: str) -> None:
    import torch

    torch.set_grad_enabled(case not in ("attend", "sdpa"))


def measure_memory(case: str, n: int) -> dict:
    """In a fresh child: peak extra RSS (MiB) and wall time of one call, after a warm-up on n = 64."""
    _grad(case)
    _make(case, 64)()  # load kernels on a small input
    peak_mib, seconds = _bench.measure_call(_make(case, n))
    return {"peak_mib": peak_mib, "seconds": seconds}


def measure_pair(case_a: str, case_b: str, n: int, repeats: int) -> dict:
    """In a fresh child: the two cases alternately, ``repeats`` rounds (order swapped each round); times per round."""
    _grad(case_a)
    fns = {c: _make(c, n) for c in (case_a, case_b)}
    for fn in fns.values():
        fn()  # warm-up
    walls: dict[str, list[float]] = {c: [] for c in fns}
    for r in range(repeats):
        for c in (case_a, case_b) if r % 2 == 0 else (case_b, case_a):
            t0 = time.perf_counter()
            fns[c]()
            walls[c].append(time.perf_counter() - t0)
    return walls


def estimate(pairs: tuple[tuple[str, str, int], ...], repeats: int) -> float:
    """Seconds the run should take, from probes here: attend/SDPA at n = 1024 scaled as n^2; the multi-head
    cases at n = 128 and 256, fitted as a n + b n^2."""
    total = _bench.import_torch_seconds()  # the fork server's start
    for a, b, n in pairs:
        t = 0.0
        for case in (a, b):
            _grad(case)
            if case in ("attend", "sdpa"):
                t += _bench.probe(_make(case, 1024)) * (n / 1024) ** 2
            else:
                t1, t2 = (_bench.probe(_make(case, m)) for m in (128, 256))
                beta = max((t2 - 2 * t1) / (256**2 - 2 * 128**2), 0.0)
                t += max(t1 / 128 - beta * 128, 0.0) * n + beta * n * n
        total += (repeats + 1) * t + repeats * (2 * _bench.CHILD_OVERHEAD_S + t)
    _grad("mha")
    return total


def _per_call(fn, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def train_step_seconds(repeats: int, steps: int) -> list[float]:
    """Seconds per step of the chapter's own loop (:func:`attnsurvey.training.train`: clipping, the portable
    Adam) on the trained Transformer of ch06_4, one fixed batch of 32; ``repeats`` runs of ``steps`` steps."""
    import torch

    from attnsurvey.experiments import trained_transformer as tt
    from attnsurvey.numeric_env import portable_adam
    from attnsurvey.training import train

    torch.manual_seed(0)
    model = tt.make_model()
    opt = portable_adam(model.parameters(), lr=1e-2)
    batch = tt.reversal_data(32, torch.Generator().manual_seed(1))

    def train_steps() -> None:
        train(model, tt._loss, itertools.repeat(batch, steps), optimizer=opt)

    train_steps()  # warm-up
    return [_per_call(train_steps, 1) / steps for _ in range(repeats)]


def train_step_before_after(before: str, rounds: int) -> dict:
    """The training step of this checkout's package against the one in ``before`` (a ``src`` folder): each round
    runs both in fresh interpreters (order swapped every round), each the fastest of 5 runs of 40 steps."""
    import os
    import subprocess
    import sys

    here = str(Path(__file__).resolve().parents[1] / "src")
    seconds: dict[str, list[float]] = {"before": [], "after": []}
    for r in range(rounds):
        for name in ("before", "after") if r % 2 == 0 else ("after", "before"):
            env = {**os.environ, "PYTHONPATH": before if name == "before" else here}
            done = subprocess.run(
                [sys.executable, __file__, "--train-child"], env=env, capture_output=True, text=True, check=True
            )
            seconds[name].append(float(done.stdout.split()[-1]))
    ratio = _bench.ratio_of(seconds["after"], seconds["before"])
    print(
        f"training step, fresh interpreters, {rounds} rounds, ms: before {_bench.show(_bench.summary(seconds['before']), 1e3)}, "
        f"after {_bench.show(_bench.summary(seconds['after']), 1e3)}; after / before (paired) {_bench.show(ratio)}"
    )
    return {"seconds": seconds, "ratio_after_before": ratio}


def small_figures(repeats: int, quick: bool) -> tuple[dict, list[dict]]:
    """Masked attend against SDPA, graph breaks, and the training step (see the module notes); in this process."""
    import torch
    import torch.nn.functional as F_

    from attnsurvey.attention import attend
    from attnsurvey.masking import key_padding_mask
    from attnsurvey.query_related.multihead import MultiHeadAttention

    g = torch.Generator().manual_seed(0)
    B, h, n, d = SMALL
    Q, K, V = (torch.randn(B, h, n, d, generator=g) for _ in range(3))
    kpm = key_padding_mask(torch.randint(1, n + 1, (B,), generator=g), n)
    m4 = kpm[:, None, None, :]
    fns = {
        "attend (masked)": lambda: attend(Q, K, V, m4, need_weights=False),
        "sdpa (same mask)": lambda: F_.scaled_dot_product_attention(Q, K, V, attn_mask=m4),
    }
    calls = 20 if quick else 300
    walls: dict[str, list[float]] = {c: [] for c in fns}
    for fn in fns.values():
        _per_call(fn, calls)  # warm-up
    for r in range(repeats):
        for c in list(fns) if r % 2 == 0 else list(fns)[::-1]:
            walls[c].append(_per_call(fns[c], calls))
    print(f"masked attend at (B, h, n, d) = {SMALL}, us per call: median (min-max) over {repeats} rounds")
    for c, w in walls.items():
        print(f"  {c:20s} {_bench.show(_bench.summary(w), 1e6)}")
    ratio = _bench.ratio_of(walls["attend (masked)"], walls["sdpa (same mask)"])
    print(f"  ratio (paired)       {_bench.show(ratio)}")

    import torch._dynamo as dynamo

    dynamo.reset()
    breaks = {
        "attend (masked)": dynamo.explain(lambda Q, K, V, m: attend(Q, K, V, m, need_weights=False))(
            Q, K, V, m4
        ).graph_break_count,
    }
    mha = MultiHeadAttention(h * d, h)
    X = torch.randn(B, n, h * d, generator=g)
    breaks["MultiHeadAttention.forward"] = dynamo.explain(lambda X, m: mha(X, key_padding_mask=m))(
        X, kpm
    ).graph_break_count
    dynamo.reset()
    print("graph breaks under torch._dynamo.explain: " + ", ".join(f"{k} {v}" for k, v in breaks.items()))

    step = _bench.summary(train_step_seconds(repeats, 3 if quick else 40))
    print(f"trained Transformer, one step of training.train (batch 32), ms: {_bench.show(step, 1e3)}")
    targets = [
        _bench.target(f"masked attend / SDPA at {SMALL}, forward time", ratio["median"], SMALL_TARGET),
        *(_bench.target(f"graph breaks in {k}", float(v), 0.0, unit="") for k, v in breaks.items()),
    ]
    return {"walls": walls, "ratio": ratio, "graph_breaks": breaks, "train_step_s": step}, targets


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    _bench.add_common_arguments(p)
    p.add_argument("--only", choices=("small", "all"), default="all", help="small: the small-size figures only")
    p.add_argument("--src", help="import attnsurvey from this src folder (another checkout) instead of this one")
    p.add_argument(
        "--before",
        help="with --only small: also time the training step of this src folder (another checkout) against this "
        "checkout's, alternating fresh interpreters, --repeats rounds, and print the paired ratio",
    )
    p.add_argument("--train-child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.train_child:  # one fresh interpreter of --before: the package comes from PYTHONPATH
        import torch

        torch.set_num_threads(_bench.bench_threads())
        print(min(train_step_seconds(5, 40)))
        return 0
    if args.src:
        import sys

        sys.path.insert(0, args.src)
    threads = _bench.bench_threads()
    pairs = QUICK_PAIRS if args.quick else PAIRS
    import torch

    torch.set_num_threads(threads)
    import attnsurvey

    print(f"attnsurvey from {attnsurvey.__file__}")
    if args.only == "small":
        info = _bench.begin(5.0 * args.repeats + 20.0, args.estimate)
        if info is None:
            return 0
        small, targets = small_figures(args.repeats, args.quick)
        if args.before:
            small["train_step_before_after"] = train_step_before_after(args.before, args.repeats)
        info = _bench.end(info, targets, args.repeats)
        result = {"settings": _bench.settings(args, threads, 0.0), "machine": info, "small": small, "targets": targets}
        _bench.save(_bench.out_dir(args.out, args.quick) / "core_attention_small.json", result)
        return 0
    est = estimate(pairs, args.repeats)
    info = _bench.begin(est, args.estimate)
    if info is None:
        return 0
    small, small_targets = small_figures(args.repeats, args.quick)
    print()
    fresh = _bench.Fresh(["attnsurvey.attention", "attnsurvey.query_related.multihead"])
    rows, targets, ratios = [], list(small_targets), {}
    print(f"{'case':18s} {'n':>6s}  {'ms: median (min-max)':>26s}  {'peak MiB: median (min-max)':>28s}")
    for a, b, n in pairs:
        mem = {c: [] for c in (a, b)}
        for _ in range(args.repeats):
            for c in (a, b):
                mem[c].append(fresh.run(measure_memory, c, n)["peak_mib"])
        walls = fresh.run(measure_pair, a, b, n, args.repeats)
        summ = {c: {"seconds": _bench.summary(walls[c]), "peak_mib": _bench.summary(mem[c])} for c in (a, b)}
        for c in (a, b):
            rows.append({"case": c, "n": n, **summ[c]})
            print(
                f"{c:18s} {n:6d}  {_bench.show(summ[c]['seconds'], 1e3):>26s}  {_bench.show(summ[c]['peak_mib']):>28s}",
                flush=True,
            )
        what = "forward+backward time" if a == "mha" else "forward time"
        t_ratio = _bench.ratio_of(walls[a], walls[b])
        m_ratio = _bench.median_ratio(summ[a]["peak_mib"], summ[b]["peak_mib"])
        ratios[f"{a}/{b} {what} n={n}"] = t_ratio
        ratios[f"{a}/{b} peak memory n={n}"] = m_ratio
        targets.append(_bench.target(f"{a} / {b}, {what}, n = {n}", t_ratio["median"], TARGET))
        targets.append(_bench.target(f"{a} / {b}, peak memory, n = {n}", m_ratio, TARGET))
    print("\nper-round time ratios (paired): median (min-max)")
    for k, v in ratios.items():
        if isinstance(v, dict):
            print(f"  {k:50s} {_bench.show(v)}")
    info = _bench.end(info, targets, args.repeats)
    result = {
        "settings": {
            "dtype": "float32",
            "memory": "per repeat (a fresh process): peak RSS during one call minus RSS before it, MiB",
            "seconds": "per round: wall time of one call, the two cases of a pair alternating in one process",
            "ratios": "time: summary of the per-round ratios; memory: ratio of the medians",
            **_bench.settings(args, threads, est),
        },
        "machine": info,
        "small": small,
        "rows": rows,
        "ratios": ratios,
        "targets": targets,
    }
    _bench.save(_bench.out_dir(args.out, args.quick) / "core_attention.json", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
