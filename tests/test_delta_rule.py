"""The delta rule and the gated delta rule (attnsurvey.beyond.delta_rule) against a brute-force loop and hand cases."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsurvey.beyond import delta_rule as D

F64 = torch.float64


def brute_force(Q, K, V, beta, g=None, S0=None):
    """The rule as written, ``S <- alpha (I - beta k k^T) S + beta k v^T``, ``o = S^T q`` with ``S`` of shape
    ``(d_k, d_v)``, one sequence and head at a time with explicit matrices (float64)."""
    *batch, n, d_k = K.shape
    d_v = V.shape[-1]
    O = torch.zeros(*batch, n, d_v, dtype=F64)
    S_out = torch.zeros(*batch, d_k, d_v, dtype=F64)
    for idx in torch.cartesian_prod(*[torch.arange(b) for b in batch]).reshape(-1, len(batch)).tolist():
        idx = tuple(idx)
        S = torch.zeros(d_k, d_v, dtype=F64) if S0 is None else S0[idx].clone()
        for t in range(n):
            k, v, b = K[idx][t], V[idx][t], beta[idx][t]
            alpha = 1.0 if g is None else math.exp(float(g[idx][t]))
            S = alpha * (torch.eye(d_k, dtype=F64) - b * torch.outer(k, k)) @ S + b * torch.outer(k, v)
            O[idx][t] = S.T @ Q[idx][t]
        S_out[idx] = S
    return O, S_out


def inputs(seed, batch=(2, 3), n=7, d_k=4, d_v=3, gated=True, state=True):
    gen = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=gen, dtype=F64)

    K = D.l2_normalise(r(*batch, n, d_k))
    beta = torch.rand(*batch, n, generator=gen, dtype=F64)
    g = -torch.rand(*batch, n, generator=gen, dtype=F64) if gated else None
    S0 = r(*batch, d_k, d_v) if state else None
    return r(*batch, n, d_k), K, r(*batch, n, d_v), beta, g, S0


def agrees(fn, seed=0, C=3, gated=True):
    """Whether ``fn`` (the chunked form's signature) matches the brute-force loop on one random case."""
    Q, K, V, beta, g, S0 = inputs(seed, n=8, gated=gated)
    O, S = fn(Q, K, V, beta, g, S0, C)
    O_ref, S_ref = brute_force(Q, K, V, beta, g, S0)
    return torch.allclose(O, O_ref, rtol=0, atol=1e-12) and torch.allclose(S, S_ref, rtol=0, atol=1e-12)


@pytest.mark.catalog("extra:delta-rule", "extra:gated-delta-rule")
@settings(max_examples=25)
@given(
    n=st.integers(0, 13),
    C=st.integers(1, 9),
    gated=st.booleans(),
    state=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_both_forms_equal_the_brute_force_loop(n, C, gated, state, seed):
    Q, K, V, beta, g, S0 = inputs(seed, n=n, gated=gated, state=state)
    O_ref, S_ref = brute_force(Q, K, V, beta, g, S0)
    for O, S in (D.delta_rule_recurrent(Q, K, V, beta, g, S0), D.delta_rule_chunked(Q, K, V, beta, g, S0, C)):
        torch.testing.assert_close(O, O_ref, rtol=0, atol=1e-12)
        torch.testing.assert_close(S, S_ref, rtol=0, atol=1e-12)


@pytest.mark.catalog("extra:delta-rule", "extra:gated-delta-rule")
def test_named_entry_points_pick_the_form_and_the_gate():
    Q, K, V, beta, g, S0 = inputs(1, n=9)
    for form in D.FORMS:
        torch.testing.assert_close(D.gated_delta_rule(Q, K, V, beta, g, S0, form=form, chunk_size=4)[0],
                                   brute_force(Q, K, V, beta, g, S0)[0], rtol=0, atol=1e-12)  # fmt: skip
        torch.testing.assert_close(D.delta_rule(Q, K, V, beta, S0, form=form, chunk_size=4)[0],
                                   brute_force(Q, K, V, beta, None, S0)[0], rtol=0, atol=1e-12)  # fmt: skip
    # g = 0 (alpha = 1) is the ungated rule
    torch.testing.assert_close(D.gated_delta_rule(Q, K, V, beta, torch.zeros_like(g), S0)[0],
                               D.delta_rule(Q, K, V, beta, S0)[0], rtol=0, atol=1e-12)  # fmt: skip


@pytest.mark.catalog("extra:delta-rule", "extra:gated-delta-rule")
def test_beta_zero_keeps_the_state_and_only_the_gate_shrinks_it():
    Q, K, V, beta, g, S0 = inputs(2, n=5)
    beta = torch.zeros_like(beta)
    O, S = D.delta_rule_chunked(Q, K, V, beta, None, S0, 2)
    torch.testing.assert_close(S, S0, rtol=0, atol=0)
    torch.testing.assert_close(O, Q @ S0, rtol=0, atol=1e-14)
    O, S = D.delta_rule_chunked(Q, K, V, beta, g, S0, 2)
    decay = g.cumsum(-1).exp()  # prod_{s <= t} alpha_s
    torch.testing.assert_close(O, decay[..., None] * (Q @ S0), rtol=0, atol=1e-13)
    torch.testing.assert_close(S, decay[..., -1, None, None] * S0, rtol=0, atol=1e-14)


@pytest.mark.catalog("extra:delta-rule")
def test_a_hand_computed_2x2_case():
    # step 1: k = e1, v = (1, 2), beta = 1 from S = 0 writes S_1 = k v^T = [[1, 2], [0, 0]];
    # step 2: k = (e1 + e2)/sqrt 2, v = (0, 1), beta = 1/2: S_1^T k = (r, 2r), S_2 = S_1 - 1/2 k (S_1^T k - v)^T;
    # query e_i reads row i of the state (o = S^T e_i)
    r = 1 / math.sqrt(2)
    K = torch.tensor([[1.0, 0.0], [r, r]], dtype=F64)
    V = torch.tensor([[1.0, 2.0], [0.0, 1.0]], dtype=F64)
    Q = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=F64)
    beta = torch.tensor([1.0, 0.5], dtype=F64)
    S2 = torch.tensor([[0.75, 1.5 + r / 2], [-0.25, -0.5 + r / 2]], dtype=F64)
    for form in D.FORMS:
        O, S = D.delta_rule(Q, K, V, beta, form=form, chunk_size=2)
        torch.testing.assert_close(O, torch.tensor([[1.0, 2.0], [-0.25, -0.5 + r / 2]], dtype=F64))
        torch.testing.assert_close(S, S2)


@pytest.mark.catalog("extra:delta-rule")
def test_one_step_is_one_gradient_step_on_the_online_least_squares_loss():
    gen = torch.Generator().manual_seed(3)
    S = torch.randn(4, 3, generator=gen, dtype=F64, requires_grad=True)  # (d_k, d_v)
    k, v, q = (torch.randn(d, generator=gen, dtype=F64) for d in (4, 3, 4))
    beta = torch.tensor(0.3, dtype=F64)
    loss = 0.5 * ((S.T @ k - v) ** 2).sum()
    (grad,) = torch.autograd.grad(loss, S)
    by_autograd = S.detach() - beta * grad
    torch.testing.assert_close(D.least_squares_step(S.detach(), k, v, beta), by_autograd, rtol=0, atol=1e-14)
    torch.testing.assert_close(D.delta_rule_step(S.detach(), q, k, v, beta)[1], by_autograd, rtol=0, atol=1e-14)
    # beta = 1 and a unit key: the new state retrieves v exactly for k
    u = k / k.norm()
    S_new = D.delta_rule_step(S.detach(), q, u, v, torch.tensor(1.0, dtype=F64))[1]
    torch.testing.assert_close(S_new.T @ u, v, rtol=0, atol=1e-14)
    assert not torch.allclose(S.detach().T @ u, v)  # the old state did not


@pytest.mark.catalog("extra:gated-delta-rule")
def test_gradcheck_of_the_chunked_gated_form():
    Q, K, V, beta, g, S0 = inputs(4, batch=(1,), n=5, d_k=3, d_v=2)
    args = [x.requires_grad_() for x in (Q, K, V, beta, g, S0)]
    assert torch.autograd.gradcheck(lambda *a: D.delta_rule_chunked(*a, chunk_size=2), args)


@pytest.mark.catalog("extra:delta-rule", "extra:gated-delta-rule")
@pytest.mark.parametrize("planted", ["A misses the sub-diagonal", "intra-chunk mask one step into the future"])
def test_planted_bugs_in_the_chunked_form_are_rejected(monkeypatch, planted):
    assert agrees(D.delta_rule_chunked) and agrees(D.delta_rule_chunked, gated=False)
    real = D.causal_mask

    def wrong(n_q, n_f=None, device=None, offset=0):  # the strict mask of A has offset -1, the intra-chunk one 0
        if planted == "A misses the sub-diagonal":
            return real(n_q, n_f, device, offset - 1 if offset < 0 else offset)
        return real(n_q, n_f, device, offset + 1)

    monkeypatch.setattr(D, "causal_mask", wrong)
    assert not agrees(D.delta_rule_chunked)
    assert not agrees(D.delta_rule_chunked, gated=False)


@pytest.mark.catalog("extra:delta-rule", "extra:gated-delta-rule")
def test_the_chunked_form_rejects_a_wrong_sign_in_the_wy_correction(monkeypatch):
    real = torch.linalg.solve_triangular

    def solve_with_minus(A, B, **kw):  # (I - A) instead of (I + A): the correction's sign flipped
        return real(2 * torch.eye(A.shape[-1], dtype=A.dtype) - A, B, **kw)

    monkeypatch.setattr(torch.linalg, "solve_triangular", solve_with_minus)
    assert not agrees(D.delta_rule_chunked)


def layer_input(seed, n=9, d=12):
    return torch.randn(2, n, d, generator=torch.Generator().manual_seed(seed), dtype=F64)


@pytest.mark.catalog("extra:delta-rule", "extra:gated-delta-rule")
@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("extras", [False, True])
def test_layer_forms_agree_decode_continues_and_the_layer_is_causal(gated, extras):
    torch.manual_seed(5)
    layer = D.DeltaNetLayer(12, 3, gated=gated, short_conv=4 if extras else None, output_gate=extras, chunk_size=4)
    layer = layer.double()
    x = layer_input(6)
    y = layer(x)
    assert y.shape == x.shape
    torch.testing.assert_close(layer(x, form="recurrent"), y, rtol=0, atol=1e-12)
    outs, state = [], None
    for piece in (slice(0, 5), slice(5, 6), slice(6, 7), slice(7, 9)):  # a prompt, two single tokens, the rest
        out, state = layer.decode(x[:, piece], state)
        outs.append(out)
    torch.testing.assert_close(torch.cat(outs, 1), y, rtol=0, atol=1e-12)
    changed = x.clone()
    changed[:, 6] += 1.0
    y2 = layer(changed)
    torch.testing.assert_close(y2[:, :6], y[:, :6], rtol=0, atol=0)
    assert not torch.allclose(y2[:, 6], y[:, 6])


@pytest.mark.catalog("extra:delta-rule", "extra:gated-delta-rule")
def test_layer_parameter_count():
    d, h = 12, 3
    count = sum(p.numel() for p in D.DeltaNetLayer(d, h, gated=False).parameters())
    assert count == 4 * d * d + h * d
    count = sum(p.numel() for p in D.DeltaNetLayer(d, h, gated=True).parameters())
    assert count == 4 * d * d + 2 * h * d + 2 * h
    layer = D.DeltaNetLayer(d, h, gated=True)
    assert bool((layer.A_log.exp() >= 1).all()) and bool((layer.dt_bias.exp() > 0).all())


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda Q, K, V, b, g: D.delta_rule(Q, K[..., :-1], V, b), "Q and K"),
        (lambda Q, K, V, b, g: D.delta_rule(Q, K, V[..., :-1, :], b), "V must have shape"),
        (lambda Q, K, V, b, g: D.delta_rule(Q, K, V, b[..., :-1]), "beta must have shape"),
        (lambda Q, K, V, b, g: D.gated_delta_rule(Q, K, V, b, -g), "g must be <= 0"),
        (lambda Q, K, V, b, g: D.gated_delta_rule(Q, K, V, b, g[..., :-1]), "g must have shape"),
        (lambda Q, K, V, b, g: D.delta_rule(Q, K, V, b, torch.zeros(2, 3, dtype=F64)), "S0 must have shape"),
        (lambda Q, K, V, b, g: D.delta_rule(Q, K, V, b, Q.new_zeros(2, 3, 3, 4)), r"\(..., d_k, d_v\)"),
        (lambda Q, K, V, b, g: D.delta_rule(Q, K, V, b, chunk_size=0), "chunk_size"),
        (lambda Q, K, V, b, g: D.delta_rule(Q, K, V, b, form="parallel"), "form must be one of"),
        (lambda Q, K, V, b, g: D.delta_rule(Q.numpy(), K, V, b), "Q must be a torch.Tensor"),
        (lambda Q, K, V, b, g: D.delta_rule(Q, K, V, b.float()), "dtype"),
        (lambda Q, K, V, b, g: D.gated_delta_rule(Q, K, V, b, None), "needs the log-decays g"),  # type: ignore[arg-type]
        (
            lambda Q, K, V, b, g: D.delta_rule_step(
                torch.zeros(3, dtype=F64), Q[0, 0, 0], K[0, 0, 0], V[0, 0, 0], b[0, 0, 0]
            ),
            "S must have shape",
        ),  # fmt: skip
        (lambda Q, K, V, b, g: D.DeltaNetLayer(10, 3, gated=False), "must divide"),
        (lambda Q, K, V, b, g: D.DeltaNetLayer(12, 3, gated=False, qk_norm="rms"), "qk_norm"),  # type: ignore[arg-type]
        (lambda Q, K, V, b, g: D.DeltaNetLayer(12, 3, gated=False).double()(Q), "x must have shape"),
    ],
)
def test_bad_inputs_raise_clear_errors(call, needle):
    Q, K, V, beta, g, _ = inputs(7, n=4)
    with pytest.raises(ValueError, match=needle):
        call(Q, K, V, beta, -g.abs() - 0.1)


@pytest.mark.catalog("extra:delta-rule")
def test_l2_normalise_is_x_over_sqrt_of_norm_squared_plus_eps_and_does_not_overflow():
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(8), dtype=F64)
    torch.testing.assert_close(D.l2_normalise(x, 0.1), x / (x.pow(2).sum(-1, keepdim=True) + 0.1).sqrt())
    big = (x * 1e20).float()
    torch.testing.assert_close(D.l2_normalise(big), (x / x.norm(dim=-1, keepdim=True)).float())
    assert bool((D.l2_normalise(torch.zeros(2, 3)) == 0).all())


def test_an_overflowing_rule_is_refused_not_returned():
    Q, K, V, beta, g, S0 = inputs(9, n=6)
    for form in D.FORMS:
        with pytest.raises(ValueError, match="overflowed in torch.float32"):
            D.delta_rule((Q * 1e20).float(), (K * 1e20).float(), V.float(), beta.float(), S0.float(), form=form)
