"""Run every benchmark script in this folder (they print figures and target tables; none of them asserts).

    python benchmarks/run_all.py                  # every benchmark, 5 repeats each (chapter times excluded)
    python benchmarks/run_all.py --estimate       # only print each script's estimated time and the sum
    python benchmarks/run_all.py --quick --repeats 2   # tiny sizes: checks that every script runs
    python benchmarks/run_all.py --with-chapters  # also chapter_times.py (executes the book 5 times)

Options other than ``--with-chapters`` (``--repeats``, ``--quick``, ``--estimate``,
``--out``) are passed to every script. Run it on a quiet machine: the figures are
medians, but a loaded machine shifts all of them.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: Extra arguments of a script in quick mode (ring attention starts processes: one launch of two ranks suffices).
QUICK_EXTRA = {"ring_attention.py": ["--ps", "2"]}


def scripts(with_chapters: bool) -> list[Path]:
    """The benchmark scripts, in name order; chapter_times.py only if asked."""
    skip = {"run_all.py"} | (set() if with_chapters else {"chapter_times.py"})
    return sorted(p for p in HERE.glob("[!_]*.py") if p.name not in skip)


def summarise(paths: list[Path], quick: bool, rest: list[str]) -> None:
    """Print every script's target table again, together, from the JSON each one saved."""
    sys.path.insert(0, str(HERE))
    import _bench

    out = _bench.out_dir(rest[rest.index("--out") + 1] if "--out" in rest else None, quick)
    rows = []
    for path in paths:
        saved = out / f"{path.stem}.json"
        if saved.exists():
            rows += [
                {**t, "target": f"{path.stem}: {t['target'].strip()}"}
                for t in json.loads(saved.read_text()).get("targets", [])
            ]
    _bench.print_targets(rows, "== all targets (medians; each script's JSON names its machine and repeats)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--with-chapters", action="store_true")
    p.add_argument("--quick", action="store_true")
    args, rest = p.parse_known_args(argv)
    start, estimated = time.perf_counter(), 0.0
    for script in scripts(args.with_chapters):
        extra = (["--quick", *QUICK_EXTRA.get(script.name, [])] if args.quick else []) + rest
        if args.quick and script.name == "chapter_times.py":
            extra = [a for a in rest if a != "--quick"] + ["--estimate"]
        print(f"== {script.name} {' '.join(extra)}", flush=True)
        if "--estimate" in extra:
            res = subprocess.run([sys.executable, str(script), *extra], check=True, capture_output=True, text=True)
            print(res.stdout, end="", flush=True)
            estimated += sum(float(s) for s in re.findall(r"\((\d+) s\), from a probe", res.stdout))
        else:
            subprocess.run([sys.executable, str(script), *extra], check=True)
    if estimated:
        print(
            f"== estimated total: about {estimated / 60:.1f} min ({estimated:.0f} s) on this machine, at its load now"
        )
    print(f"== all done in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
