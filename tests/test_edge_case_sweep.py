"""The edge-case sweep (scripts/edge_case_sweep.py): it covers every public callable, finds nothing outside the
files other owners are fixing, and reports each planted bug (NaN output, invalid size accepted, an unhelpful
exception, an ignored mask) as the kind of finding it is."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from attnsurvey.general_mechanisms import scoring, sparse_maps

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("edge_case_sweep", ROOT / "scripts" / "edge_case_sweep.py")
assert SPEC is not None and SPEC.loader is not None
sweep_mod = importlib.util.module_from_spec(SPEC)
sys.modules["edge_case_sweep"] = sweep_mod
SPEC.loader.exec_module(sweep_mod)

#: findings the sweep reports in files that other helpers own (routed to them); anything else is a regression
ROUTED = (
    "attnsurvey.attention.",
    "attnsurvey.masking.",
    "attnsurvey.builder.",
    "attnsurvey.query_related.multihead.",
    "attnsurvey.beyond.ring.",
    "attnsurvey.beyond.tiled.",
    "attnsurvey.beyond.triton_flash.",
    "attnsurvey.beyond.search.",
    "attnsurvey.conformance.",
)
#: ``1e20`` findings of self-attention: the one input enters the queries and the keys, so a score ``q . k`` of
#: about 1e40 cannot be held in float32 (float64 can) and attention.attend returns NaN instead of refusing;
#: routed to attention.py (tests/test_robust_routed.py::test_attend_refuses_or_survives_scores_beyond_float32).
#: Each entry is (callable, case); a new 1e20 finding is a regression.
SCORES_OVERFLOW = {
    ("attnsurvey.beyond.decoding.DecoderBlock", "1e20 X"),
    ("attnsurvey.beyond.decoding.GroupedQueryAttention", "1e20 X"),
    ("attnsurvey.beyond.positions.ALiBiSelfAttention", "1e20 X"),
    ("attnsurvey.beyond.positions.RotarySelfAttention", "1e20 X"),
    ("attnsurvey.query_related.multihop.MultiHopAttention", "1e20 F"),
    ("attnsurvey.query_related.types.SelfAttention", "1e20 F"),
    ("attnsurvey.query_related.types.SelfAttentionUpdate", "1e20 F"),
    ("attnsurvey.query_related.types.self_attention", "1e20 F"),
    ("attnsurvey.query_related.types.token2token", "1e20 F"),
    ("attnsurvey.transformer.linformer.LinformerSelfAttention", "1e20 X"),
    ("attnsurvey.transformer.lite.LiteTransformerBlock", "1e20 X"),
    ("attnsurvey.transformer.model.Decoder", "1e20 Y"),
    ("attnsurvey.transformer.model.DecoderLayer", "1e20 Y"),
    ("attnsurvey.transformer.model.Encoder", "1e20 X"),
    ("attnsurvey.transformer.model.EncoderLayer", "1e20 X"),
    ("attnsurvey.transformer.reformer.shared_qk_attention", "1e20 QK"),
    ("attnsurvey.transformer.relative.GaussianLocalSelfAttention", "1e20 X"),
    ("attnsurvey.transformer.relative.RelativeSelfAttention", "1e20 X"),
    ("attnsurvey.transformer.transformer_xl.TransformerXLAttention", "1e20 X"),
}


def verdicts(results: list, case_prefix: str = "") -> set[str]:
    return {r.verdict for r in results if r.case.startswith(case_prefix)}


@pytest.fixture(scope="module")
def full_sweep() -> list:
    return sweep_mod.sweep()


def test_every_public_callable_is_covered(full_sweep):
    names = {r.name.split("[")[0] for r in full_sweep}
    expected = {q for q, _ in sweep_mod.public_callables()}
    assert names == expected
    assert len(expected) > 500  # every module's public names, classes included
    kinds = {sweep_mod.case_kind(r.case) for r in full_sweep}
    for kind in ("B", "n_f", "n_q", "length", "float16", "int", "numpy", "list", "hyper", "nan in masked slot"):
        assert kind in kinds, kind
    cases = {r.case.split("=")[0].split(" ")[0] for r in full_sweep}
    for kind in ("index", "1e20", "grad,"):
        assert kind in cases, kind


def test_no_crash_or_silent_finding_outside_the_routed_files(full_sweep):
    bad = [
        r
        for r in full_sweep
        if r.verdict in ("crash", "silent")
        and not r.name.startswith(ROUTED)
        and (r.name, r.case) not in SCORES_OVERFLOW
    ]
    assert not bad, "\n".join(f"{r.verdict} {r.name} [{r.case}]: {r.why}" for r in bad[:20])


def one(name: str, obj: object) -> list:
    return sweep_mod.sweep(callables=[(name, obj)])


def test_planted_nan_output_is_silent():
    @functools.wraps(scoring.dot_score)
    def nan_score(Q, K):
        return scoring.dot_score(Q, K) * float("nan")

    results = one("attnsurvey.general_mechanisms.scoring.dot_score", nan_score)
    assert verdicts(results, "baseline") == {"silent"}
    assert verdicts(one("attnsurvey.general_mechanisms.scoring.dot_score", scoring.dot_score), "baseline") == {"ok"}


def test_planted_accepted_negative_size_is_silent(monkeypatch):
    real = one("attnsurvey.general_mechanisms.scoring.AdditiveScore", scoring.AdditiveScore)
    assert verdicts(real, "hyper d_w=0") == {"clear"}
    monkeypatch.setattr(scoring, "check_sizes", lambda *a, **k: None)  # the constructor forgets its check
    planted = one("attnsurvey.general_mechanisms.scoring.AdditiveScore", scoring.AdditiveScore)
    assert verdicts(planted, "hyper d_w=0") == {"silent"}


def test_planted_index_error_is_a_crash():
    @functools.wraps(scoring.dot_score)
    def broken(Q, K):
        if Q.shape[-2] == 0:
            raise IndexError("index 0 is out of bounds for dimension 1 with size 0")
        return scoring.dot_score(Q, K)

    results = one("attnsurvey.general_mechanisms.scoring.dot_score", broken)
    assert verdicts(results, "n_q=0") == {"crash"}


def test_planted_ignored_mask_is_silent():
    @functools.wraps(sparse_maps.sparsemax)
    def maskless(e, mask=None, dim=-1, k=None):
        return sparse_maps.sparsemax(e, None, dim, k)

    planted = one("attnsurvey.general_mechanisms.sparse_maps.sparsemax", maskless)
    assert "silent" in verdicts(planted, "nan in masked slot")
    real = one("attnsurvey.general_mechanisms.sparse_maps.sparsemax", sparse_maps.sparsemax)
    assert verdicts(real, "nan in masked slot") == {"ok"}


def test_planted_nan_gradient_through_a_masked_slot_is_silent():
    from attnsurvey.query_related import types

    @functools.wraps(types.learned_query_attention)
    def leaky(K, V, q, mask=None):
        c, a = types.learned_query_attention(K, V, q, mask)
        # scores selected after the computation, not before: a finite forward, but q's gradient is K^T 0 = NaN
        e = K @ q
        late = torch.where(torch.isfinite(e), e, torch.zeros((), dtype=e.dtype)).sum(-1)
        return c + 0 * late[..., None], a

    planted = one("attnsurvey.query_related.types.learned_query_attention", leaky)
    assert "silent" in verdicts(planted, "grad, nan in masked slot")
    real = one("attnsurvey.query_related.types.learned_query_attention", types.learned_query_attention)
    assert verdicts(real, "grad, nan in masked slot") == {"ok"}


def test_command_line_exit_status(monkeypatch, capsys):
    assert sweep_mod.main(["--only", "attnsurvey.general_mechanisms.scoring.dot_score"]) == 0
    monkeypatch.setattr(scoring, "dot_score", functools.wraps(scoring.dot_score)(lambda Q, K: Q @ K.mT * float("nan")))
    assert sweep_mod.main(["--only", "attnsurvey.general_mechanisms.scoring.dot_score"]) == 1
    assert "silent" in capsys.readouterr().out
