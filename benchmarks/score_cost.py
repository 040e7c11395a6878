"""Cost of every score function of §3.2.1, relative to the multiplicative score.

Scores ``Q`` ``(batch, n_q, d)`` against ``K`` ``(batch, n_f, d)`` with each
score function (forward and backward), on the same shapes and weights. Each of
``--repeats`` rounds (default 5) times every score once (the median of as many
calls as fit in 0.1 s, after two warm-up calls), so a change of load hits all
alike; printed: the median over the rounds with min-max, the median of the
per-round ratios to ``q^T k_l``, and the size of the largest intermediate tensor
(exact). Timings depend on the machine; this is a benchmark, not a test. The
issues name no target for these figures.

    python benchmarks/score_cost.py                      # default shapes, 5 rounds
    python benchmarks/score_cost.py --n 256 --d 64 --batch 8 --repeats 9
    python benchmarks/score_cost.py --quick --repeats 2

Results: ``benchmarks/results/score_cost.json`` with the machine and raw values.
"""

from __future__ import annotations

import argparse

import _bench


def _step(name: str, Q, K, d_w: int):
    """One forward + backward pass of the score ``name`` on fresh leaf copies of Q and K."""
    import torch

    from attnsurvey.general_mechanisms.scoring import make_score

    torch.manual_seed(0)
    module = make_score(name, Q.shape[-1], K.shape[-1], d_w)
    Qg, Kg = Q.clone().requires_grad_(), K.clone().requires_grad_()

    def step() -> None:
        module(Qg, Kg).sum().backward()
        Qg.grad = Kg.grad = None
        module.zero_grad()

    return step


def intermediate_elements(name: str, batch: int, n_q: int, n_f: int, d: int, d_w: int) -> int:
    """Size of the largest intermediate tensor the matrix form builds."""
    if name in {"additive", "concat"}:
        width = d_w if name == "additive" else max(d_w, 2 * d)  # concat also builds [q; k] per pair
        return batch * n_q * n_f * width
    if name == "euclidean":
        return batch * n_q * n_f * d  # q - k for every pair
    return batch * n_q * n_f  # the score matrix itself


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    _bench.add_common_arguments(parser)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--n", type=int, default=128, help="n_q = n_f")
    parser.add_argument("--d", type=int, default=64, help="d_q = d_k")
    parser.add_argument("--d-w", type=int, default=64)
    args = parser.parse_args(argv)
    threads = _bench.bench_threads()
    n = 32 if args.quick else args.n
    import torch

    from attnsurvey.general_mechanisms.scoring import SCORE_NAMES

    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    Q = torch.randn(args.batch, n, args.d, generator=g)
    K = torch.randn(args.batch, n, args.d, generator=g)
    steps = {name: _step(name, Q, K, args.d_w) for name in SCORE_NAMES}
    probe = {name: _bench.probe(fn) for name, fn in steps.items()}  # also the two warm-up calls
    est = args.repeats * sum(max(t, 0.1) for t in probe.values())
    info = _bench.begin(est, args.estimate)
    if info is None:
        return 0
    raw: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.repeats):
        for name, fn in steps.items():
            raw[name].append(_bench.timed_calls(fn))
    print(
        f"shapes: Q, K = ({args.batch}, {n}, {args.d}); d_w = {args.d_w}; forward + backward; "
        f"{args.repeats} rounds; {threads} thread(s)"
    )
    base_mem = intermediate_elements("multiplicative", args.batch, n, n, args.d, args.d_w)
    rows = []
    print(
        f"{'score':24s} {'ms: median (min-max)':>24s} {'x mult.: median (min-max)':>28s} {'largest intermediate':>21s}"
    )
    for name, times in raw.items():
        mem = intermediate_elements(name, args.batch, n, n, args.d, args.d_w)
        row = {
            "score": name,
            "seconds": _bench.summary(times),
            "ratio_to_multiplicative": _bench.ratio_of(times, raw["multiplicative"]),
            "largest_intermediate_ratio": mem / base_mem,
        }
        rows.append(row)
        print(
            f"{name:24s} {_bench.show(row['seconds'], 1e3):>24s} {_bench.show(row['ratio_to_multiplicative']):>28s} "
            f"{mem / base_mem:20.0f}x"
        )
    info = _bench.end(info, [], args.repeats)
    result = {
        "settings": {
            "batch": args.batch,
            "n": n,
            "d": args.d,
            "d_w": args.d_w,
            "seconds": "per round: median wall time of forward + backward calls (as many as fit in 0.1 s, >= 1)",
            **_bench.settings(args, threads, est, over="rounds"),
        },
        "machine": info,
        "scores": rows,
    }
    _bench.save(_bench.out_dir(args.out, args.quick) / "score_cost.json", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
