"""The exercise checks of chapters 6 to 6.7 raise explicitly: no bare ``assert``, which ``python -O`` removes.

Under ``python -O`` a check written with ``assert`` accepts every answer and prints its confirmation;
these tests read the modules' syntax trees and run wrong answers in an optimised interpreter.
"""

from __future__ import annotations

import ast
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnsurvey.exercises import (
    beyond_decoding,
    beyond_latent,
    beyond_positions,
    beyond_ring,
    beyond_sinks,
    beyond_tiled,
    beyond_trained,
    ch06_7_recurrent,
    ch06_8_selective,
)

MODULES = [
    beyond_decoding,
    beyond_positions,
    beyond_ring,
    beyond_tiled,
    beyond_trained,
    beyond_latent,
    beyond_sinks,
    ch06_7_recurrent,
    ch06_8_selective,
]
SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_no_bare_assert(module):
    tree = ast.parse(inspect.getsource(module))
    asserts = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Assert)]
    assert not asserts, f"bare assert on lines {asserts}"


WRONG_UNDER_O = """
import sys
from attnsurvey.exercises import beyond_latent as m, beyond_positions as p, beyond_ring as r, beyond_sinks as s
from attnsurvey.exercises import ch06_7_recurrent as lr, ch06_8_selective as sx
from attnsurvey.beyond import selective as sel
cases = [
    (p.check_half_distance_4, ([1.0, 0.5, 0.25, 0.125],)),
    (p.check_rotate, (lambda x, t: x,)),
    (r.check_ring_bytes, (lambda n, d, P, s, h, hk: 0,)),
    (r.check_merge_outputs, (lambda parts: parts[0][0] * 0,)),
    (r.check_causal_work, ([0, 0, 0, 0],)),
    (m.check_score_madds, (lambda t, d_c, d_h, d_R, form: 0,)),
    (m.check_latent_scores, (lambda q_C, q_R, c, k_R, W_UK: q_C[..., :1] * 0,)),
    (m.check_stack_counts, ([0] * 11, 0.5)),
    (s.check_key_offsets, (lambda t, n_sink, window: {q: t - 1 - q for q in s.streaming_offsets(t, n_sink, window)},)),
    (s.hidden_check_key_offsets, (lambda t, n_sink, window: {q: t - 1 - q for q in range(t)},)),
    (lr.check_chunk_carry, (lambda K, beta, log_g: K.new_ones(K.shape[-1], K.shape[-1]),)),
    (lr.check_gla_parallel, (lambda Q, K, V, a: (Q @ K.T).tril() @ V,)),
    (sx.check_breakeven_heads, (lambda n, d, k, h, di: 1,)),
    (sx.hidden_check_breakeven_heads, (lambda n, d, k, h, di: 1,)),
    (sx.check_shared_mask, (lambda s, B, t: sel.block_selection(s, B, s.shape[-2], t).any(-3),)),
    (sx.hidden_check_shared_mask, (lambda s, B, t: sel.block_selection(s, B, s.shape[-2], t).any(-3),)),
    (lr.check_gla_parallel, (lr._gla_by_recurrence,)),
    (lr.check_chunk_carry, (lr._carry_by_recurrence,)),
]
for check, args in cases:
    try:
        check(*args)
    except AssertionError:
        continue
    sys.exit(f"{check.__name__} accepted a wrong answer under -O")
"""


def test_wrong_answers_fail_under_python_O():
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run([sys.executable, "-O", "-c", WRONG_UNDER_O], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
