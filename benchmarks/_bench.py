"""Shared helpers of the benchmark scripts: repeats and spread, fresh processes, machine, targets, estimates.

Every script in this folder follows the same protocol:

* each figure is measured ``--repeats`` times (default 5) and reported as the
  **median** with its spread (min-max, and the interquartile range in the JSON);
  the JSON keeps every raw value, the number of repeats and the machine
  (CPU model, cores, torch version, threads, load average at start and end);
* a figure that needs a clean peak-memory reading is measured in a **fresh
  process** per repeat: a child forked from a fork server that has imported
  torch and the package but run nothing (``multiprocessing`` "forkserver"), so
  its heap is as fresh as a new interpreter's and its peak RSS (``VmHWM``,
  reset by the kernel at fork) is its own, without paying for a new
  interpreter and a new ``import torch`` each time;
* the script prints an estimate of its run time before it measures (from a
  short probe on this machine, scaled by the known growth of each case) and
  the elapsed time at the end, then a table of the issues' targets with the
  measured median, the limit and PASS/MISS;
* ``--quick`` runs tiny sizes (a smoke test of the script, not of the targets)
  and writes its JSON to a temporary folder unless ``--out`` says otherwise.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))
RESULTS = ROOT / "benchmarks" / "results"
FIGURES = ROOT / "book" / "figures"
DEFAULT_REPEATS = 5
#: Seconds one child of the fork server costs beyond its own work (fork, unpickling, warm-up); for estimates.
CHILD_OVERHEAD_S = 0.4


def bench_threads() -> int:
    """Threads per process: ``BENCH_THREADS`` (default 1), exported to OpenMP/MKL before torch is imported."""
    threads = os.environ.get("BENCH_THREADS", "1")
    os.environ["OMP_NUM_THREADS"] = threads
    os.environ["MKL_NUM_THREADS"] = threads
    import_torch_seconds()
    return int(threads)


_IMPORT_S: list[float] = []


def import_torch_seconds() -> float:
    """Seconds this process took to import torch (timed on the first call); a fresh interpreter pays it again."""
    if not _IMPORT_S:
        t0 = time.perf_counter()
        import torch  # noqa: F401

        _IMPORT_S.append(time.perf_counter() - t0)
    return _IMPORT_S[0]


def out_dir(out: str | None, quick: bool) -> Path:
    """Where results go: ``--out`` if given; a temporary folder in quick mode (never the committed results)."""
    if out:
        return Path(out)
    if quick:
        return Path(tempfile.gettempdir()) / "attnsurvey-bench-quick"
    return RESULTS


def figure_path(out: Path, name: str) -> Path:
    """The book's figure for a full run into ``benchmarks/results``; next to the JSON otherwise."""
    return (FIGURES if out == RESULTS else out) / name


def save_figure(fig: Any, path: Path, dpi: int = 110) -> Path:
    """Write a matplotlib figure to ``path`` (creating its folder) and close it."""
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


# --- machine -------------------------------------------------------------------------------------


def machine() -> dict:
    """CPU model, cores, torch version and threads, Python, and the load average now (start of the run)."""
    import torch

    model = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_start": list(os.getloadavg()),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "_t0": time.perf_counter(),
    }


def finish(info: dict) -> dict:
    """Add the load average at the end and the elapsed seconds to :func:`machine`'s record."""
    info = dict(info)
    info["load_average_end"] = list(os.getloadavg())
    info["elapsed_s"] = round(time.perf_counter() - info.pop("_t0"), 1)
    return info


def describe(info: dict) -> str:
    """One line naming the machine, for the printed output."""
    start = info["load_average_start"][0]
    end = info.get("load_average_end", [float("nan")])[0]
    return (
        f"{info['cpu']}, {info['cores']} cores, torch {info['torch']}, {info['threads']} thread(s), "
        f"load (1 min) {start:.2f} at start, {end:.2f} at end"
    )


# --- repeats and spread ----------------------------------------------------------------------------


