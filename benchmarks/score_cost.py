"""Cost of every score function of §3.2.1, relative to the multiplicative score.

Scores ``Q`` ``(batch, n_q, d)`` against ``K`` ``(batch, n_f, d)`` with each
score function (forward and backward), on the same shapes and weights, and
prints the median time and peak extra memory estimate relative to
``q^T k_l``. Timings depend on the machine; this is a benchmark, not a test.

    python benchmarks/score_cost.py                      # default shapes
    python benchmarks/score_cost.py --n 256 --d 64 --batch 8 --repeats 20
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from attnsurvey.general_mechanisms.scoring import SCORE_NAMES, make_score


def time_score(name: str, Q: torch.Tensor, K: torch.Tensor, d_w: int, repeats: int) -> float:
    """Median seconds of one forward + backward pass of the score ``name``."""
    torch.manual_seed(0)
    module = make_score(name, Q.shape[-1], K.shape[-1], d_w)
    Qg, Kg = Q.clone().requires_grad_(), K.clone().requires_grad_()
    times = []
    for i in range(repeats + 2):
        start = time.perf_counter()
        e = module(Qg, Kg)
        e.sum().backward()
        if i >= 2:  # two warm-up runs
            times.append(time.perf_counter() - start)
        Qg.grad = Kg.grad = None
        module.zero_grad()
    return statistics.median(times)


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
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--n", type=int, default=128, help="n_q = n_f")
    parser.add_argument("--d", type=int, default=64, help="d_q = d_k")
    parser.add_argument("--d-w", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    Q = torch.randn(args.batch, args.n, args.d, generator=g)
    K = torch.randn(args.batch, args.n, args.d, generator=g)
    print(
        f"shapes: Q, K = ({args.batch}, {args.n}, {args.d}); d_w = {args.d_w}; "
        f"forward + backward, median of {args.repeats}; {args.threads} thread(s)"
    )
    times = {name: time_score(name, Q, K, args.d_w, args.repeats) for name in SCORE_NAMES}
    base = times["multiplicative"]
    base_mem = intermediate_elements("multiplicative", args.batch, args.n, args.n, args.d, args.d_w)
    print(f"{'score':24s} {'ms':>8s} {'x mult.':>8s} {'largest intermediate':>22s}")
    for name, t in times.items():
        mem = intermediate_elements(name, args.batch, args.n, args.n, args.d, args.d_w)
        print(f"{name:24s} {t * 1e3:8.2f} {t / base:8.2f} {mem / base_mem:20.0f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
