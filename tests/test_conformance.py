"""The conformance checks (attnsurvey.conformance): verdicts on the real libraries, and adapters that must fail."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnsurvey import conformance as C
from attnsurvey.attention import attend
from attnsurvey.beyond.positions import alibi_bias, alibi_slopes
from attnsurvey.conformance import torch_target as tt
from attnsurvey.conformance import toy
from attnsurvey.query_related.multihead import multi_head_attention

#: The verdict of every check: (target, api) -> (status, convention). A new library version that changes
#: a convention, or an adapter that stops mapping its inputs, changes this table.
EXPECTED = {
    ("torch", "F.scaled_dot_product_attention"): ("conforms", None),
    ("torch", "F.scaled_dot_product_attention(is_causal)"): ("conforms", None),
    ("torch", "F.scaled_dot_product_attention(enable_gqa)"): ("conforms", None),
    ("torch", "nn.MultiheadAttention"): ("conforms", None),
    ("torch", "nn.MultiheadAttention weights"): ("differs", "head-averaged weights"),
    ("torch", "nn.TransformerEncoderLayer (post-norm)"): ("conforms", None),
    ("torch", "nn.TransformerDecoderLayer (pre-norm, causal)"): ("conforms", None),
    ("transformers", "BertSelfAttention"): ("conforms", None),
    ("transformers", "GPT2Attention"): ("conforms", None),
    ("transformers", "LlamaAttention (no rotation)"): ("conforms", None),
    ("transformers", "LlamaAttention"): ("differs", "RoPE pairing: rotate-half"),
    ("transformers", "T5Attention"): ("differs", "T5: unscaled scores"),
    ("transformers", "DeepseekV3Attention"): ("conforms", None),
    ("transformers", "DeepseekV3Attention (q_lora_rank=None)"): ("conforms", None),
    ("transformers", "DeepseekV3Attention (rope_interleave=False)"): ("differs", "RoPE pairing: rotate-half"),
    ("transformers", "DeepseekV3Attention + DynamicCache (outputs)"): ("conforms", None),
    ("transformers", "DynamicCache contents (c, k^R)"): ("differs", "cached k^R: pairs split"),
    ("transformers", "Qwen3NextGatedDeltaNet (chunked)"): ("conforms", None),
    ("transformers", "Qwen3NextGatedDeltaNet (recurrent)"): ("conforms", None),
    ("transformers", "Qwen3NextGatedDeltaNet (h_k = h_v)"): ("conforms", None),
    ("transformers", "Qwen3NextGatedDeltaNet + cache (outputs)"): ("conforms", None),
    ("transformers", "DynamicCache recurrent state"): ("conforms", None),
    ("transformers", "GptOssAttention (full_attention)"): ("conforms", None),
    ("transformers", "GptOssAttention (sliding_attention)"): ("conforms", None),
    ("transformers", "Gemma3Attention (sliding_attention)"): ("differs", "Gemma 3: q/k norms, query_pre_attn_scalar"),
    ("transformers", "Gemma3Attention (full_attention)"): ("differs", "Gemma 3: q/k norms, query_pre_attn_scalar"),
    ("x_transformers", "Attention(mask)"): ("differs", "padded queries zeroed"),
    ("x_transformers", "Attention(causal=True)"): ("conforms", None),
    ("x_transformers", "Attention(kv_heads=2)"): ("differs", "head grouping order"),
    ("x_transformers", "Attention(rel_pos=AlibiPositionalBias)"): ("conforms", None),
    ("x_transformers", "Attention(rotary_pos_emb=RotaryEmbedding)"): ("conforms", None),
    ("x_transformers", "Attention(num_mem_kv=2)"): ("conforms", None),
    ("entmax", "entmax.sparsemax"): ("conforms", None),
    ("entmax", "entmax.entmax15"): ("conforms", None),
    ("entmax", "entmax.entmax_bisect(alpha=1.3)"): ("conforms", None),
    ("entmax", "entmax.sparsemax_loss"): ("conforms", None),
    ("entmax", "entmax.entmax15_loss"): ("conforms", None),
    ("entmax", "entmax.entmax_bisect_loss(alpha=1.3)"): ("conforms", None),
}
#: Checks whose api appears twice in a target (two equations): (target, api, equation) -> verdict.
EXPECTED_BY_EQUATION = {
    ("torch", "F.scaled_dot_product_attention", "fully-masked"): ("conforms", None),
    ("torch", "nn.MultiheadAttention", "fully-masked"): ("differs", "fully-masked rows: NaN"),
    ("transformers", "BertSelfAttention", "fully-masked"): ("differs", "fully-masked rows: mean"),
    ("transformers", "DeepseekV3Attention", "mla-absorbed"): ("conforms", None),
}


@pytest.fixture(scope="module")
def results():
    return C.run()


@pytest.mark.catalog("extra:conformance")
def test_every_target_gives_the_expected_verdicts(results):
    assert {r.target for r in results} == set(C.TARGETS)
    seen = set()
    for r in results:
        key = (r.target, r.api, r.equation)
        expected = EXPECTED_BY_EQUATION.get(key, EXPECTED.get(key[:2]))
        assert expected is not None, f"unexpected check {key}"
        assert (r.status, r.convention) == expected, (key, r)
        assert r.explained
        if r.status == "conforms":
            assert r.max_error <= C.TOLERANCE
        else:  # a difference well above the tolerance, gone once the convention is mapped
            assert r.max_error > 1e3 * C.TOLERANCE and r.mapped_error <= C.TOLERANCE
            assert r.explanation
        seen.add(key)
    assert len(seen) == len(results) == len(EXPECTED) + len(EXPECTED_BY_EQUATION)


def _wrong(check: C.Check) -> C.Result:
    result = C.evaluate(check)
    assert result.status == "differs" and result.convention is None and not result.explained, result
    return result


def _inputs():
    Q, K, V = tt.rand(2, 2, 4, 3, seed=1), tt.rand(2, 2, 5, 3, seed=2), tt.rand(2, 2, 5, 3, seed=3)
    return Q, K, V, tt.example_mask(4, 5)


@pytest.mark.catalog("extra:conformance")
def test_torch_adapters_with_a_wrong_scale_or_an_unmapped_polarity_differ():
    Q, K, V, mask = _inputs()
    book = attend(Q, K, V, mask)[0]
    ok = C.evaluate(C.Check("torch", "eq25", "sdpa", lambda: (book, tt.sdpa_adapter(Q, K, V, mask))))
    assert ok.status == "conforms"
    _wrong(C.Check("torch", "eq25", "sdpa", lambda: (book, tt.sdpa_adapter(Q, K, V, mask, scale=1.0))))

    mha = nn.MultiheadAttention(6, 2, batch_first=True, dtype=torch.float64).eval()
    X, m = tt.rand(2, 4, 6, seed=4), tt.example_mask(4, 4)
    w = tt.mha_weights(mha)
    ours = multi_head_attention(X, X, X, *(tt.linear(w[f"W_{s}"], w[f"b_{s}"]) for s in "QKVO"), h=2, mask=m)[0]

    def unmapped_polarity():  # torch reads True as blocked: the mask goes in as it is
        return ours, mha(X, X, X, attn_mask=m)[0]

    assert C.evaluate(C.Check("torch", "eq38-40", "mha", lambda: (ours, tt.mha_adapter(mha, X, m)[0]))).explained
    _wrong(C.Check("torch", "eq38-40", "mha", unmapped_polarity))


@pytest.mark.catalog("extra:conformance")
def test_transformers_adapter_that_forgets_to_transpose_conv1d_differs():
    from transformers.models.gpt2.configuration_gpt2 import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

    from attnsurvey.conformance.transformers_target import additive_mask

    config = GPT2Config(n_embd=6, n_head=2)
    config._attn_implementation = "eager"
    gpt2 = GPT2Attention(config, layer_idx=0).double().eval()
    torch.nn.init.normal_(gpt2.c_attn.bias)
    X, n = tt.rand(2, 4, 6, seed=5), 4
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    theirs = gpt2(X, attention_mask=additive_mask(causal)[None, None])[0]

    def book(transpose: bool):
        W = gpt2.c_attn.weight.T if transpose else gpt2.c_attn.weight.reshape(18, 6)  # wrong: no transpose
        Ws = [tt.linear(W[i * 6 : (i + 1) * 6], gpt2.c_attn.bias[i * 6 : (i + 1) * 6]) for i in range(3)]
        WO = tt.linear(gpt2.c_proj.weight.T, gpt2.c_proj.bias)
        return multi_head_attention(X, X, X, *Ws, WO, h=2, is_causal=True)[0]

    assert C.evaluate(C.Check("transformers", "causal", "gpt2", lambda: (book(True), theirs))).status == "conforms"
    _wrong(C.Check("transformers", "causal", "gpt2", lambda: (book(False), theirs)))


@pytest.mark.catalog("extra:conformance")
def test_x_transformers_adapter_with_reversed_alibi_slopes_differs():
    from x_transformers.x_transformers import AlibiPositionalBias, Attention

    attn = Attention(8, dim_head=4, heads=4).double().eval()
    alibi = AlibiPositionalBias(heads=4, total_heads=4).double()
    X = tt.rand(2, 6, 8, seed=6)
    W = (attn.to_q.weight, attn.to_k.weight, attn.to_v.weight, attn.to_out.weight)

    def book(slopes):
        return multi_head_attention(X, X, X, *W, h=4, bias=alibi_bias(slopes, 6, 6).unsqueeze(0))[0]

    theirs = attn(X, rel_pos=alibi)
    assert C.evaluate(C.Check("x_transformers", "alibi", "a", lambda: (book(alibi_slopes(4)), theirs))).explained
    _wrong(C.Check("x_transformers", "alibi", "a", lambda: (book(alibi_slopes(4).flip(0)), theirs)))


@pytest.mark.catalog("extra:conformance")
def test_entmax_adapter_with_another_alpha_differs():
    from attnsurvey.attention import align_scores, alpha_entmax_align
    from attnsurvey.conformance.entmax_target import library_function

    e = tt.rand(3, 6, seed=7) * 2
    ours = align_scores(e, None, alpha_entmax_align(1.3))
    bisect = library_function("entmax_bisect")
    assert C.evaluate(C.Check("entmax", "alpha-entmax", "b", lambda: (ours, bisect(e, 1.3)))).status == "conforms"
    _wrong(C.Check("entmax", "alpha-entmax", "b", lambda: (ours, bisect(e, 1.5))))


@pytest.mark.catalog("extra:conformance")
def test_a_convention_that_does_not_vanish_explains_nothing():
    Q, K, V, mask = _inputs()
    book = attend(Q, K, V, mask)[0]
    wrong_scale = lambda: (book, tt.sdpa_adapter(Q, K, V, mask, scale=1.0))
    not_it = C.Convention("fully-masked rows: NaN", "not the cause", wrong_scale)
    result = C.evaluate(C.Check("torch", "eq25", "sdpa", wrong_scale, not_it))
    assert result.status == "differs" and result.convention is None and not result.explained
    assert result.mapped_error > C.TOLERANCE and "unexplained" in result.explanation
    right = C.Convention(
        "scale 1", "the adapter's scale", lambda: (attend(Q, K, V, mask, scale=1.0)[0], wrong_scale()[1])
    )
    assert C.evaluate(C.Check("torch", "eq25", "sdpa", wrong_scale, right)).convention == "scale 1"


def test_max_error_counts_one_sided_nan_as_infinite_and_checks_shapes():
    a = torch.tensor([1.0, float("nan"), float("inf")])
    assert C.max_error(a, a.clone()) == 0.0
    assert math.isinf(C.max_error(a, torch.tensor([1.0, 0.0, float("inf")])))
    assert C.max_error(torch.tensor([1.0, 2.0]), torch.tensor([1.5, 2.0])) == 0.5
    with pytest.raises(ValueError, match=r"shape \(2,\) but the adapter returned \(1, 2\)"):
        C.max_error(torch.zeros(2), torch.zeros(1, 2))
    assert C.format_error(0.0) == "0"
    # an error at float64 rounding shows one bound on either side of a power of ten
    assert C.format_error(2.2e-16) == C.format_error(9.9e-16) == C.format_error(1.1e-15) == "< 1e-12"
    assert C.format_error(3e-8) == C.format_error(1.4e-7) == C.format_error(1e-6) == "<= 1e-06"
    assert C.format_error(0.531) == "0.53"
    assert C.format_error(math.inf) == "inf"
    assert C.format_error(None) == "-"


def test_table_has_one_row_per_checked_equation_and_a_column_per_target(results):
    t = C.conformance_table(results)
    assert t.header == ("equation", *C.TARGETS)
    labels = [row[0] for row in t.rows]
    assert labels == [label for key, label in C.EQUATIONS.items() if any(r.equation == key for r in results)]
    gqa = dict(zip(t.header, t.rows[labels.index(C.EQUATIONS["gqa"])], strict=True))
    assert "conforms" in gqa["torch"] and "head grouping order" in gqa["x_transformers"]
    assert dict(zip(t.header, t.rows[labels.index(C.EQUATIONS["sparsemax"])], strict=True))["torch"] == "not applicable"
    t._repr_html_()  # the markup is well formed


def test_unknown_target_and_missing_library(monkeypatch):
    with pytest.raises(ValueError, match="known targets: torch, transformers"):
        C.checks_of("jax")
    monkeypatch.setitem(C.TARGETS, "ghost", "attnsurvey_no_such_module_xyz")
    (r,) = C.run(["ghost"])
    assert r.status == "not applicable" and "not installed" in r.explanation


def test_cli_prints_json_and_refuses_unknown_targets(capsys):
    from attnsurvey.conformance.__main__ import main

    assert main(["entmax", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["status"] for r in rows} == {"conforms"} and all(r["target"] == "entmax" for r in rows)
    assert main(["entmax"]) == 0
    assert "entmax.sparsemax" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:
        main(["jax"])
    assert stop.value.code == 2


def test_importing_the_package_and_adapters_imports_no_library():
    code = (
        "import sys, attnsurvey, attnsurvey.conformance, attnsurvey.conformance.toy, "
        "attnsurvey.conformance.torch_target, attnsurvey.conformance.transformers_target, "
        "attnsurvey.conformance.x_transformers_target, attnsurvey.conformance.entmax_target; "
        "print(sorted(m for m in ('transformers', 'x_transformers', 'entmax') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_helpers_match_hand_computed_orders():
    from attnsurvey.conformance.transformers_target import interleave_permutation, permute_heads
    from attnsurvey.conformance.x_transformers_target import grouping_permutation, reorder_heads

    assert interleave_permutation(6).tolist() == [0, 3, 1, 4, 2, 5]
    assert permute_heads(torch.arange(8), 2, torch.tensor([1, 0, 3, 2])).tolist() == [1, 0, 3, 2, 5, 4, 7, 6]
    # h = 4, h_kv = 2: x-transformers' head j reads K/V head j % 2, the book's head b reads b // 2
    perm = grouping_permutation(4, 2)
    assert perm.tolist() == [0, 2, 1, 3]
    assert [int(p) % 2 for p in perm] == [b // 2 for b in range(4)]
    W = torch.arange(8).reshape(4, 2)  # 4 heads of width 1 along dim 0 ... and 2 columns
    assert reorder_heads(W, perm, 0).tolist() == [[0, 1], [4, 5], [2, 3], [6, 7]]


def _adapter(toy_module, Q, K, V, mask):
    return toy_module(Q.transpose(1, 2), K.transpose(1, 2), V.transpose(1, 2), blocked=~mask).transpose(1, 2)


def _polarity_not_mapped(toy_module, Q, K, V, mask):
    return toy_module(Q.transpose(1, 2), K.transpose(1, 2), V.transpose(1, 2), blocked=mask).transpose(1, 2)


def _sequence_and_head_swapped(toy_module, Q, K, V, mask):  # reshape instead of transpose: same shape, wrong rows
    B, h, n, d = Q.shape
    lay = lambda X: X.reshape(B, X.shape[2], h, d)
    return toy_module(lay(Q), lay(K), lay(V), blocked=~mask).reshape(B, h, n, d)


@pytest.mark.catalog("extra:conformance")
def test_toy_exercise_checks_accept_the_solution_and_reject_plausible_wrong_adapters(capsys):
    toy.check_toy_adapter(_adapter)
    toy.hidden_check_toy_adapter(_adapter)
    assert "conforms" in capsys.readouterr().out
    for wrong in (_polarity_not_mapped, _sequence_and_head_swapped, lambda t, Q, K, V, m: Q):
        with pytest.raises(AssertionError, match="Hint|wrong shape"):
            toy.check_toy_adapter(wrong)
        with pytest.raises(AssertionError):
            toy.hidden_check_toy_adapter(wrong)
    with pytest.raises(AssertionError, match="wrong shape"):  # the toy's own layout handed back unmapped
        toy.check_toy_adapter(lambda t, Q, K, V, m: t(Q.transpose(1, 2), K.transpose(1, 2), V.transpose(1, 2), ~m))


@pytest.mark.catalog("extra:conformance")
def test_toy_attention_is_sdpa_in_its_own_conventions():
    q, k, v = tt.rand(2, 3, 2, 4, seed=8), tt.rand(2, 5, 2, 4, seed=9), tt.rand(2, 5, 2, 4, seed=10)
    blocked = tt.rand(2, 3, 5, seed=11) > 0.5
    blocked[..., 0] = False
    ref = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=~blocked[:, None]
    ).transpose(1, 2)
    torch.testing.assert_close(toy.ToyAttention()(q, k, v, blocked), ref)
    with pytest.raises(ValueError, match=r"blocked must be a boolean \(B, n_q, n_f\)"):
        toy.ToyAttention()(q, k, v, blocked.float())


def test_equation_labels_follow_the_survey():
    # Eq. (37) of the survey is the post-norm update Normalize(f_old + c); Eq. (25) is the softmax alone
    assert "post-norm" in C.EQUATIONS["eq37"] and "pre-norm" not in C.EQUATIONS["eq37"]
    assert "(24)-(25)" in C.EQUATIONS["eq25"] and "masked softmax" not in C.EQUATIONS["eq25"]
    labels = {check.api: check.equation for check in C.checks_of("torch")}
    assert labels["nn.TransformerEncoderLayer (post-norm)"] == "eq37"
    assert labels["nn.TransformerDecoderLayer (pre-norm, causal)"] == "pre-norm"
