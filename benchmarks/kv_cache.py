"""Tokens per second of greedy generation with and without a KV cache, for MHA, GQA and MQA.

A :class:`attnsurvey.beyond.decoding.TinyDecoderLM` (untrained: speed does not
depend on the weights) generates ``--tokens`` tokens (default 512) after a
16-token prompt, batch 1, float32, on ``BENCH_THREADS`` threads (default 1).
Without the cache every step reruns the model on the whole sequence; with it,
each step feeds one token. Reported: the median over ``--repeats`` runs of
generated tokens per second (wall clock), and the allocated cache bytes.

    python benchmarks/kv_cache.py                 # 512 tokens, 3 repeats
    python benchmarks/kv_cache.py --tokens 128    # quicker

Writes ``benchmarks/results/kv_cache.json`` (with a machine description) and
the figure ``book/figures/kv_cache_tokens_per_second.png`` that chapter 6.1
shows. Nothing here asserts: the figures are measurements, not tests.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

threads = os.environ.get("BENCH_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", threads)
os.environ.setdefault("MKL_NUM_THREADS", threads)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
OUT = ROOT / "benchmarks" / "results" / "kv_cache.json"
FIG = ROOT / "book" / "figures" / "kv_cache_tokens_per_second.png"
MODEL = {"vocab": 64, "d_model": 256, "n_heads": 8, "d_ff": 512, "n_layers": 4}
KV_HEADS = {"MHA": 8, "GQA": 2, "MQA": 1}
PROMPT = 16


def measure(kind: str, use_cache: bool, tokens: int, repeats: int) -> dict:
    import torch

    from attnsurvey.beyond.decoding import TinyDecoderLM, generate

    torch.manual_seed(0)
    lm = TinyDecoderLM(**MODEL, n_kv_heads=KV_HEADS[kind], max_len=PROMPT + tokens).eval()
    prompt = torch.randint(0, MODEL["vocab"], (1, PROMPT), generator=torch.Generator().manual_seed(1))
    generate(lm, prompt, 8, use_cache)  # warm-up
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        generate(lm, prompt, tokens, use_cache)
        rates.append(tokens / (time.perf_counter() - start))
    cache_bytes = sum(c.nbytes for c in lm.new_caches(1, PROMPT + tokens)) if use_cache else 0
    return {
        "kind": kind,
        "cache": use_cache,
        "tokens_per_second": statistics.median(rates),
        "runs": rates,
        "cache_bytes": cache_bytes,
    }


def plot(rows: list[dict], tokens: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2), constrained_layout=True)
    kinds = list(KV_HEADS)
    width = 0.38
    for j, cache in enumerate((False, True)):
        vals = [next(r["tokens_per_second"] for r in rows if r["kind"] == k and r["cache"] == cache) for k in kinds]
        ax.bar(
            [i + (j - 0.5) * width for i in range(len(kinds))],
            vals,
            width,
            label="with KV cache" if cache else "no cache (recompute)",
        )
    ax.set_xticks(range(len(kinds)), [f"{k}\n({KV_HEADS[k]} K/V heads)" for k in kinds])
    ax.set_ylabel("generated tokens / s")
    ax.set_title(f"Greedy generation of {tokens} tokens, 1 CPU thread (median of runs)", fontsize=9)
    ax.legend(fontsize=8)
    FIG.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIG, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(int(threads))
    rows = []
    for kind in KV_HEADS:
        for cache in (False, True):
            row = measure(kind, cache, args.tokens, args.repeats)
            rows.append(row)
            print(
                f"{kind}  cache={'yes' if cache else 'no ':3s}  {row['tokens_per_second']:8.1f} tokens/s  "
                f"cache {row['cache_bytes'] / 2**20:6.2f} MiB",
                flush=True,
            )
    for kind in KV_HEADS:
        no, yes = (
            next(r["tokens_per_second"] for r in rows if r["kind"] == kind and r["cache"] == c) for c in (False, True)
        )
        print(f"{kind}: the cache is {yes / no:.1f}x faster")
    result = {
        "settings": {
            **MODEL,
            "kv_heads": KV_HEADS,
            "prompt": PROMPT,
            "tokens": args.tokens,
            "repeats": args.repeats,
            "batch": 1,
            "dtype": "float32",
            "threads": int(threads),
            "torch": torch.__version__,
            "machine": platform.machine(),
            "processor": platform.processor(),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "load_average_1min": os.getloadavg()[0],
            "tokens_per_second": "generated tokens / wall seconds, median of the repeats",
        },
        "rows": rows,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    plot(rows, args.tokens)
    print(f"wrote {OUT.relative_to(ROOT)} and {FIG.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
