"""Smoke test of the benchmark scripts: each runs in its quick mode and saves its JSON.

Quick mode uses tiny sizes and two repeats, so this checks that the scripts run,
report medians over repeats with their raw values, describe the machine and print
a target table; it never judges a measured figure (those are machine-dependent and
belong to the full run, ``python benchmarks/run_all.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
SCRIPTS = {
    "tiled_attention": [],
    "kv_cache": [],
    "ring_attention": ["--ps", "2"],  # one launch of two ranks: starting processes is the slow part
    "core_attention": [],
    "attention_cost": [],
    "score_cost": [],
    "pin_cost": [],
    "linear_attention": [],
}


def _run(script: str, *args: str) -> str:
    res = subprocess.run(
        [sys.executable, str(BENCH / f"{script}.py"), *args], capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, f"{script} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout


def _raw_value_lists(obj: object) -> list[list]:
    """Every ``values`` list of a summary anywhere in the JSON."""
    if isinstance(obj, dict):
        found = [obj["values"]] if "median" in obj and isinstance(obj.get("values"), list) else []
        return found + [v for x in obj.values() for v in _raw_value_lists(x)]
    if isinstance(obj, list):
        return [v for x in obj for v in _raw_value_lists(x)]
    return []


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_quick_mode_runs_and_saves_medians_of_repeats(script: str, tmp_path: Path) -> None:
    out = _run(script, "--quick", "--repeats", "2", "--out", str(tmp_path), *SCRIPTS[script])
    assert "estimated time" in out and "targets (median of the repeats)" in out
    saved = json.loads((tmp_path / f"{script}.json").read_text())
    assert saved["settings"]["repeats"] == 2 and saved["settings"]["quick"] is True
    machine = saved["machine"]
    for key in ("cpu", "cores", "torch", "threads", "load_average_start", "load_average_end"):
        assert key in machine, key
    raw = _raw_value_lists(saved)
    assert raw and all(len(v) == 2 for v in raw), "every summary keeps one raw value per repeat"
    for row in saved.get("targets", []):
        assert ("PASS" if row["pass"] else "MISS") in out


def test_estimates_only_measure_nothing(tmp_path: Path) -> None:
    out = _run("chapter_times", "--estimate", "--json", str(tmp_path / "ct.json"))
    assert "estimated time" in out and not (tmp_path / "ct.json").exists()


def test_summary_reports_median_spread_and_raw_values() -> None:
    sys.path.insert(0, str(BENCH))
    import _bench

    s = _bench.summary([3.0, 1.0, 2.0, 10.0, 4.0])
    assert (s["median"], s["min"], s["max"], s["n"]) == (3.0, 1.0, 10.0, 5)
    assert s["q1"] == 2.0 and s["q3"] == 4.0 and s["values"] == [3.0, 1.0, 2.0, 10.0, 4.0]
    assert _bench.show(s) == "3 (1-10)"
    assert _bench.ratio_of([2.0, 6.0], [1.0, 2.0])["median"] == 2.5
    assert _bench.target("t", 1.3, 1.2)["pass"] is False and _bench.target("t", 1.1, 1.2)["pass"] is True
    assert _bench.target("t", 0.5, 1.0, at_most=False)["pass"] is False
