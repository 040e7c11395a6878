"""The input contract of book/api.md, across mechanisms: a correct result or a clear error on edge-case inputs.

Masked slots stay inert (also when they hold NaN), empty sets give empty results, losses over nothing are 0,
bad hyper-parameters and masks are refused naming their symbol. ``scripts/edge_case_sweep.py`` checks the same
kinds of input over every public callable; these are the cases worth stating one by one.
"""

from __future__ import annotations

import pytest
import torch

from .helpers import rand

NAN = float("nan")


def _poisoned(B: int = 2, n_f: int = 5, d: int = 4) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Features with NaN in the last (masked) slot, the clean features and the (B, n_f) mask."""
    g = torch.Generator().manual_seed(0)
    F = torch.randn(B, n_f, d, generator=g, dtype=torch.float64)
    bad = F.clone()
    bad[:, -1] = NAN
    mask = torch.ones(B, n_f, dtype=torch.bool)
    mask[:, -1] = False
    return bad, F, mask


def test_context_and_attend_scores_keep_masked_values_inert():
    from attnsurvey.attention import attend_scores, context
    from attnsurvey.query_related.types import mean_pool

    bad, F, mask = _poisoned()
    torch.testing.assert_close(mean_pool(bad, mask), mean_pool(F, mask))  # was all NaN
    e = torch.randn(2, 3, 5, dtype=torch.float64)
    torch.testing.assert_close(attend_scores(e, bad, mask[:, None])[0], attend_scores(e, F, mask[:, None])[0])
    a = torch.softmax(e, -1).masked_fill(~mask[:, None], 0.0)
    torch.testing.assert_close(context(a, bad), a @ F)
    a[0, 0, -1] = 0.5  # a non-zero weight on a NaN value still gives NaN there, and only there
    c = context(a, bad)
    assert torch.isnan(c[0, 0]).all() and torch.isfinite(c[0, 1:]).all() and torch.isfinite(c[1]).all()


@pytest.mark.parametrize("case", ["depthwise_conv", "lite", "local_window", "lsh", "max_pooled", "hard_alignment"])
def test_empty_feature_sets_give_empty_results(case):
    from attnsurvey.evaluation.intrinsic import hard_alignment
    from attnsurvey.feature_related.co_attention import max_pooled_affinity_scores
    from attnsurvey.transformer import lite, local, reformer

    X = torch.zeros(2, 0, 4)
    if case == "depthwise_conv":
        assert lite.depthwise_conv(X, torch.ones(4, 3)).shape == (2, 0, 4)
    elif case == "lite":
        assert lite.LiteTransformerBlock(4, 2, 8)(X)[0].shape == (2, 0, 4)
    elif case == "local_window":
        c, a = local.local_window_attention(X, X, X, 1)
        assert c.shape == (2, 0, 4) and a.shape == (2, 0, 3)
    elif case == "lsh":
        assert reformer.lsh_attention(X, X, 2, 2)[0].shape == (2, 0, 4)
    elif case == "max_pooled":
        e1, e2 = max_pooled_affinity_scores(torch.zeros(2, 3, 0))
        assert e2.shape == (2, 0) and torch.equal(e1, torch.full((2, 3), torch.finfo(torch.float32).min))
    else:
        assert hard_alignment(torch.zeros(2, 0)).shape == (2, 0)


def test_lite_block_keeps_padding_out_of_real_tokens():
    from attnsurvey.transformer.lite import LiteTransformerBlock, depthwise_conv

    torch.manual_seed(0)
    blk = LiteTransformerBlock(4, 2, 8).double().eval()
    X = torch.randn(1, 5, 4, dtype=torch.float64)
    kpm = torch.tensor([[True, True, True, False, False]])
    padded = X.clone()
    padded[:, 3:] = NAN
    real = blk(X[:, :3])[0]
    torch.testing.assert_close(blk(padded, key_padding_mask=kpm)[0][:, :3], real)  # was leaking through the conv
    torch.testing.assert_close(blk(X, key_padding_mask=kpm)[0][:, :3], real)
    W = torch.randn(4, 3, dtype=torch.float64)
    torch.testing.assert_close(depthwise_conv(padded, W, mask=kpm)[:, :3], depthwise_conv(X[:, :3], W))


def test_seq2seq_and_greedy_decode_accept_an_empty_batch():
    from attnsurvey.seq2seq import Seq2Seq

    torch.manual_seed(0)
    m = Seq2Seq(7).eval()
    src = torch.zeros(0, 4, dtype=torch.long)
    logits, a = m(src, torch.zeros(0, 3, dtype=torch.long), torch.zeros(0, dtype=torch.long))
    assert logits.shape == (0, 3, 7) and a.shape == (0, 3, 4)
    tokens, logits, a = m.greedy_decode(src, 3)
    assert tokens.shape == (0, 3) and logits.shape == (0, 3, 7)


def _losses_over_nothing():
    from attnsurvey.evaluation.intrinsic import supervised_attention_loss
    from attnsurvey.general_mechanisms.alignment import score_function_surrogate
    from attnsurvey.general_mechanisms.pointer import PointerNetwork, pointer_loss
    from attnsurvey.query_related.capsule import capsule_loss
    from attnsurvey.seq2seq import sequence_loss

    torch.manual_seed(0)
    z = lambda *s: torch.zeros(*s, requires_grad=True)
    long0 = torch.zeros(0, dtype=torch.long)
    return {
        "sequence_loss (empty)": lambda: sequence_loss(z(0, 3, 5), torch.zeros(0, 3, dtype=torch.long)),
        "sequence_loss (all PAD)": lambda: sequence_loss(z(2, 3, 5), torch.zeros(2, 3, dtype=torch.long)),
        "capsule_loss": lambda: capsule_loss(z(0, 3), z(0, 3, 4), z(0, 4), long0)[0],
        "supervised_attention_loss": lambda: supervised_attention_loss(
            z(0, 3), long0, z(0, 5), torch.zeros(0, 5, dtype=torch.bool), 1.0
        ),
        "score_function_surrogate": lambda: score_function_surrogate(z(0), torch.zeros(0)),
        "pointer_loss": lambda: pointer_loss(
            PointerNetwork(), (torch.zeros(0, 4, 1), torch.zeros(0, 4, dtype=torch.long))
        ),
    }


@pytest.mark.parametrize("name", list(_losses_over_nothing()))
def test_losses_over_nothing_are_zero_with_a_zero_gradient(name):
    loss = _losses_over_nothing()[name]()
    assert loss.shape == () and float(loss.detach()) == 0.0  # was NaN
    loss.backward()  # still on the graph: a training loop can step on an empty batch


@pytest.mark.parametrize(
    "metric", ["accuracy", "accuracy (all ignored)", "token_accuracy", "token_accuracy (all PAD)", "sequence_accuracy"]
)
def test_metrics_over_nothing_raise_a_clear_error(metric):
    from attnsurvey.seq2seq import sequence_accuracy, token_accuracy
    from attnsurvey.training import accuracy

    calls = {
        "accuracy": lambda: accuracy(torch.zeros(0, 5), torch.zeros(0, dtype=torch.long)),
        "accuracy (all ignored)": lambda: accuracy(torch.zeros(3, 5), torch.full((3,), -1), ignore_index=-1),
        "token_accuracy": lambda: token_accuracy(torch.zeros(0, 3, 5), torch.zeros(0, 3, dtype=torch.long)),
        "token_accuracy (all PAD)": lambda: token_accuracy(torch.zeros(2, 3, 5), torch.zeros(2, 3, dtype=torch.long)),
        "sequence_accuracy": lambda: sequence_accuracy(
            torch.zeros(0, 3, dtype=torch.long), torch.zeros(0, 3, dtype=torch.long)
        ),
    }
    with pytest.raises(ValueError, match="undefined over no items"):  # was NaN
        calls[metric]()


def test_moving_average_baseline_survives_an_empty_batch():
    from attnsurvey.general_mechanisms.alignment import MovingAverageBaseline

    b = MovingAverageBaseline(momentum=0.5)
    b.update(torch.full((3,), 2.0))
    assert float(b.update(torch.zeros(0))) == 2.0
    assert float(b.update(torch.full((3,), 4.0))) == 2.0 and float(b.value) == 3.0  # was NaN for good


@pytest.mark.parametrize(
    "case",
    [
        "MultiHopAttention n_hops=0",
        "SelfAttention d_k=0",
        "CosineScore s=0",
        "CosineScore s=-1",
        "attend scale=inf",
        "attend scale=nan",
    ],
)
def test_invalid_hyper_parameters_name_their_symbol(case):
    from attnsurvey.attention import attend
    from attnsurvey.general_mechanisms.scoring import CosineScore
    from attnsurvey.query_related.multihop import MultiHopAttention
    from attnsurvey.query_related.types import SelfAttention

    X = torch.zeros(1, 2, 4)
    calls = {
        "MultiHopAttention n_hops=0": (lambda: MultiHopAttention(4, 4, 0), "n_hops"),
        "SelfAttention d_k=0": (lambda: SelfAttention(4, d_k=0), "d_k"),
        "CosineScore s=0": (lambda: CosineScore(scale=0.0), "temperature"),
        "CosineScore s=-1": (lambda: CosineScore(scale=-1.0), "temperature"),
        "attend scale=inf": (lambda: attend(X, X, X, scale=float("inf")), "scale"),
        "attend scale=nan": (lambda: attend(X, X, X, scale=float("nan")), "scale"),
    }
    call, symbol = calls[case]
    with pytest.raises(ValueError, match=symbol):  # each was accepted silently
        call()


@pytest.mark.parametrize(
    "dtype,scale", [(torch.float32, 1e20), (torch.float32, 1e30), (torch.float16, 300.0), (torch.float64, 1e160)]
)
def test_norm_based_scores_do_not_overflow(dtype, scale):
    from attnsurvey.general_mechanisms.scoring import cosine_score, euclidean_score

    g = torch.Generator().manual_seed(0)
    Q, K = (
        torch.randn(2, 3, 4, generator=g, dtype=torch.float64),
        torch.randn(2, 5, 4, generator=g, dtype=torch.float64),
    )
    tol = 1e-2 if dtype == torch.float16 else 1e-5
    cos = cosine_score((Q * scale).to(dtype), (K * scale).to(dtype))  # was 0 (norms overflowed to inf)
    torch.testing.assert_close(cos.double(), cosine_score(Q, K), rtol=tol, atol=tol)
    dist = euclidean_score((Q * scale).to(dtype), (K * scale).to(dtype))  # was -inf
    assert torch.isfinite(dist).all()
    torch.testing.assert_close(dist.double() / scale, euclidean_score(Q, K), rtol=tol, atol=tol)


@pytest.mark.parametrize("kind", ["numpy", "list", "int tensor", "python float", "mixed dtypes"])
def test_non_tensor_inputs_raise_a_type_error_naming_the_argument(kind):
    from attnsurvey.attention import attend
    from attnsurvey.query_related.types import mean_pool

    X = torch.randn(2, 3, 4)
    bad = {
        "numpy": X.numpy(),
        "list": X.tolist(),
        "int tensor": X.long(),
        "python float": 1.0,
        "mixed dtypes": X.double(),
    }[kind]
    with pytest.raises(TypeError, match="K" if kind != "mixed dtypes" else "dtype mismatch") as info:
        attend(X, bad, X)
    assert isinstance(info.value, ValueError)  # still a ValueError for code written against the old error
    if kind != "mixed dtypes":
        with pytest.raises(TypeError, match=r"F must be a (torch\.Tensor|floating-point tensor)"):
            mean_pool(bad)


def test_multidimensional_attention_keeps_masked_values_inert():
    from attnsurvey.general_mechanisms.dimensionality import multidimensional_attend

    bad, F, mask = _poisoned()
    g = torch.Generator().manual_seed(1)
    Q = torch.randn(2, 3, 4, generator=g, dtype=torch.float64)
    W1, W2, W_d = (torch.randn(4, 4, generator=g, dtype=torch.float64) for _ in range(3))
    m = mask[:, None, :].expand(2, 3, 5)
    c_bad, _ = multidimensional_attend(Q, bad, bad, W1, W2, W_d, mask=m)
    c_clean, _ = multidimensional_attend(Q, F, F, W1, W2, W_d, mask=m)
    torch.testing.assert_close(c_bad, c_clean)  # was NaN


@pytest.mark.parametrize(
    "fn", ["mean_pool", "learned_query_attention", "queryless_attention", "source2token", "mean_key", "target_pooling"]
)
def test_pooling_accepts_a_shared_1d_mask(fn):
    from attnsurvey.feature_related import co_attention as co
    from attnsurvey.feature_related import rotatory as ro
    from attnsurvey.query_related import types as ty

    bad, F, mask = _poisoned()
    g = torch.Generator().manual_seed(2)
    w, W, W2, _W3 = (
        torch.randn(4, generator=g, dtype=torch.float64),
        *(torch.randn(4, 4, generator=g, dtype=torch.float64) for _ in range(3)),
    )
    call = {
        "mean_pool": lambda X, m: ty.mean_pool(X, m),
        "learned_query_attention": lambda X, m: ty.learned_query_attention(X, X, w, m)[0],
        "queryless_attention": lambda X, m: ty.queryless_attention(X, X, W, w, w, m)[0],
        "source2token": lambda X, m: ty.source2token(X, W, W2, w, mask=m)[0],
        "mean_key": lambda X, m: co.mean_key(X, m),
        "target_pooling": lambda X, m: ro.target_pooling(X, m),
    }[fn]
    shared = mask[0]  # (n_f,): one mask for the whole batch (crashed with IndexError/ValueError before)
    torch.testing.assert_close(call(bad, shared), call(F, mask))


def test_permuted_attention_accepts_empty_weights():
    from attnsurvey.evaluation.intrinsic import permutation_output_change, permuted_attention

    assert permuted_attention(torch.zeros(2, 0)).shape == (2, 0)  # was a reshape RuntimeError
    assert permuted_attention(torch.zeros(0, 4)).shape == (0, 4)
    assert torch.equal(permutation_output_change(lambda a: a.sum(-1, keepdim=True), torch.zeros(2, 0)), torch.zeros(2))


@pytest.mark.parametrize("fn", ["multidimensional_attend", "memory_hop", "multi_hop_attention", "queryless_attention"])
def test_masked_nan_keeps_gradients_finite(fn):
    from attnsurvey.general_mechanisms.dimensionality import multidimensional_attend
    from attnsurvey.general_mechanisms.scoring import dot_score
    from attnsurvey.query_related.multihop import memory_hop, multi_hop_attention
    from attnsurvey.query_related.types import queryless_attention

    bad, _, mask = _poisoned()
    g = torch.Generator().manual_seed(4)
    q = torch.randn(2, 4, generator=g, dtype=torch.float64, requires_grad=True)
    W = torch.randn(4, 4, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, generator=g, dtype=torch.float64)
    K = bad.clone().requires_grad_(True)
    out = {
        "multidimensional_attend": lambda: multidimensional_attend(q[:, None], K, K, W, W, W, mask=mask[:, None])[0],
        "memory_hop": lambda: memory_hop(q, K, K, mask)[0],
        "multi_hop_attention": lambda: multi_hop_attention(
            q, K, K, lambda a, k: dot_score(a[..., :4], k), 2, mask=mask
        )[0],
        "queryless_attention": lambda: queryless_attention(K, K, W, w, w, mask)[0],
    }[fn]()
    out.sum().backward()
    assert K.grad is not None  # every mechanism reads K: a gradient must arrive, or the check below is empty
    for t in (q, W, K):  # 0 * NaN in the backward pass made these NaN before
        assert t.grad is None or torch.isfinite(t.grad).all()


@pytest.mark.parametrize(
    "fn", ["self_attention", "shared_qk_attention", "dense_synthesizer_weights", "LiteTransformerBlock"]
)
def test_a_padded_token_holding_nan_keeps_gradients_finite(fn):
    from attnsurvey.query_related.types import self_attention
    from attnsurvey.transformer.lite import LiteTransformerBlock
    from attnsurvey.transformer.reformer import shared_qk_attention
    from attnsurvey.transformer.synthesizer import dense_synthesizer_weights

    bad, F, mask = _poisoned()
    g = torch.Generator().manual_seed(5)
    W = torch.randn(4, 4, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(4, dtype=torch.float64)
    W5, b5 = torch.randn(5, 4, generator=g, dtype=torch.float64), torch.zeros(5, dtype=torch.float64)
    attn = mask[:, None, :].expand(2, 5, 5)
    torch.manual_seed(0)
    blk = LiteTransformerBlock(4, 1, 8).double()
    X = bad.clone().requires_grad_(True)
    out = {
        "self_attention": lambda: self_attention(X, W, W, W, attn)[0],
        "shared_qk_attention": lambda: shared_qk_attention(X, X, attn)[0],
        "dense_synthesizer_weights": lambda: dense_synthesizer_weights(X, W, b, W5, b5, attn),
        "LiteTransformerBlock": lambda: blk(X, key_padding_mask=mask)[0],
    }[fn]()
    out[:, :-1].sum().backward()  # the real tokens' outputs
    assert X.grad is not None  # the gradient reaches the input, so the check below is not empty
    grads = [X.grad, W.grad] + [p.grad for p in blk.parameters()]
    assert all(t is None or torch.isfinite(t).all() for t in grads)  # the padded NaN token made them NaN


def _padded_modules():
    """Modules that project or score their features, each called on (F, key mask) -> a tensor of real outputs.

    Every case masks the last of n = 4 positions; ``rows`` drops the padded token's own output row in
    self-attention, where it is the token's own business.
    """
    from attnsurvey import general_model as gm
    from attnsurvey.feature_related import co_attention as co
    from attnsurvey.feature_related import levels as lv
    from attnsurvey.general_mechanisms import alignment as al
    from attnsurvey.general_mechanisms import structured as st
    from attnsurvey.query_related import multihop as mo
    from attnsurvey.query_related import types as ty
    from attnsurvey.transformer import synthesizer as sy

    d = 4
    q = torch.randn(2, d, generator=torch.Generator().manual_seed(7), dtype=torch.float64)

    def co_out(o):
        return torch.cat([o.c] if hasattr(o, "fine") else [o.c1, o.c2], -1)

    return {
        "GeneralAttention": (lambda: gm.GeneralAttention(d, d), lambda m, F, k: m(q, F, k)[0]),
        "TaskModel": (lambda: gm.TaskModel(d, d, 3, d=6), lambda m, F, k: m(F, q, k)[0]),
        "StructuredAttention": (lambda: st.StructuredAttention(d, d), lambda m, F, k: m(q, F, F, k)[0]),
        "LocalAttention": (lambda: al.LocalAttention(d, d, 1.0), lambda m, F, k: m(q, F, F, None, k)[0]),
        "ReinforcedAlignment": (
            lambda: al.ReinforcedAlignment(d, d),
            lambda m, F, k: torch.cat([m(q, F, F, mask=k)[0], m(q, F, F, mask=k)[3][:, None]], -1),
        ),
        "HierarchicalAttention": (
            lambda: lv.HierarchicalAttention(d, d),
            lambda m, F, k: m(F.reshape(2, 2, 2, d), k.reshape(2, 2, 2)).c,
        ),
        "AttentionViaAttention": (lambda: lv.AttentionViaAttention(d, d, d), lambda m, F, k: m(q, F, F, k, k).c),
        "MultiHopAttention": (lambda: mo.MultiHopAttention(d, d, 2), lambda m, F, k: m(q, F, k)[0]),
        "SelfAttentionUpdate": (
            lambda: ty.SelfAttentionUpdate(d),
            lambda m, F, k: m(F, k[:, None, :].expand(2, 4, 4))[0][:, :-1],
        ),
        "DenseSynthesizer": (
            lambda: sy.DenseSynthesizer(d, 4),
            lambda m, F, k: m(F, k[:, None, :].expand(2, 4, 4))[0][:, :-1],
        ),
        "RandomSynthesizer": (lambda: sy.RandomSynthesizer(d, 4), lambda m, F, k: m(F, k[0].expand(4, 4))[0][:, :-1]),
        **{
            f"co-attention {name}": (mk, lambda m, F, k: co_out(m(F, F[:, :3], mask1=k, mask2=k[:, :3])))
            for name, mk in {
                "Alternating": lambda: co.AlternatingCoAttention(d, d, 6),
                "Interactive": lambda: co.InteractiveCoAttention(d, d, 6),
                "Parallel additive": lambda: co.ParallelCoAttention(d, d, 6),
                "Parallel concat": lambda: co.ParallelCoAttention(d, d, 6, affinity="concat"),
                "Parallel max": lambda: co.ParallelCoAttention(d, d, 6, scores="max"),
                "MultiGrained": lambda: co.MultiGrainedCoAttention(d, d, 6),
            }.items()
        },
    }


@pytest.mark.parametrize("name", list(_padded_modules()))
def test_a_padded_slot_holding_nan_is_inert_in_module_outputs_and_parameter_gradients(name):
    """Review 2, B: the padded slot's content must not matter, to the outputs or to any parameter's gradient."""
    make, call = _padded_modules()[name]
    bad, F, _ = _poisoned(2, 4, 4)
    mask = torch.ones(2, 4, dtype=torch.bool)
    mask[:, -1] = False
    results = []
    for X in (F, bad):  # the same module on a finite padded slot (the oracle) and on a NaN one
        torch.manual_seed(0)
        m = make().double().eval()
        out = call(m, X, mask)
        out.sum().backward()
        results.append((out.detach(), {k: p.grad for k, p in m.named_parameters() if p.grad is not None}))
    (ref, ref_grads), (out, grads) = results
    torch.testing.assert_close(out, ref)
    assert ref_grads.keys() == grads.keys() and ref_grads  # some parameter gets a gradient, so the check is not empty
    for k in ref_grads:  # 0 * NaN in the backward pass made these NaN (an output too, for the synthesizers)
        torch.testing.assert_close(grads[k], ref_grads[k], msg=k)


# --------------------------------------------------------------------------- review 3: error messages


def _float_mask_cases():
    """``name -> (call(mask), boolean mask, symbol)``: functions documented to take a boolean mask."""
    from attnsurvey.feature_related import co_attention as co
    from attnsurvey.feature_related import levels as lv
    from attnsurvey.general_mechanisms.scoring import dot_score
    from attnsurvey.general_model import GeneralAttention
    from attnsurvey.query_related import types as ty
    from attnsurvey.transformer import reformer as rf
    from attnsurvey.transformer import relative as rl

    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)
    X, W, q = r(1, 4, 4), [r(4, 4) for _ in range(3)], r(1, 4)
    attn = torch.tensor([[True, True, False, False]] * 4)[None]  # (1, n_q, n_f): keys 2, 3 masked
    keys = attn[:, 0]  # (1, n_f)
    ava = (r(1, 1, 4), r(1, 4, 4), r(1, 4, 3), r(4, 4), r(6, 4), r(10, 3), r(6, 3))
    torch.manual_seed(0)
    general = GeneralAttention(4, 4)
    return {
        "self_attention": (lambda m: ty.self_attention(X, *W, m)[1], attn, "mask"),
        "attend_vector": (lambda m: co.attend_vector(q, X, X, dot_score, m)[1], keys, "mask"),
        "attention_via_attention mask_w": (
            lambda m: lv.attention_via_attention(*ava, mask_w=m).a_w,
            keys[:, None],
            "mask_w",
        ),
        "attention_via_attention mask_c": (
            lambda m: lv.attention_via_attention(*ava, mask_c=m).a_c,
            keys[:, None],
            "mask_c",
        ),
        "relative_position_attention": (
            lambda m: rl.relative_position_attention(X, X, X, r(5, 4), r(5, 4), m)[1],
            attn,
            "mask",
        ),
        "gaussian_biased_attention": (lambda m: rl.gaussian_biased_attention(X, X, X, r(4, 4), m)[1], attn, "mask"),
        "shared_qk_attention": (lambda m: rf.shared_qk_attention(X, X, m)[1], attn, "mask"),
        "GeneralAttention": (lambda m: general(q, X, m)[1], keys, "mask"),
    }


@pytest.mark.parametrize(
    "name",
    [
        "self_attention",
        "attend_vector",
        "attention_via_attention mask_w",
        "attention_via_attention mask_c",
        "relative_position_attention",
        "gaussian_biased_attention",
        "shared_qk_attention",
        "GeneralAttention",
    ],
)
def test_a_float_mask_is_refused_where_the_contract_is_boolean(name):
    """Review 3, 1: a 0/1 float mask was added to the scores as a bias (weight on 'masked' keys), silently."""
    call, mask, symbol = _float_mask_cases()[name]
    a = call(mask)
    assert torch.equal(a[..., 2:], torch.zeros_like(a[..., 2:]))  # the boolean mask selects: no weight on keys 2, 3
    torch.testing.assert_close(a.sum(-1), torch.ones_like(a.sum(-1)))
    who = name.split()[0]
    with pytest.raises(ValueError, match=rf"^{who}: {symbol} must be a boolean tensor .*dtype=torch.float32"):
        call(mask.float())


def _shape_cases():
    """``name -> (call, message)``: a bad mask whose error showed a shape the caller never passed."""
    from attnsurvey.feature_related import co_attention as co
    from attnsurvey.general_mechanisms.scoring import dot_score
    from attnsurvey.general_model import GeneralAttention
    from attnsurvey.query_related import capsule as cp
    from attnsurvey.query_related import multihead as mh
    from attnsurvey.query_related.torch_mha import TorchMultiheadAttention

    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)
    B, n_q, n_f = 2, 3, 5
    K, q = r(B, n_f, 4), r(B, 4)
    wide = torch.ones(B, n_f + 1, dtype=torch.bool)  # (2, 6): one key too many
    torch.manual_seed(0)
    mha, dropin = mh.MultiHeadAttention(4, 2), TorchMultiheadAttention(4, 2, batch_first=True)
    Xq = r(B, n_q, 4)
    shown = r"mask of shape \(2, 6\) does not broadcast to \(2, 5\) \(\.\.\., n_f\)"
    return {
        "attend_vector": (lambda: co.attend_vector(q, K, K, dot_score, wide), shown),
        "capsule_attention": (lambda: cp.capsule_attention(K, K, r(3, 4), r(3, 4), r(3), wide), shown),
        "GeneralAttention": (lambda: GeneralAttention(4, 4)(q, K, wide), shown),
        "MultiHeadAttention key_padding_mask": (
            lambda: mha(Xq, K, key_padding_mask=wide),
            r"key_padding_mask of shape \(2, 6\) does not broadcast to \(2, 5\) \(\.\.\., n_f\)",
        ),
        "drop-in key_padding_mask": (
            lambda: dropin(Xq, K, K, key_padding_mask=wide),
            r"key_padding_mask of shape \(2, 6\) does not broadcast to \(2, 5\) \(\.\.\., n_f\)",
        ),
        "drop-in unbatched key_padding_mask": (
            lambda: dropin(Xq[0], K[0], K[0], key_padding_mask=wide[0]),
            r"key_padding_mask of unbatched inputs must have shape \(S,\) = \(5,\), got \(6,\)",
        ),
        "drop-in 3-D attn_mask (3, L, S)": (  # was a reshape RuntimeError
            lambda: dropin(Xq, K, K, attn_mask=torch.zeros(3, n_q, n_f, dtype=torch.bool)),
            r"3-D attn_mask must have shape \(B \* num_heads, L, S\) = \(4, 3, 5\) .*got \(3, 3, 5\)",
        ),
        "drop-in 3-D attn_mask (6, L, S)": (  # was reported as a mask of shape (3, 2, 3, 5)
            lambda: dropin(Xq, K, K, attn_mask=torch.zeros(6, n_q, n_f, dtype=torch.bool)),
            r"3-D attn_mask must have shape \(B \* num_heads, L, S\) = \(4, 3, 5\) .*got \(6, 3, 5\)",
        ),
        "drop-in 2-D attn_mask": (  # was reported as a mask of shape (1, 3, 6)
            lambda: dropin(Xq, K, K, attn_mask=torch.zeros(n_q, n_f + 1, dtype=torch.bool)),
            r"2-D attn_mask must have shape \(L, S\) = \(3, 5\), got \(3, 6\)",
        ),
        "mean_key": (lambda: co.mean_key(K, wide), r"^mask must have shape \(\.\.\., n_f\) with n_f=5, got \(2, 6\)$"),
    }


@pytest.mark.parametrize(
    "name",
    [
        "attend_vector",
        "capsule_attention",
        "GeneralAttention",
        "MultiHeadAttention key_padding_mask",
        "drop-in key_padding_mask",
        "drop-in unbatched key_padding_mask",
        "drop-in 3-D attn_mask (3, L, S)",
        "drop-in 3-D attn_mask (6, L, S)",
        "drop-in 2-D attn_mask",
        "mean_key",
    ],
)
def test_a_bad_mask_is_reported_with_the_shape_the_caller_passed(name):
    """Review 3, 4 and 6: messages showed internally reshaped masks ((2, 1, 6), (2, 1, 1, 6)) or came from torch."""
    call, message = _shape_cases()[name]
    with pytest.raises(ValueError, match=message):
        call()


def test_the_dropin_still_takes_every_mask_shape_torch_takes():
    """The shape checks above refuse nothing torch accepts: (L, S), (B * num_heads, L, S) and unbatched (S,)."""
    from torch import nn

    from attnsurvey.query_related.torch_mha import TorchMultiheadAttention

    torch.manual_seed(0)
    ref = nn.MultiheadAttention(4, 2, batch_first=True, dtype=torch.float64).eval()
    ours = TorchMultiheadAttention.from_torch(ref)
    g = torch.Generator().manual_seed(1)
    Xq, Xk = (
        torch.randn(2, 3, 4, generator=g, dtype=torch.float64),
        torch.randn(2, 5, 4, generator=g, dtype=torch.float64),
    )
    per_head = torch.rand(4, 3, 5, generator=g) > 0.6
    per_head[..., 0] = False
    for kw in ({"attn_mask": per_head}, {"attn_mask": per_head[0]}):
        torch.testing.assert_close(ours(Xq, Xk, Xk, **kw)[0], ref(Xq, Xk, Xk, **kw)[0])
    pad = torch.tensor([False, False, False, True, True])
    torch.testing.assert_close(
        ours(Xq[0], Xk[0], Xk[0], key_padding_mask=pad)[0], ref(Xq[0], Xk[0], Xk[0], key_padding_mask=pad)[0]
    )


def _boundary_cases():
    """``name -> (call, error type, message)``: errors that came from deep inside torch (or named the wrong symbol)."""
    from attnsurvey.evaluation import extrinsic as ex
    from attnsurvey.evaluation import intrinsic as it
    from attnsurvey.masking import masked_log_softmax, masked_softmax
    from attnsurvey.query_related import multihead as mh
    from attnsurvey.transformer import transformer_xl as xl

    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)
    B, n_q, n_f, d, h = 2, 3, 5, 4, 2
    Q, K = r(B, n_q, d), r(B, n_f, d)
    W = (r(h * 2, d), r(h * 2, d), r(h * 3, d), r(d, h * 3))
    mha = lambda **kw: mh.multi_head_attention(Q, K, K, *W, h, **kw)
    xl_W = [r(d, d) for _ in range(5)]
    a = torch.softmax(r(3, 5), -1)
    boxes = torch.tensor([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 2.0, 2.0], [1.0, 1.0, 2.0, 3.0]])
    memory = r"memory \(\.\.\., n_m, d_f\) is prepended to F_k, so it needs the batch axes \(2,\) and the width d_f=4"
    return {
        "memory batch": (lambda: mha(memory=r(3, 2, d)), ValueError, memory + r".*got memory \(3, 2, 4\)"),
        "memory width": (lambda: mha(memory=r(B, 2, d + 1)), ValueError, memory + r".*got memory \(2, 2, 5\)"),
        "memory rank": (
            lambda: mha(memory=r(d)),
            ValueError,
            r"memory must have shape \(\.\.\., n_m, d_f\), got shape \(4,\)",
        ),
        "bias_k size": (
            lambda: mha(bias_k=r(5), bias_v=r(6)),
            ValueError,
            r"bias_k must have shape \(h\*d_k,\) = \(4,\), got \(5,\)",
        ),
        "bias_v size": (
            lambda: mha(bias_k=r(4), bias_v=r(5)),
            ValueError,
            r"bias_v must have shape \(h\*d_v,\) = \(6,\), got \(5,\)",
        ),
        "xl memory batch": (
            lambda: xl.xl_attention(r(B, 5, d), r(3, 3, d), *xl_W, r(h, 2), r(h, 2), h),
            ValueError,
            r"memory M \(\.\.\., n_m, d_model\) needs the batch axes \(2,\) of X \(2, 5, 4\), got M \(3, 3, 4\)",
        ),
        "masked_softmax int e": (
            lambda: masked_softmax(torch.ones(2, 3, dtype=torch.long)),
            TypeError,
            r"e must be a floating-point tensor .*got dtype=torch.int64",
        ),
        "masked_log_softmax int e": (
            lambda: masked_log_softmax(torch.ones(2, 3, dtype=torch.long), torch.ones(2, 3, dtype=torch.bool)),
            TypeError,
            r"e must be a floating-point tensor .*got dtype=torch.int64",
        ),
        "perplexity float targets": (
            lambda: ex.perplexity(r(3, 4, 10), torch.zeros(3, 4)),
            TypeError,
            r"targets must be a tensor of integer token ids \(torch.long\), got dtype=torch.float32",
        ),
        "supervised loss y length": (
            lambda: it.supervised_attention_loss(r(3, 2), torch.tensor([0, 1]), a, a, 0.5),
            ValueError,
            r"y must hold one label per row of logits \(\.\.\., d_y\), shape \(3,\), got \(2,\)",
        ),
        "box_iou no broadcast": (
            lambda: ex.box_iou(boxes, boxes[:2]),
            ValueError,
            r"batch dimensions of box_a \(\.\.\., 4\) \(3, 4\) and box_b \(\.\.\., 4\) \(2, 4\) do not broadcast",
        ),
    }


@pytest.mark.parametrize(
    "name",
    [
        "memory batch",
        "memory width",
        "memory rank",
        "bias_k size",
        "bias_v size",
        "xl memory batch",
        "masked_softmax int e",
        "masked_log_softmax int e",
        "perplexity float targets",
        "supervised loss y length",
        "box_iou no broadcast",
    ],
)
def test_errors_from_inside_torch_are_caught_at_the_boundary(name):
    """Review 3, 4 and 5: torch.cat / expand / reshape / kernel errors now name the symbol and the shapes seen."""
    call, kind, message = _boundary_cases()[name]
    with pytest.raises(kind, match=message):
        call()


def test_a_loss_refuses_targets_that_only_flatten_to_the_right_length():
    """(B, n) targets given as (n, B) flatten to the same length and would be paired with the wrong positions."""
    from attnsurvey.training import cross_entropy_mean

    logits = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(0))
    targets = torch.tensor([[0, 1, 2], [3, 4, 0]])
    ref = torch.nn.functional.cross_entropy(logits.reshape(6, 5), targets.reshape(6))
    torch.testing.assert_close(cross_entropy_mean(logits, targets), ref)
    with pytest.raises(
        ValueError, match=r"targets must have the shape of logits without its class axis, \(2, 3\).*got \(3, 2\)"
    ):
        cross_entropy_mean(logits, targets.T.contiguous())


def _non_boolean_mask_cases():
    """``name -> (call taking a mask, message)``: every boolean-mask contract refuses a float mask the same way."""
    from attnsurvey import masking as mk
    from attnsurvey.evaluation import extrinsic as ex
    from attnsurvey.evaluation import intrinsic as it
    from attnsurvey.feature_related import co_attention as co
    from attnsurvey.feature_related import levels as lv
    from attnsurvey.query_related import multihead as mh
    from attnsurvey.transformer.lite import depthwise_conv

    X, K = rand(2, 4, 6), rand(2, 4, 6, seed=1)
    a, S = torch.full((2, 4), 0.25), torch.ones(2, 4, dtype=torch.bool)
    scores = torch.Size((2, 3, 4))
    torch.manual_seed(0)
    mha = mh.MultiHeadAttention(6, 2)
    return {
        "check_mask": (lambda m: mk.check_mask(m, scores), "mask", "may attend"),
        "check_key_padding_mask": (lambda m: mk.check_key_padding_mask(m, scores), "key_padding_mask", "may attend"),
        "additive_mask": (lambda m: mk.additive_mask(m), "mask", "may attend"),
        "masked_mean": (lambda m: mk.masked_mean(X, m), "mask", "keep"),
        "MultiHeadAttention key_padding_mask": (lambda m: mha(X, key_padding_mask=m), "key_padding_mask", "may attend"),
        "mean_key": (lambda m: co.mean_key(K, m), "mask", "may attend"),
        "scaled_word_weights": (
            lambda m: lv.scaled_word_weights(torch.rand(2, 4), torch.rand(2), m),
            "word_mask",
            "real word",
        ),
        "depthwise_conv": (lambda m: depthwise_conv(X, rand(6, 3, seed=2), mask=m[0]), "mask", "a real token"),
        "attention_correctness": (lambda m: it.attention_correctness(a, m), "G", "region in the ground truth"),
        "alignment_error_rate": (
            lambda m: it.alignment_error_rate(m, S),
            r"alignment A \(\.\.\., n_tgt, n_src\)",
            "a link",
        ),
        "alignment_loss": (lambda m: it.alignment_loss(a, m), "gold", "a gold link"),
        "mask_iou": (lambda m: ex.mask_iou(m, S), "mask_a", "the pixel lies in the region"),
    }


@pytest.mark.parametrize("name", list(_non_boolean_mask_cases()))
def test_a_non_boolean_mask_is_refused_by_the_one_check(name):
    """masking.check_boolean is the one refusal: it names the symbol, the meaning of True and the dtype seen."""
    call, symbol, meaning = _non_boolean_mask_cases()[name]
    mask = torch.ones(2, 4, dtype=torch.bool)
    if name.startswith(("check_mask", "check_key")):
        mask = mask[:, None, :] if name == "check_mask" else mask
    call(mask)  # the boolean mask is accepted
    with pytest.raises(
        ValueError, match=rf"{symbol} must be a boolean tensor \(True = {meaning}\), got dtype=torch\.float32$"
    ):
        call(mask.float())
    with pytest.raises(ValueError, match=rf"{symbol} must be a boolean tensor \(True = {meaning}\), got list$"):
        call(mask.tolist())
