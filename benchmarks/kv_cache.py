"""Tokens per second of greedy generation with and without a KV cache; cache memory of MHA, GQA and MQA.

A :class:`attnsurvey.beyond.decoding.TinyDecoderLM` (untrained: speed does not
depend on the weights; 4 layers, width 256, 8 query heads) generates ``--tokens``
tokens (default 512) after a 16-token prompt, batch 1, float32, without autograd,
on ``BENCH_THREADS`` threads (default 1). Without the cache every step reruns the
model on the whole sequence; with it, each step feeds one token. Measured: generated
tokens per second (wall clock), ``--repeats`` runs per configuration (default 5)
taken in rounds (every configuration once per round, so a change of load hits all
alike); reported: the median with min-max, and every run in the JSON. The cache
memory (bytes the caches allocate for prompt + tokens) is exact, not measured.

Without the cache, sharing K/V heads shrinks only the key/value projections (for
this model, going from MHA to MQA saves 15-22 % of the multiply-adds of a recomputed
step, depending on its length), and that case is slow, so it is measured for MHA
only unless ``--no-cache-kinds MHA GQA MQA``.

Why MHA, GQA and MQA decode at nearly the same speed here: the roofline counts of
:func:`attnsurvey.beyond.decoding.decode_step_cost` (exact, not measured) give, per
generated token at the mean context length of the run, the bytes moved (weights read
plus KV cache read, float32) and the FLOPs. For this small model the weights dominate
the bytes (at 512 tokens MHA's cache is about a fifth of them, MQA's a few percent),
and a machine bound by memory bandwidth would run MQA faster than MHA by the ratio
of their bytes (the script prints it). The speeds measured here are close to each
other instead, and the bytes per second they imply are far below the memory
bandwidth of any current CPU (the model's 8 MiB even fit in a large last-level
cache): a step of this small model is bound by the fixed cost of each call (Python,
dispatch, many small kernels), which is the same for the three variants. The script
prints the counts, the ratio a bandwidth-bound machine would show and the measured one.

    python benchmarks/kv_cache.py                   # 512 tokens, 5 repeats
    python benchmarks/kv_cache.py --estimate        # only print how long that would take
    python benchmarks/kv_cache.py --quick --repeats 2

Writes ``benchmarks/results/kv_cache.json`` (with the machine) and the figure
``book/figures/kv_cache_tokens_per_second.png`` that chapter 6.1 shows.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import _bench

MODEL = {"vocab": 64, "d_model": 256, "n_heads": 8, "d_ff": 512, "n_layers": 4}
KV_HEADS = {"MHA": 8, "GQA": 2, "MQA": 1}
PROMPT = 16
TOKENS = 512


def _model(kind: str, tokens: int):
    import torch

    from attnsurvey.beyond.decoding import TinyDecoderLM

    torch.manual_seed(0)
    return TinyDecoderLM(**MODEL, n_kv_heads=KV_HEADS[kind], max_len=PROMPT + tokens).eval()


def _prompt():
    import torch

    return torch.randint(0, MODEL["vocab"], (1, PROMPT), generator=torch.Generator().manual_seed(1))


def run_once(lm, use_cache: bool, tokens: int) -> float:
    """Generated tokens per second of one greedy generation of ``tokens`` tokens."""
    import torch

    from attnsurvey.beyond.decoding import generate

    prompt = _prompt()
    with torch.no_grad():
        start = time.perf_counter()
        generate(lm, prompt, tokens, use_cache)
        return tokens / (time.perf_counter() - start)


def estimate(configs: list[tuple[str, bool]], tokens: int, repeats: int) -> float:
    """Seconds the run should take, from 32 generated tokens of each case here.

    A step costs about ``a + b * length``: the cached run gives ``a`` (one token per
    step), the recomputing run then gives ``b``; a run of ``tokens`` costs
    ``tokens * a`` with the cache and ``tokens * a + b * (sum of the lengths)`` without.
    """
    n0 = 32
    lm = _model("MHA", n0)
    secs0 = {c: min(n0 / run_once(lm, c, n0) for _ in range(2)) for c in (False, True)}

    def length_sum(n: int) -> int:
        return n * PROMPT + n * (n - 1) // 2

    a = secs0[True] / n0
    b = max(secs0[False] - n0 * a, 0.0) / length_sum(n0)
    secs = {True: tokens * a, False: tokens * a + b * length_sum(tokens)}
    return sum(secs[c] for _, c in configs) * (repeats + 0.1)


def explain(runs: dict[tuple[str, bool], list[float]], tokens: int) -> dict[str, dict]:
    """Roofline counts per generated token with the cache, and the rates the measured medians imply.

    The new token at step ``s`` (1-based) attends to ``PROMPT + s`` keys; the counts
    are taken at the mean of that over the run (they are linear in it).
    """
    import statistics

    from attnsurvey.beyond.decoding import decode_step_cost

    contexts = [PROMPT + s for s in range(1, tokens + 1)]
    mean_context = statistics.fmean(contexts)
    out: dict[str, dict] = {}
    for kind, g in KV_HEADS.items():
        costs = [
            decode_step_cost(
                MODEL["d_model"],
                MODEL["n_heads"],
                g,
                MODEL["d_ff"],
                MODEL["n_layers"],
                n,
                MODEL["vocab"],
                bytes_per_value=4,
            )
            for n in contexts
        ]
        flops = statistics.fmean(c.flops for c in costs)
        weight_bytes = costs[0].weight_bytes
        kv_bytes = statistics.fmean(c.kv_bytes for c in costs)
        speed = statistics.median(runs[(kind, True)]) if (kind, True) in runs else float("nan")
        out[kind] = {
            "mean_context": mean_context,
            "flops": flops,
            "weight_bytes": weight_bytes,
            "kv_bytes": kv_bytes,
            "kv_share": kv_bytes / (weight_bytes + kv_bytes),
            "intensity": flops / (weight_bytes + kv_bytes),
            "implied_bytes_per_s": speed * (weight_bytes + kv_bytes),
            "implied_flops_per_s": speed * flops,
            "median_tokens_per_s": speed,
        }
    mha = out["MHA"]
    for r in out.values():
        r["bandwidth_bound_speedup"] = (mha["weight_bytes"] + mha["kv_bytes"]) / (r["weight_bytes"] + r["kv_bytes"])
        r["measured_speedup"] = r["median_tokens_per_s"] / mha["median_tokens_per_s"]
    return out


def plot(rows: list[dict], tokens: int, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.4), constrained_layout=True)
    kinds = list(KV_HEADS)
    width = 0.38
    for j, cache in enumerate((False, True)):
        xs, med, lo, hi = [], [], [], []
        for i, k in enumerate(kinds):
            row = next((r for r in rows if r["kind"] == k and r["cache"] == cache), None)
            if row:
                s = row["tokens_per_second"]
                xs.append(i + (j - 0.5) * width)
                med.append(s["median"])
                lo.append(s["median"] - s["min"])
                hi.append(s["max"] - s["median"])
        ax.bar(xs, med, width, yerr=[lo, hi], capsize=3, label="with KV cache" if cache else "no cache (recompute)")
    ax.set_xticks(range(len(kinds)), [f"{k}\n({KV_HEADS[k]} K/V heads)" for k in kinds])
    ax.set_yscale("log")
    ax.set_ylabel("generated tokens / s (median, min-max)")
    ax.set_title(f"Greedy generation of {tokens} tokens, batch 1\n{title}", fontsize=8)
    ax.legend(fontsize=8)
    _bench.save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    _bench.add_common_arguments(parser)
    parser.add_argument("--tokens", type=int, default=TOKENS)
    parser.add_argument("--no-cache-kinds", nargs="+", default=["MHA"], choices=list(KV_HEADS))
    args = parser.parse_args(argv)
    threads = _bench.bench_threads()
    tokens = 32 if args.quick else args.tokens
    import torch

    torch.set_num_threads(threads)
    configs = [(k, False) for k in KV_HEADS if k in args.no_cache_kinds] + [(k, True) for k in KV_HEADS]
    est = estimate(configs, tokens, args.repeats)
    info = _bench.begin(est, args.estimate)
    if info is None:
        return 0
    models = {k: _model(k, tokens) for k in KV_HEADS}
    for kind, cache in configs:
        run_once(models[kind], cache, 8)  # warm-up
    runs: dict[tuple[str, bool], list[float]] = {c: [] for c in configs}
    for r in range(args.repeats):
        for kind, cache in configs:
            runs[(kind, cache)].append(run_once(models[kind], cache, tokens))
        print(f"round {r + 1}/{args.repeats} done", flush=True)
    d_head = MODEL["d_model"] // MODEL["n_heads"]
    roofline = explain(runs, tokens)
    rows = []
    print(f"\n{'kind':4s} {'cache':>5s}  {'tokens/s: median (min-max)':>28s}  {'cache MiB':>9s}  {'parameters':>10s}")
    for kind, cache in configs:
        lm = models[kind]
        cache_bytes = sum(c.nbytes for c in lm.new_caches(1, PROMPT + tokens)) if cache else 0
        row = {
            "kind": kind,
            "kv_heads": KV_HEADS[kind],
            "cache": cache,
            "tokens_per_second": _bench.summary(runs[(kind, cache)]),
            "cache_bytes": cache_bytes,
            "cache_bytes_analytic": 2 * MODEL["n_layers"] * (PROMPT + tokens) * KV_HEADS[kind] * d_head * 4
            if cache
            else 0,
            "parameters": sum(p.numel() for p in lm.parameters()),
        }
        rows.append(row)
        print(
            f"{kind:4s} {'yes' if cache else 'no':>5s}  {_bench.show(row['tokens_per_second'], fmt='.4g'):>28s}  "
            f"{cache_bytes / 2**20:9.3f}  {row['parameters']:10d}"
        )
    print(
        f"\nper generated token at the mean context of {roofline['MHA']['mean_context']:.1f} keys "
        "(float32; exact counts, attnsurvey.beyond.decoding.decode_step_cost):"
    )
    print(
        f"{'kind':4s} {'weights MiB':>11s} {'KV MiB':>7s} {'KV share':>8s} {'MFLOP':>6s} {'FLOP/B':>6s}"
        f"  {'implied GB/s':>12s} {'implied GFLOP/s':>15s}"
    )
    for kind, r in roofline.items():
        print(
            f"{kind:4s} {r['weight_bytes'] / 2**20:11.3f} {r['kv_bytes'] / 2**20:7.3f} {r['kv_share']:8.3f} "
            f"{r['flops'] / 1e6:6.2f} {r['intensity']:6.3f}  {r['implied_bytes_per_s'] / 1e9:12.3g} "
            f"{r['implied_flops_per_s'] / 1e9:15.3g}"
        )
    for k in ("GQA", "MQA"):
        print(
            f"{k} / MHA tokens/s: {roofline[k]['bandwidth_bound_speedup']:.3f} if bound by bytes moved, "
            f"{roofline[k]['measured_speedup']:.3f} measured (medians)"
        )
    speedups = {k: _bench.ratio_of(runs[(k, True)], runs[(k, False)]) for k in args.no_cache_kinds}
    for k, s in speedups.items():
        print(f"{k}: the cache is {_bench.show(s)} times faster (per-round ratios)")
    by_kind = {r["kind"]: r for r in rows if r["cache"]}
    targets = [
        _bench.target(f"{k} tokens/s with cache / without", s["median"], 1.0, at_most=False)
        for k, s in speedups.items()
    ]
    for k in ("GQA", "MQA"):
        targets.append(
            _bench.target(
                f"cache bytes {k} / MHA (= K/V heads / query heads = {KV_HEADS[k]}/8)",
                by_kind[k]["cache_bytes"] / by_kind["MHA"]["cache_bytes"],
                KV_HEADS[k] / MODEL["n_heads"],
            )
        )
    targets.append(
        _bench.target(
            "cache bytes / analytic 2 L n g d_h * 4 (all kinds)",
            max(r["cache_bytes"] / r["cache_bytes_analytic"] for r in by_kind.values()),
            1.0,
        )
    )
    info = _bench.end(info, targets, args.repeats)
    result = {
        "settings": {
            **MODEL,
            "kv_heads": KV_HEADS,
            "prompt": PROMPT,
            "tokens": tokens,
            "batch": 1,
            "dtype": "float32",
            "tokens_per_second": "generated tokens / wall seconds of one generation (no autograd); one value per repeat",
            "cache_bytes": "bytes of the per-layer K and V caches for prompt + tokens (exact, not measured)",
            **_bench.settings(args, threads, est),
        },
        "machine": info,
        "rows": rows,
        "speedup_with_cache": speedups,
        "roofline": roofline,
        "targets": targets,
    }
    out = _bench.out_dir(args.out, args.quick)
    _bench.save(out / "kv_cache.json", result)
    fig = _bench.figure_path(out, "kv_cache_tokens_per_second.png")
    plot(rows, tokens, fig, f"{args.repeats} runs each; {info['cpu']}, {threads} thread(s), torch {info['torch']}")
    print(f"wrote {fig}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
