"""Print how long each chapter takes to execute from a cold kernel (median of repeats), and the whole book.

Budget (BOOK_PLAN / CONVENTIONS): every chapter < 60 s (hard) on 2 cores under the
pinned kernel, aim <= 25 s. Each of ``--repeats`` rounds (default 5) executes every
notebook once, in memory (notebooks are NOT rewritten), in a fresh kernel; printed:
the median per chapter with min-max, the slowest chapter's median against the budget
(PASS/MISS), and the median whole-book time. This script measures and prints; it
never fails a build.

It executes the whole book ``--repeats`` times (about five times the book's
execution time), so ``run_all.py`` runs it only with ``--with-chapters``.

    python benchmarks/chapter_times.py [notebooks...] [--repeats N] [--json PATH]
    python benchmarks/chapter_times.py --estimate     # from the last saved figures
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import _bench

sys.path.insert(0, str(_bench.ROOT / "scripts"))
BUDGET_S = 60.0
AIM_S = 25.0
OUT = _bench.RESULTS / "chapter_times.json"


def estimate(paths: list[Path], repeats: int) -> float:
    """Seconds a run should take: the last saved median per chapter (or 20 s for a chapter not in it)."""
    last: dict[str, float] = {}
    if OUT.exists():
        for row in json.loads(OUT.read_text()).get("chapters", []):
            s = row["seconds"]
            last[row["chapter"]] = s["median"] if isinstance(s, dict) else s
    return repeats * sum(last.get(_name(p), 20.0) for p in paths)


def _name(path: Path) -> str:
    return str(path.resolve().relative_to(_bench.ROOT)) if path.resolve().is_relative_to(_bench.ROOT) else str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--repeats", type=int, default=_bench.DEFAULT_REPEATS)
    parser.add_argument("--estimate", action="store_true", help="print the estimated run time and exit")
    parser.add_argument("--json", type=Path, default=OUT, help=f"where to save the figures (default {OUT.name})")
    parser.add_argument("--out", help="folder for chapter_times.json (as the other scripts; overrides --json)")
    args = parser.parse_args(argv)
    if args.out:
        args.json = Path(args.out) / "chapter_times.json"
    paths = args.notebooks or sorted((_bench.ROOT / "chapters").glob("*.ipynb"))
    est = estimate(paths, args.repeats)
    _bench.print_estimate(est)
    if args.estimate:
        return 0
    from execute_notebooks import execute

    _bench.bench_threads()
    info = _bench.machine()
    raw: dict[str, list[float]] = {_name(p): [] for p in paths}
    totals = []
    for r in range(args.repeats):
        start = time.perf_counter()
        for path in paths:
            raw[_name(path)].append(execute(path, write=False))
        totals.append(time.perf_counter() - start)
        print(f"round {r + 1}/{args.repeats}: {totals[-1]:.0f} s", flush=True)
    rows = [{"chapter": name, "seconds": _bench.summary(vals)} for name, vals in raw.items()]
    for row in rows:
        s = row["seconds"]
        flag = "  OVER BUDGET" if s["median"] >= BUDGET_S else ("  over the aim" if s["median"] > AIM_S else "")
        print(f"{_bench.show(s, fmt='.1f'):>20s} s  {row['chapter']}{flag}")
    total = _bench.summary(totals)
    print(f"{_bench.show(total, fmt='.0f'):>20s} s  whole book, cold ({len(paths)} chapters)")
    slowest = max(rows, key=lambda r: r["seconds"]["median"])
    targets = [
        _bench.target(
            f"slowest chapter ({Path(slowest['chapter']).stem}), s", slowest["seconds"]["median"], BUDGET_S, unit=""
        ),
        _bench.target(
            "chapters over the 25 s aim (count)", sum(r["seconds"]["median"] > AIM_S for r in rows), 0, unit=""
        ),
    ]
    info = _bench.finish(info)
    _bench.print_targets(targets)
    print(f"\nmachine: {_bench.describe(info)}; {args.repeats} repeats")
    result = {
        "settings": {
            "repeats": args.repeats,
            "seconds": "execution of one notebook in a fresh kernel, kernel start included",
        },
        "machine": info,
        "chapters": rows,
        "total_seconds": total,
        "targets": targets,
    }
    _bench.save(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