def summary(values: Sequence[float]) -> dict:
    """Median, min, max, quartiles and the raw values of repeated measurements."""
    vals = [float(v) for v in values]
    if not vals:
        raise ValueError("summary of no values")
    q1, _, q3 = statistics.quantiles(vals, n=4, method="inclusive") if len(vals) > 1 else (vals[0],) * 3
    return {
        "median": statistics.median(vals),
        "min": min(vals),
        "max": max(vals),
        "q1": q1,
        "q3": q3,
        "n": len(vals),
        "values": vals,
    }


def show(s: dict, scale: float = 1.0, fmt: str = ".3g") -> str:
    """``median (min-max)`` of a :func:`summary`, each value times ``scale``."""
    return f"{s['median'] * scale:{fmt}} ({s['min'] * scale:{fmt}}-{s['max'] * scale:{fmt}})"


def ratio_of(a: Sequence[float], b: Sequence[float]) -> dict:
    """Summary of the per-repeat ratios a[i] / b[i] (paired repeats, e.g. measured in the same round)."""
    return summary([x / y if y else float("inf") for x, y in zip(a, b, strict=True)])


def median_ratio(a: dict, b: dict) -> float:
    """Ratio of two medians (for repeats that are not paired, e.g. separate processes)."""
    return a["median"] / b["median"] if b["median"] else float("inf")


#: A first call at least this long is its repeat's time: one more call would double the cost for a tiny gain.
LONG_CALL_S = 0.5


def timed_calls(fn: Callable[[], Any], budget_s: float = 0.1, max_calls: int = 9, first: float = 0.0) -> float:
    """Median wall time of one to ``max_calls`` calls of ``fn``, as many as fit in about ``budget_s`` seconds.

    If ``first`` (the time of a call already made) is at least ``LONG_CALL_S``, return it without calling.
    """
    if first >= LONG_CALL_S:
        return first
    times: list[float] = []
    while len(times) < max_calls and (not times or sum(times) < budget_s):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


# --- fresh processes ---------------------------------------------------------------------------------


def memory_bytes(field: str) -> int:
    """``VmRSS`` (now) or ``VmHWM`` (peak since the process started) from ``/proc/self/status``, bytes."""
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith(field + ":"))
    return int(line.split()[1]) * 1024


def measure_call(fn: Callable[[], Any]) -> tuple[float, float]:
    """Peak extra resident memory (MiB) and wall seconds of one call: peak RSS during it minus RSS before it."""
    before = memory_bytes("VmRSS")
    t0 = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - t0
    peak = memory_bytes("VmHWM") - before
    del out
    return max(peak, 0) / 2**20, seconds


def _child(conn: Any, fn: Callable[..., Any], args: tuple) -> None:
    try:
        import torch

        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        conn.send(("ok", fn(*args)))
    except BaseException:  # report anything to the parent, which raises it
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


class Fresh:
    """Run functions in fresh processes forked from a fork server that preloaded ``modules``.

    ``Fresh(["attnsurvey.beyond.tiled"]).run(fn, *args)`` returns ``fn(*args)``
    computed in a new child process (``fn`` must be a module-level function).
    Raises ``RuntimeError`` with the child's traceback if it fails, and
    ``TimeoutError`` if it runs longer than ``timeout`` seconds.
    """

    def __init__(self, modules: Sequence[str] = (), timeout: float = 900.0) -> None:
        self.ctx = mp.get_context("forkserver")
        # symbolic_shapes: torch imports it (and sympy) lazily on the first call of some ops, seconds per child
        self.ctx.set_forkserver_preload(["__main__", "torch", "torch.fx.experimental.symbolic_shapes", *modules])
        self.timeout = timeout

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        recv, send = self.ctx.Pipe(duplex=False)
        proc = self.ctx.Process(target=_child, args=(send, fn, args))
        proc.start()
        send.close()
        try:
            if not recv.poll(self.timeout):
                raise TimeoutError(f"{getattr(fn, '__name__', fn)}{args} did not finish within {self.timeout} s")
            status, value = recv.recv()
        except EOFError:
            status, value = "error", f"the child died (exit code {proc.join(5) or proc.exitcode})"
        finally:
            if proc.is_alive():
                proc.join(5)
            if proc.is_alive():
                proc.terminate()
                proc.join(5)
        if status != "ok":
            raise RuntimeError(f"{getattr(fn, '__name__', fn)}{args} failed in its child process:\n{value}")
        return value

    def rounds(self, fn: Callable[..., Any], points: Sequence[tuple], repeats: int) -> dict[tuple, list]:
        """``fn(*point)`` in a fresh process for every point, ``repeats`` rounds (every point once per round,
        so a change of load hits all points alike); the results per point, in round order."""
        raw: dict[tuple, list] = {pt: [] for pt in points}
        for r in range(repeats):
            for pt in points:
                raw[pt].append(self.run(fn, *pt))
            print(f"round {r + 1}/{repeats} done", flush=True)
        return raw


