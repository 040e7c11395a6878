"""Print how long each chapter takes to execute from a cold kernel, and the whole book.

Budget (BOOK_PLAN / issue #2): every chapter < 60 s on 2 cores. This script
measures and prints; it never fails a build. Notebooks are executed in memory
and NOT rewritten. Usage: ``python benchmarks/chapter_times.py [notebooks...]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from execute_notebooks import execute  # noqa: E402

BUDGET_S = 60.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "chapters").glob("*.ipynb"))
    rows = []
    start = time.perf_counter()
    for path in paths:
        seconds = execute(path, write=False)
        rows.append(
            {"chapter": str(path.relative_to(ROOT) if path.is_absolute() else path), "seconds": round(seconds, 1)}
        )
        flag = "" if seconds < BUDGET_S else "  OVER BUDGET"
        print(f"{seconds:7.1f} s  {rows[-1]['chapter']}{flag}", flush=True)
    total = time.perf_counter() - start
    print(f"{total:7.1f} s  whole book, cold ({len(paths)} chapters, {os.cpu_count()} CPUs)")
    if args.json:
        args.json.write_text(json.dumps({"chapters": rows, "total_seconds": round(total, 1)}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
