"""No stored check output states an exercise's answer.

A check cell (``metadata.nbgrader.grade``) may say whether the answer is right
and, when it is not, give a hint; it must never print the answer itself. This
test reads the stored outputs of every chapter's check cells and fails if one
of them contains

* a known leak pattern (an equation with a number, a paired difference or its
  interval, a size in GiB, a ratio, ...), or
* a number that is one of the solution's values, in any of the usual roundings.

The solution's values are collected without running the chapter: every number
that the chapter's solution cells print (their stored outputs), the scalar
values of short solution blocks that compute an answer from constants (executed
here in a small namespace), and the reference values the exercise modules
compute themselves (KV-cache size, score counts, tiles, ...).

The stored outputs are those of the last ``make execute``. To scan executed
copies elsewhere (e.g. before they are committed), set ``ANSWERS_SCAN_DIR`` to
the folder that holds them.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCAN_DIR = Path(os.environ.get("ANSWERS_SCAN_DIR", ROOT / "chapters"))
CHAPTERS = sorted(SCAN_DIR.glob("*.ipynb"))

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
#: what a check output must never contain, whatever the numbers
LEAK_PATTERNS = [
    (re.compile(r"=\s*[-+]?\d"), "an equation with a number"),
    (re.compile(r"\d\s*(?:GiB|MiB|KiB|bytes)\b"), "a size"),
    (re.compile(r"\(paired, n=|\binterval \[|, resolved\)|not resolved\)"), "a paired difference"),
    (re.compile(r"\bratio\b|\btimes the work\b|\d+\s*%"), "a ratio or a share"),
    (re.compile(r"\bvs\.?\s*[-+]?\d"), "two measured numbers"),
    (re.compile(r"Var\(|sigma\^|sqrt\(d_k\)|d_w \(|\(1 - 1/n\)|sum_s o|a_l \(L_l"), "a formula the exercise asks for"),
    (re.compile(r"\bexp\(m_old|1/n_f"), "a formula the exercise asks for"),
]
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:e[-+]?\d+)?(?![\w.])")


def _text(output) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    if output.get("output_type") == "error":
        return f"{output.get('ename', '')}: {output.get('evalue', '')}"
    return str(output.get("data", {}).get("text/plain", ""))


def _outputs(cell) -> str:
    return "\n".join(_text(o) for o in cell.get("outputs", []))


def _numbers(text: str) -> list[tuple[float, int]]:
    """The numbers in ``text``, each with its number of decimals (``1,234`` and ``1e-5`` read as numbers)."""
    found = []
    for m in _NUMBER.finditer(text):
        token = m.group(0)
        mantissa = token.split("e")[0]
        decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
        found.append((float(token.replace(",", "")), decimals))
    return found


def _scalars(value) -> list[float]:
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _scalars(v)]
    return []


def _solution_blocks(cell) -> list[str]:
    blocks, inside, lines = [], False, []
    for line in cell.source.split("\n"):
        if line.strip() == BEGIN:
            inside, lines = True, []
        elif line.strip() == END:
            inside = False
            blocks.append("\n".join(lines))
        elif inside:
            lines.append(line)
    return blocks


def _namespace() -> dict:
    import torch

    from attnsurvey import builder as B
    from attnsurvey import taxonomy as tx
    from attnsurvey.masking import causal_mask

    return {"math": math, "torch": torch, "tx": tx, "B": B, "causal_mask": causal_mask}


def _block_values(block: str) -> tuple[list[float], list[str]]:
    """Scalar values (numbers, and strings of a list of strings) of a short, constant solution block; else nothing."""
    code = [line for line in block.split("\n") if line.strip() and not line.strip().startswith("#")]
    if not code or len(code) > 3 or any(line.lstrip().startswith(("def ", "class ", "return")) for line in code):
        return [], []
    ns = _namespace()
    before = set(ns)
    try:
        exec(compile("\n".join(line.strip() for line in code), "<solution>", "exec"), ns)
    except Exception:
        return [], []
    numbers, strings = [], []
    for name in set(ns) - before - {"__builtins__"}:
        numbers += _scalars(ns[name])
        if isinstance(ns[name], list) and all(isinstance(s, str) for s in ns[name]):
            strings += ns[name]
    return numbers, strings


def _reference_values() -> list[float]:
    """Answers the exercise modules compute themselves."""
    from attnsurvey.exercises import (
        beyond_decoding,
        beyond_latent,
        beyond_positions,
        beyond_ring,
        beyond_tiled,
        beyond_trained,
    )

    window_count, fraction = beyond_decoding.window_score_counts(
        beyond_decoding.EX3["T"], beyond_decoding.EX3["window"]
    )
    return [
        beyond_decoding.window_cache_gib(),
        beyond_decoding.window_cache_gib() * 2**30,
        float(window_count),
        fraction,
        float(beyond_tiled.causal_tiles(4096, 256, 1024)),
        beyond_tiled.causal_tiles(4096, 256, 1024) / 64,
        *map(float, beyond_ring.causal_pairs(4, 1024, "zigzag")),
        beyond_trained.uniform_mirrored_weight(),
        *beyond_positions.half_distances(4),
        beyond_latent.stack_fraction(),
    ]


def solution_values(nb) -> tuple[list[float], list[str]]:
    """Numbers (other than 0 and 1) and strings that are, or are printed by, the chapter's solutions."""
    numbers, strings = [], []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("solution"):
            continue
        numbers += [v for v, _ in _numbers(_outputs(cell))]
        for block in _solution_blocks(cell):
            n, s = _block_values(block)
            numbers += n
            strings += s
    numbers += _reference_values()
    return [v for v in numbers if math.isfinite(v) and v not in (0.0, 1.0)], strings


