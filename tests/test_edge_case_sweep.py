"""The edge-case sweep (scripts/edge_case_sweep.py): it covers every public callable, finds nothing but the one
open finding (scores beyond float32, listed below) and two kinds of case outside a function's contract (listed with
why), and reports each planted bug (NaN output, invalid size accepted, an unhelpful exception, an ignored mask)
as the kind of finding it is."""

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

#: Records of values that their builder has already checked (``attend`` builds ``CoreSettings``, the multi-head
#: functions build ``Heads`` and ``HeadsCall``): like ``attend_unchecked``, which reads them, they trust what they
#: hold by contract, and their builders are swept with every bad value. ``canonical_masks`` returns the masks in the
#: broadcast form it was given, which the sweep's layout check reads as another layout; ``attend`` and the
#: multi-head stack, which call it, are swept with every layout.
OUTSIDE_CONTRACT = (
    "attnsurvey.attention.CoreSettings",
    "attnsurvey.query_related.multihead.Heads",
    "attnsurvey.query_related.multihead.HeadsCall",
    "attnsurvey.attention.canonical_masks",
)
#: ``1e20`` findings of self-attention: the one input enters the queries and the keys, so a score ``q . k`` of
#: about 1e40 cannot be held in float32 (float64 can) and attention.attend returns NaN instead of refusing;
#: the one open finding (tests/test_inputs_core_findings.py::test_attend_refuses_or_survives_scores_beyond_float32).
#: Each entry is (callable, case); a new 1e20 finding is a regression.
SCORES_OVERFLOW = {
    ("attnsurvey.beyond.decoding.GroupedQueryAttention", "1e20 X"),
    ("attnsurvey.beyond.positions.ALiBiSelfAttention", "1e20 X"),
    ("attnsurvey.beyond.positions.RotarySelfAttention", "1e20 X"),
    ("attnsurvey.beyond.sinks.GatedAttention", "1e20 X"),
    ("attnsurvey.beyond.sinks.SinkAttention", "1e20 X"),
    ("attnsurvey.query_related.multihead.MultiHeadAttention", "1e20 X_q"),
    ("attnsurvey.query_related.multihead.SelfAttentionVariant", "1e20 X"),
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
    ("attnsurvey.transformer.reformer.same_bucket_attention", "1e20 QK"),
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


def test_no_crash_or_silent_finding_but_the_open_one(full_sweep):
    bad = [
        r
        for r in full_sweep
        if r.verdict in ("crash", "silent")
        and not r.name.startswith(OUTSIDE_CONTRACT)
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


# ------------------------------------------------------------------ the third pass's kinds, each shown to catch a bug
def test_planted_unchecked_index_is_a_crash_and_a_clamped_one_silent():
    name = "attnsurvey.general_mechanisms.sparse_maps.sparsemax_loss"

    @functools.wraps(sparse_maps.sparsemax_loss)
    def unchecked(e, target, k=None):
        y = torch.nn.functional.one_hot(target, e.shape[-1]).to(e.dtype)  # torch's own error out of range
        return ((sparse_maps.sparsemax(e, k=k) - y) * e).sum(-1)

    @functools.wraps(sparse_maps.sparsemax_loss)
    def clamped(e, target, k=None):
        return sparse_maps.sparsemax_loss(e, target.clamp(0, e.shape[-1] - 1), k)  # out of range read as the edge

    assert verdicts(one(name, sparse_maps.sparsemax_loss), "index target") == {"clear"}
    assert verdicts(one(name, unchecked), "index target") == {"crash"}
    assert verdicts(one(name, clamped), "index target") == {"silent"}


def test_planted_unchecked_example_index_is_a_crash(monkeypatch):
    from attnsurvey.data import _rows, sentiment

    name = "attnsurvey.data.sentiment.sentiment_reviews"
    assert verdicts(one(name, sentiment.sentiment_reviews), "index decode") == {"clear"}
    monkeypatch.setattr(_rows.Rows, "check_example", lambda self, i, symbol="i": i)  # the data set forgets its check
    assert verdicts(one(name, sentiment.sentiment_reviews), "index decode") == {"crash"}


def test_planted_accepted_zero_count_is_silent(monkeypatch):
    name = "attnsurvey.general_mechanisms.scoring.softmax_saturation"
    assert verdicts(one(name, scoring.softmax_saturation), "hyper n_samples=0") == {"clear"}
    monkeypatch.setattr(scoring, "check_sizes", lambda *a, **k: None)  # n_samples = 0: a mean over nothing, NaN
    assert verdicts(one(name, scoring.softmax_saturation), "hyper n_samples=0") == {"silent"}


def test_planted_non_integer_size_reaching_torch_is_a_crash(monkeypatch):
    from attnsurvey.data import sorting

    name = "attnsurvey.data.sorting.sorting_batch"
    assert verdicts(one(name, sorting.sorting_batch), "hyper n=2.5") == {"clear"}
    monkeypatch.setattr(sorting, "check_integers", lambda *a, **k: None)  # 2.5 reaches torch.rand's size
    assert verdicts(one(name, sorting.sorting_batch), "hyper n=2.5") == {"crash"}


def test_planted_overflow_at_1e20_is_silent():
    from attnsurvey.query_related import types

    name = "attnsurvey.query_related.types.update_residual_norm"

    @functools.wraps(types.update_residual_norm)
    def variance_first(F_old, C, gamma=None, beta=None, eps=1e-5):
        x = F_old + C
        y = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + eps)
        return y if gamma is None else y * gamma + (0 if beta is None else beta)

    assert verdicts(one(name, types.update_residual_norm), "1e20") == {"ok"}
    assert "silent" in verdicts(one(name, variance_first), "1e20")


def test_planted_list_reaching_a_module_method_is_a_crash(monkeypatch):
    from attnsurvey.general_mechanisms import alignment

    name = "attnsurvey.general_mechanisms.alignment.MovingAverageBaseline"
    assert verdicts(one(name, alignment.MovingAverageBaseline), "list loss") == {"clear"}
    monkeypatch.setattr(alignment, "as_tensor", lambda x, symbol: x)  # update forgets its type check
    assert verdicts(one(name, alignment.MovingAverageBaseline), "list loss") == {"crash"}


def test_planted_torch_type_error_on_a_package_line_is_a_crash():
    @functools.wraps(scoring.dot_score)
    def unchecked(Q, K):
        return torch.matmul(Q, K.transpose(-1, -2) if isinstance(K, torch.Tensor) else K)  # torch's TypeError

    assert verdicts(one("attnsurvey.general_mechanisms.scoring.dot_score", unchecked), "list K") == {"crash"}
    assert verdicts(one("attnsurvey.general_mechanisms.scoring.dot_score", scoring.dot_score), "list K") == {"clear"}


def test_planted_nan_gradient_at_a_padded_word_is_silent():
    from attnsurvey.feature_related import levels

    name = "attnsurvey.feature_related.levels.scaled_word_weights"

    @functools.wraps(levels.scaled_word_weights)
    def select_after(a_word, a_chunk, word_mask=None):
        num = a_word * a_chunk.unsqueeze(-1)  # NaN * a_chunk: selected away below, but its gradient stays NaN
        if word_mask is not None:
            num = torch.where(word_mask, num, torch.zeros((), dtype=num.dtype))
        den = num.sum((-2, -1), keepdim=True)
        return num / den

    assert verdicts(one(name, levels.scaled_word_weights), "grad, nan in masked slot") == {"ok"}
    assert verdicts(one(name, select_after), "grad, nan in masked slot") == {"silent"}