# --- targets, estimates, output ----------------------------------------------------------------------


def target(name: str, value: float, limit: float, at_most: bool = True, unit: str = "x") -> dict:
    """One target: the measured (median) ``value`` against ``limit``; ``at_most`` = smaller is better."""
    ok = value <= limit if at_most else value >= limit
    return {"target": name, "value": value, "limit": limit, "at_most": at_most, "unit": unit, "pass": bool(ok)}


def print_targets(rows: list[dict], title: str = "targets (median of the repeats)") -> None:
    """Print each target with its measured value, limit and PASS/MISS."""
    print(f"\n{title}")
    if not rows:
        print("  (the issues name no target for these figures; they are reported, not judged)")
        return
    width = max(len(r["target"]) for r in rows)
    for r in rows:
        op = "<=" if r["at_most"] else ">="
        unit = r["unit"]
        value = f"{r['value']:.3g}{unit}"
        limit = f"{op} {r['limit']:.3g}{unit}"
        print(f"  {r['target']:<{width}}  {value:>11}  {limit:>12}  {'PASS' if r['pass'] else 'MISS'}")


def print_estimate(seconds: float, what: str = "this run") -> None:
    """Print the estimated run time (from the probe) before measuring."""
    print(f"estimated time for {what}: about {seconds / 60:.1f} min ({seconds:.0f} s), from a probe on this machine")


def begin(estimated_s: float, only_estimate: bool) -> dict | None:
    """Print the estimate; then None if that was all that was asked, else the machine's record (:func:`machine`)."""
    print_estimate(estimated_s)
    return None if only_estimate else machine()


def end(info: dict, targets: list[dict], repeats: int) -> dict:
    """Close the machine's record (:func:`finish`), print the target table and the machine; return the record."""
    info = finish(info)
    print_targets(targets)
    print(f"\nmachine: {describe(info)}; {repeats} repeats; elapsed {info['elapsed_s']:.0f} s")
    return info


def probe(fn: Callable[[], Any], calls: int = 2) -> float:
    """Fastest wall time of ``calls`` calls after one warm-up call (for estimates only)."""
    fn()
    best = float("inf")
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def settings(args: Any, threads: int, estimated_s: float, over: str = "repeats", threads_key: str = "threads") -> dict:
    """The entries every script's ``settings`` record keeps, after its own.

    The thread count (under ``threads_key``), ``repeats`` and ``quick`` from the command line,
    how ``summaries`` are made (over the ``over``) and ``estimated_seconds``.
    """
    return {
        threads_key: threads,
        "repeats": args.repeats,
        "quick": args.quick,
        "summaries": f"median, min, max, quartiles q1/q3 and the raw values over the {over}",
        "estimated_seconds": round(estimated_s),
    }


def save(path: Path, result: dict) -> None:
    """Write ``result`` as indented JSON (creating the folder)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


def add_common_arguments(parser: Any) -> None:
    """``--repeats``, ``--quick``, ``--estimate`` and ``--out``, the same in every script."""
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS, help="repeats per figure (median reported)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that the script runs, not the targets")
    parser.add_argument("--estimate", action="store_true", help="print the estimated run time and exit")
    parser.add_argument("--out", help="folder for the JSON (default benchmarks/results; a temp folder with --quick)")