def leaks(text: str, numbers: list[float], strings: list[str]) -> list[str]:
    """What in the check output ``text`` gives an answer away: leak patterns, solution values, solution strings."""
    found = [f"{why}: {m.group(0)!r}" for pattern, why in LEAK_PATTERNS for m in [pattern.search(text)] if m]
    for token, decimals in _numbers(text):
        for v in numbers:
            exact = math.isclose(token, v, rel_tol=1e-9)
            rounded = decimals > 0 and abs(token - v) <= 0.5 * 10.0**-decimals + 1e-12
            if exact or rounded:
                found.append(f"the solution's value {v!r} as {token!r}")
                break
    found += [f"the solution's {s!r}" for s in strings if s in text]
    return found


def _check_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")]


@pytest.mark.skipif(not CHAPTERS, reason=f"no notebooks in {SCAN_DIR}")
@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_no_check_output_states_an_answer(path):
    nb = nbformat.read(path, as_version=4)
    numbers, strings = solution_values(nb)
    bad = {}
    for cell in _check_cells(nb):
        text = _outputs(cell)
        found = leaks(text, numbers, strings)
        if found:
            bad[cell.metadata["nbgrader"]["grade_id"]] = (text.strip()[:120], found[:3])
    assert not bad, f"check outputs that give an answer away: {bad}"


def test_every_chapter_has_at_least_three_check_cells_with_hidden_tests():
    for path in sorted((ROOT / "chapters").glob("*.ipynb")):
        cells = _check_cells(nbformat.read(path, as_version=4))
        assert len(cells) >= 3, path.name
        for cell in cells:
            src = cell.source
            assert "### BEGIN HIDDEN TESTS" in src and "### END HIDDEN TESTS" in src, (path.name, src[:80])
            assert src.index("### BEGIN HIDDEN TESTS") < src.index("### END HIDDEN TESTS")


@pytest.mark.parametrize(
    "text",
    [
        "correct: 1.25 GiB",
        "correct: AC = 0.5625",
        "correct: BP = 0.7165",
        "correct: 390648825 points",
        "correct: Var(q.k) = d_k sigma^4, divide by sigma^2 sqrt(d_k)",
        "correct: D=4 - D=2 = +0.25 (paired, n=5; 95% interval [+0.06, +0.44], resolved)",
        "causal tiles check passed: 40 of 64 tiles (62%)",
        "correct: 131,328 vs 44,870,400 scores, a ratio of 342",
        "correct: 0.1176",
        "correct: [0.25, 0.0625, 0.015625, 0.00390625]",
    ],
)
def test_the_scan_catches_the_old_leaks(text):
    numbers = [1.25, 0.5625, 0.7165313105737893, 390648825.0, 40.0, 131328.0, 44870400.0, 0.11764705882352941, 0.25]
    assert leaks(text, numbers, [])


@pytest.mark.parametrize(
    "text",
    [
        "correct",
        "correct: both counts are right",
        "correct: the verdict follows from your paired difference",
        "correct: max |ours - torch| < 1e-5 with a causal mask",
        "correct: the shifted window always holds min(2D + 1, n_f) positions",
        "rescale check passed",
    ],
)
def test_the_scan_passes_plain_verdicts(text):
    assert not leaks(text, [1.25, 0.5625, 390648825.0, 40.0, 2.0], [])


def test_the_scan_finds_a_printed_solution_value_in_a_check_output():
    # 0.873 printed by a solution cell, then echoed (rounded) by the check
    assert leaks("correct: diagonal 0.87", [0.873], [])
    assert leaks("correct: rows ['table3:row07']", [], ["table3:row07"])
    assert not leaks("correct: the copy task is aligned", [0.873], [])
