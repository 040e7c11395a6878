"""Linear attention, decay and gates (attnsurvey.beyond.linear_attention): each form against a double loop, the three
forms equal, gates against the recurrence, inert masked keys, errors, gradients, the layer and the cost arithmetic."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnsurvey.beyond.linear_attention as la
from attnsurvey.attention import attend

from .helpers import assert_trusting_keeps_the_bits

pytestmark = pytest.mark.usefixtures("one_thread")

F64 = torch.float64
FORMS = ("parallel", "recurrent", "chunked")


def elu1(x: torch.Tensor) -> torch.Tensor:
    """elu(x) + 1 written out: x + 1 for x > 0, exp(x) otherwise."""
    return torch.where(x > 0, x + 1, torch.exp(torch.clamp(x, max=0.0)))


PHI = {"elu+1": elu1, "identity": lambda x: x}


def oracle(Q, K, V, phi, log_gate=None, normalise=True, keep=None):
    """Causal (gated) linear attention by a double loop over positions, one batch row at a time, float64."""
    *batch, n, _ = Q.shape
    out = torch.zeros(*batch, n, V.shape[-1], dtype=F64)
    for idx in torch.cartesian_prod(*(torch.arange(b) for b in batch)).reshape(-1, len(batch)).tolist():
        idx = tuple(idx)
        for i in range(n):
            num, den = torch.zeros(V.shape[-1], dtype=F64), 0.0
            for j in range(i + 1):
                if keep is not None and not bool(keep[idx][j]):
                    continue
                decay = 1.0 if log_gate is None else math.exp(sum(float(log_gate[idx][m]) for m in range(j + 1, i + 1)))
                w = float(phi(Q[idx][i]) @ phi(K[idx][j])) * decay
                num, den = num + w * V[idx][j], den + w
            if keep is None or bool(keep[idx][i]):  # a padded position's own output is 0
                out[idx][i] = (num / den if den != 0 else 0 * num) if normalise else num
    return out


def qkv(seed: int, batch=(2, 3), n=7, d_k=3, d_v=4):
    g = torch.Generator().manual_seed(seed)
    Q, K, V = (torch.randn(*batch, n, d, generator=g, dtype=F64) for d in (d_k, d_k, d_v))
    log_gate = -torch.rand(*batch, n, generator=g, dtype=F64) * 2
    return Q, K, V, log_gate


def run(form, Q, K, V, C=3, **kw):
    return la.linear_attention_forms(Q, K, V, form, C, **kw)


@pytest.mark.catalog("extra:linear-attention", "extra:linear-attention-chunked", "extra:gated-decay")
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("feature_map", ["elu+1", "identity"])
@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("normalise", [True, False])
def test_each_form_matches_the_double_loop(form, feature_map, gated, normalise):
    Q, K, V, lg = qkv(0)
    lg = lg if gated else None
    want = oracle(Q, K, V, PHI[feature_map], lg, normalise)
    got = run(form, Q, K, V, feature_map=feature_map, log_gate=lg, normalise=normalise)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.catalog("extra:linear-attention-chunked")
@settings(max_examples=40)
@given(
    n=st.integers(0, 17),
    C=st.integers(1, 20),
    gated=st.booleans(),
    normalise=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_the_three_forms_agree(n, C, gated, normalise, seed):
    Q, K, V, lg = qkv(seed, batch=(2,), n=n)
    kw = {"log_gate": lg if gated else None, "normalise": normalise}
    ref = la.linear_attention(Q, K, V, **kw)
    assert ref.shape == (2, n, 4)
    for form in ("recurrent", "chunked"):
        torch.testing.assert_close(run(form, Q, K, V, C, **kw), ref, rtol=1e-11, atol=1e-11)


@pytest.mark.catalog("extra:gated-decay")
def test_strong_decay_uses_differences_of_log_gates():
    """Gates of exp(-50) over 40 steps: cumulative products underflow to 0 and their ratios are 0/0."""
    Q, K, V, _ = qkv(1, batch=(1,), n=40)
    lg = torch.full((1, 40), -50.0, dtype=F64)
    P = torch.cumprod(torch.exp(lg), -1)
    naive = P[..., :, None] / P[..., None, :]
    assert torch.isnan(naive).any()  # the naive decay matrix is broken here
    want = oracle(Q, K, V, elu1, lg)
    for form in FORMS:
        torch.testing.assert_close(run(form, Q, K, V, 7, log_gate=lg), want, rtol=1e-10, atol=1e-12)
    D = la.decay_matrix(lg[..., :5])
    assert torch.isfinite(D).all() and bool((D.diagonal(dim1=-2, dim2=-1) == 1).all())
    torch.testing.assert_close(D[0, 3, 1], torch.tensor(math.exp(-100.0), dtype=F64))
    assert bool((D.triu(1) == 0).all())


@pytest.mark.catalog("extra:gated-decay")
def test_decay_matrix_by_hand():
    g = torch.tensor([0.5, 0.25, 0.8], dtype=F64)
    D = la.decay_matrix(torch.log(g))
    want = torch.tensor([[1, 0, 0], [0.25, 1, 0], [0.25 * 0.8, 0.8, 1]], dtype=F64)
    torch.testing.assert_close(D, want)


@pytest.mark.catalog("extra:gated-decay", "extra:linear-attention")
def test_step_by_step_decoding_continues_a_chunked_prefill():
    """Prefill 5 positions in chunks, then decode 4 steps with the state: the same outputs as one parallel call."""
    Q, K, V, lg = qkv(2, n=9)
    full = la.linear_attention(Q, K, V, log_gate=lg)
    out, state = la.linear_attention_chunked(Q[..., :5, :], K[..., :5, :], V[..., :5, :], 2, log_gate=lg[..., :5])
    outs = [out]
    for t in range(5, 9):
        o, state = la.linear_attention_step(Q[..., t, :], K[..., t, :], V[..., t, :], state, log_gate=lg[..., t])
        outs.append(o[..., None, :])
    torch.testing.assert_close(torch.cat(outs, -2), full, rtol=1e-11, atol=1e-11)
    _, rec_state = la.linear_attention_recurrent(Q, K, V, log_gate=lg)
    for a, b in zip(state, rec_state, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.catalog("extra:gated-decay")
def test_state_is_the_gated_recurrence():
    """After n steps S = sum_j prod_{l>j} g_l phi(k_j) v_j^T and z likewise, computed here by a loop."""
    Q, K, V, lg = qkv(3, batch=(), n=6)
    _, (S, z) = la.linear_attention_recurrent(Q, K, V, log_gate=lg)
    S_want, z_want = torch.zeros(3, 4, dtype=F64), torch.zeros(3, dtype=F64)
    for t in range(6):
        g = math.exp(float(lg[t]))
        S_want = g * S_want + torch.outer(elu1(K[t]), V[t])
        z_want = g * z_want + elu1(K[t])
    torch.testing.assert_close(S, S_want)
    torch.testing.assert_close(z, z_want)


def test_fixed_decay_is_retnets_gamma():
    lg = la.retnet_log_decay(3)
    torch.testing.assert_close(torch.exp(lg), torch.tensor([1 - 2**-5, 1 - 2**-6, 1 - 2**-7], dtype=F64))


@pytest.mark.catalog("extra:linear-attention")
@pytest.mark.parametrize("form", FORMS)
def test_nan_at_padded_positions_is_inert_and_unseen_rows_are_zero(form):
    Q, K, V, lg = qkv(4, n=6)
    keep = torch.ones(2, 3, 6, dtype=torch.bool)
    keep[..., 0] = False  # the first query sees no key
    keep[..., 3] = False
    K2, V2 = K.clone(), V.clone()
    K2[..., 3, :], V2[..., 3, :] = float("nan"), float("inf")
    K2[..., 0, :], Q2 = float("nan"), Q.clone()
    Q2[..., 3, :] = float("nan")
    Q2, K2, V2 = (t.clone().requires_grad_() for t in (Q2, K2, V2))
    out = run(form, Q2, K2, V2, 4, log_gate=lg, key_padding_mask=keep)
    torch.testing.assert_close(out, oracle(Q, K, V, elu1, lg, keep=keep), rtol=1e-10, atol=1e-12)
    assert bool((out[..., 0, :] == 0).all()) and bool((out[..., 3, :] == 0).all())
    out.sum().backward()
    for t in (Q2, K2, V2):
        assert t.grad is not None and torch.isfinite(t.grad).all()
        assert bool((t.grad[..., 3, :] == 0).all())


@pytest.mark.catalog("extra:linear-attention")
def test_registered_alignments_through_attend():
    """attend with the linear score and "linear-normalise"/"identity": the weights are the scores over their row sum."""
    g = torch.Generator().manual_seed(5)
    Q, K, V = (torch.randn(4, 3, generator=g, dtype=F64) for _ in range(3))
    mask = torch.tensor([[1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1], [0, 1, 0, 0]], dtype=torch.bool)
    e = elu1(Q) @ elu1(K).T
    c, a = attend(Q, K, V, mask, score=la.linear_score(), align="linear-normalise")
    want = torch.where(mask, e, 0.0)
    want = torch.where(want.sum(-1, keepdim=True) > 0, want / want.sum(-1, keepdim=True).clamp_min(1e-300), 0.0)
    torch.testing.assert_close(a, want)
    torch.testing.assert_close(c, want @ V)
    _, a = attend(Q, K, V, mask, score=la.linear_score(), align="identity")
    torch.testing.assert_close(a, torch.where(mask, e, 0.0))
    e_nan = torch.where(mask, e, float("nan"))
    assert torch.isfinite(la.linear_normalise_align(e_nan, mask)).all()


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("gated", [False, True])
def test_gradcheck(form, gated):
    Q, K, V, lg = qkv(6, batch=(1,), n=5, d_k=2, d_v=2)
    args = [t.clone().requires_grad_() for t in (Q, K, V, lg)]

    def f(Q, K, V, lg):
        return run(form, Q, K, V, 2, log_gate=lg if gated else None)

    assert torch.autograd.gradcheck(f, args)


def test_missing_normaliser_is_caught(monkeypatch):
    """The double-loop comparison is not vacuous: a recurrence that forgets to divide by z fails it."""
    Q, K, V, _ = qkv(7)
    want = oracle(Q, K, V, elu1)
    monkeypatch.setattr(la, "_safe_divide", lambda num, den: num)
    got = run("recurrent", Q, K, V)
    assert not torch.allclose(got, want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda Q, K, V, lg: la.linear_attention(Q, K[..., :5, :], V), "n of Q"),
        (lambda Q, K, V, lg: la.linear_attention(Q, K[..., :2], V), "d_k of Q"),
        (lambda Q, K, V, lg: la.linear_attention(Q, K, V.float()), "dtype"),
        (lambda Q, K, V, lg: la.linear_attention(Q, K, V, log_gate=-lg), "log_gate"),
        (lambda Q, K, V, lg: la.linear_attention(Q, K, V, log_gate=lg[..., :3]), "n of log_gate"),
        (lambda Q, K, V, lg: la.linear_attention(Q, K, V, log_gate=lg * float("nan")), "log_gate"),
        (lambda Q, K, V, lg: la.linear_attention_chunked(Q, K, V, 0), "chunk_size"),
        (lambda Q, K, V, lg: la.linear_attention_forms(Q, K, V, "blocked"), "form"),
        (lambda Q, K, V, lg: la.linear_attention(Q, K, V, feature_map="relu"), "feature map"),
        (lambda Q, K, V, lg: la.linear_attention(Q.tolist(), K, V), "Q must be a torch.Tensor"),
        (
            lambda Q, K, V, lg: la.linear_attention_recurrent(Q, K, V, state=la.initial_state(Q, K)),
            "state S has shape",
        ),
        (
            lambda Q, K, V, lg: la.linear_attention_recurrent(Q, K, V, state=la.initial_state(Q, V, normalise=False)),
            "normaliser z",
        ),
        (
            lambda Q, K, V, lg: la.linear_attention(Q, K, V, key_padding_mask=torch.ones(7, dtype=torch.bool)),
            "key_padding_mask",
        ),
    ],
)
def test_bad_inputs_raise_clear_errors(call, match):
    Q, K, V, lg = qkv(8)
    with pytest.raises((ValueError, TypeError), match=match):
        call(Q, K, V, lg)


@pytest.mark.catalog("extra:linear-attention", "extra:gated-decay")
@pytest.mark.parametrize("gate", [None, "fixed", "scalar"])
def test_layer_forms_agree_and_are_causal(gate):
    torch.manual_seed(0)
    d, h = 8, 2
    layer = la.LinearAttentionLayer(d, h, gate=gate, normalise=gate is None, chunk_size=3).double()
    n_params = sum(p.numel() for p in layer.parameters())
    assert n_params == 4 * d * d + (h * d if gate == "scalar" else 0)
    x = torch.randn(2, 7, d, dtype=F64)
    y = layer(x)
    assert y.shape == x.shape
    for form in ("recurrent", "chunked"):
        torch.testing.assert_close(layer(x, form=form), y, rtol=1e-11, atol=1e-11)
    x2 = x.clone()
    x2[:, 4:] = torch.randn(2, 3, d, dtype=F64)
    torch.testing.assert_close(layer(x2)[:, :4], y[:, :4])  # no output depends on a later input
    y.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in layer.parameters())


def test_layer_rejects_bad_arguments():
    with pytest.raises(ValueError, match="n_heads"):
        la.LinearAttentionLayer(6, 4)
    with pytest.raises(ValueError, match="gate"):
        la.LinearAttentionLayer(8, 2, gate="vector")  # type: ignore[arg-type]  # an invalid gate, on purpose
    with pytest.raises(ValueError, match="d_model of x"):
        la.LinearAttentionLayer(8, 2)(torch.randn(1, 3, 4))


def test_costs_by_hand():
    assert la.state_elements(64, 64, 8) == 8 * (64 * 64 + 64)
    assert la.state_elements(64, 32, 1, normalise=False) == 2048
    assert la.kv_cache_elements(1024, 64, 64, 8) == 8 * 1024 * 128
    # one head, d_k = 2, d_v = 3: outer product + add 12, read-out 12, z update 2, z . phi(q) 4, division 3
    assert la.recurrent_step_flops(2, 3) == 12 + 12 + 2 + 4 + 3
    assert la.recurrent_step_flops(2, 3, gated=True) == 33 + 6 + 2
    assert la.recurrent_step_flops(2, 3, normalise=False) == 24
    assert la.softmax_step_flops(10, 2, 3, h=2) == 2 * (2 * 10 * 2 + 2 * 10 * 3)
    assert la.parallel_flops(8, 2, 3) == 2 * 64 * (2 + 4)
    # n = 10, C = 4: 3 chunks; per chunk 2*16*(2+4) + 4*4*2*4 + 2*2*4 = 192 + 128 + 16
    assert la.chunked_flops(10, 4, 2, 3) == 3 * 336
    # one chunk covering the sequence: the parallel form's work plus the state terms
    assert la.chunked_flops(8, 8, 2, 3) == la.parallel_flops(8, 2, 3) + 4 * 8 * 2 * 4 + 2 * 2 * 4
    with pytest.raises(ValueError, match="chunk_size"):
        la.chunked_flops(8, 0, 2, 3)


@pytest.mark.parametrize("gate", [None, "fixed", "scalar"])
@pytest.mark.parametrize("normalise", [True, False])
def test_the_layer_trusting_its_inputs_computes_the_bits_of_the_clearing_core(gate, normalise):
    """finite_inputs=True (a model of tokens) skips the core's NaN-inert clearing in the parallel form: the same
    outputs, input and parameter gradients, bit for bit, as the layer that lets the core clear, for finite inputs.
    The NaN check (the flag takes effect) skips the scalar gate: a NaN input makes a NaN gate, refused either way."""
    torch.manual_seed(0)
    layer = la.LinearAttentionLayer(16, 2, gate=gate, normalise=normalise)
    x = torch.randn(3, 9, 16, generator=torch.Generator().manual_seed(1), requires_grad=True)
    assert_trusting_keeps_the_bits(layer, x, nan_check=gate != "scalar")


def test_the_recall_models_linear_mixer_trusts_its_inputs():
    """The recall models' linear mixer is fed LayerNorm rows of token embeddings: it runs trusted."""
    from attnsurvey.experiments.recall import MIXERS

    assert MIXERS["linear"](16, 2).finite_inputs
