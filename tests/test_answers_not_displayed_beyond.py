"""No visible output of chapters 6 to 6.5 states an exercise's answer.

``test_answers_kept_back`` reads the outputs of the check cells; this test reads the output of every other
code cell of these chapters too (Explore widgets, tables, printed references), except the solution cells
themselves, and fails if one of them prints an answer: an integer answer exactly, a real one at any
rounding to two or more significant digits. The answers come from the exercise modules, which compute
them independently of the notebooks.
"""

from __future__ import annotations

import math
from pathlib import Path

import nbformat
import pytest

from attnsurvey.exercises import (
    beyond_decoding,
    beyond_latent,
    beyond_positions,
    beyond_ring,
    beyond_tiled,
    beyond_trained,
    ch06_8_selective,
)
from tests.test_answers_kept_back import _numbers, _outputs

ROOT = Path(__file__).resolve().parents[1]


def _answers() -> dict[str, list[float]]:
    window_count, fraction = beyond_decoding.window_score_counts(
        beyond_decoding.EX3["T"], beyond_decoding.EX3["window"]
    )
    tiles = beyond_tiled.causal_tiles(4096, 256, 1024)
    return {
        "ch06_8_selective_attention": [  # exercise 1 at the check's first size and at DeepSeek's (1 and 7: too common)
            float(ch06_8_selective._breakeven_heads(4096, 128, 512, 64, 128) or 0),
            float(ch06_8_selective._breakeven_heads(32768, 128, 2048, 64, 128) or 0),
        ],
        "ch06_tiled_attention": [float(tiles)],
        "ch06_1_decoding": [
            beyond_decoding.window_cache_gib(),
            beyond_decoding.window_cache_gib() * 2**30,
            float(window_count),
            fraction,
        ],
        "ch06_2_positions": beyond_positions.half_distances(4),
        "ch06_3_ring_attention": [
            *map(float, beyond_ring.causal_pairs(4, 1024, "zigzag")),
            *(float(beyond_ring.training_ring_bytes(*case)) for case in beyond_ring.EX1_CASES),
        ],
        "ch06_4_trained_transformer": [beyond_trained.uniform_mirrored_weight()],
        "ch06_5_latent_and_shared_caches": [
            beyond_latent.stack_fraction(),
            float(beyond_latent.stack_counts()[-1]),  # the earlier counts are steps of the way (480 GiB is no leak)
            *(
                float(beyond_latent.score_multiply_adds(*case, form))
                for case in beyond_latent.EX1_CASES
                for form in ("naive", "absorbed")
            ),
        ],
    }


def shown(text: str, answers: list[float]) -> list[str]:
    """The numbers in ``text`` that state one of ``answers``."""
    found = []
    for token, decimals in _numbers(text):
        for v in answers:
            if v == 0:
                continue
            if math.isclose(token, v, rel_tol=1e-9):
                found.append(f"{token!r} is the answer {v!r}")
            elif decimals > 0 and not float(v).is_integer():
                significant = decimals + max(0, math.floor(math.log10(abs(token)))) + 1 if token else 0
                if significant >= 2 and abs(token - v) <= 0.5 * 10.0**-decimals + 1e-12:
                    found.append(f"{token!r} is the answer {v!r} rounded")
    return found


@pytest.mark.parametrize("stem", sorted(_answers()))
def test_no_visible_output_states_an_answer(stem):
    nb = nbformat.read(ROOT / "chapters" / f"{stem}.ipynb", as_version=4)
    answers = _answers()[stem]
    bad = {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or "### BEGIN SOLUTION" in cell.source:
            continue
        found = shown(_outputs(cell), answers)
        if found:
            bad[i] = found[:3]
    assert not bad, f"{stem}: outputs that state an answer (cell: numbers): {bad}"


def test_the_scan_catches_the_old_leaks():
    # ch06_4 printed "uniform attention would score 0.12"; ch06_3's Explore printed the contiguous counts' ratio
    assert shown("uniform attention would score 0.12", [8 / 68])
    assert shown("rank 3: 2,097,664 pairs", [2097664.0])
    assert not shown("best head per seed 0.53 ± 0.03", [8 / 68])
