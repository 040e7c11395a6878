"""Tests for the Transformer variants: XL, Reformer, Linformer, Lite, Synthesizer, local attention."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F_
from torch import nn

from attnsurvey.masking import causal_mask
from attnsurvey.transformer import linformer, lite, local, reformer, synthesizer
from attnsurvey.transformer import transformer_xl as xl
from attnsurvey.transformer.positional import sinusoidal_position_encoding

from .helpers import rand

# --- Transformer-XL ------------------------------------------------------------------


@pytest.mark.catalog("extra:transformer-xl")
def test_rel_shift_matches_explicit_loop():
    n, n_m = 4, 3
    klen = n + n_m
    BD = rand(2, n, klen)
    out = xl.rel_shift(BD)
    for i in range(n):
        for j in range(klen):
            if j <= n_m + i:  # the entries the causal mask keeps
                dist = n_m + i - j
                assert out[0, i, j] == BD[0, i, klen - 1 - dist]


@pytest.mark.catalog("extra:transformer-xl")
def test_xl_scores_match_pairwise_loop():
    torch.manual_seed(0)
    d, h, n, n_m = 8, 2, 3, 2
    layer = xl.TransformerXLAttention(d, h, mem_len=n_m)
    with torch.no_grad():
        layer.u.normal_()
        layer.v.normal_()
    X, M = rand(n, d), rand(n_m, d, seed=1)
    _, _, a = layer(X, M)
    cat = torch.cat([M, X])
    Wq, Wk, Wr = layer.W_Q.weight, layer.W_K.weight, layer.W_R.weight
    sin = sinusoidal_position_encoding(n + n_m, d)
    dh = d // h
    for hd in range(h):
        sl = slice(hd * dh, (hd + 1) * dh)
        for i in range(n):
            e = []
            for j in range(n_m + i + 1):
                q, k = (Wq @ X[i])[sl], (Wk @ cat[j])[sl]
                r = (Wr @ sin[n_m + i - j])[sl]
                e.append(((q + layer.u[hd]) @ k + (q + layer.v[hd]) @ r) / math.sqrt(dh))
            ref = torch.softmax(torch.stack(e), 0)
            torch.testing.assert_close(a[hd, i, : n_m + i + 1], ref, rtol=1e-4, atol=1e-6)
            assert torch.all(a[hd, i, n_m + i + 1 :] == 0)


@pytest.mark.catalog("extra:transformer-xl")
def test_xl_segment_recurrence_equals_full_causal_pass():
    torch.manual_seed(0)
    layer = xl.TransformerXLAttention(8, 2, mem_len=5)
    X = rand(2, 10, 8)
    full, _, _ = layer(X)  # one pass over 10 tokens, no memory
    out1, mem, _ = layer(X[:, :5])
    out2, _, _ = layer(X[:, 5:], mem)
    torch.testing.assert_close(torch.cat([out1, out2], 1), full, rtol=1e-4, atol=1e-5)
    # the memory carries no gradient
    Xg = X.clone().requires_grad_(True)
    _, mem, _ = layer(Xg[:, :5])
    out2, _, _ = layer(Xg[:, 5:], mem)
    out2.sum().backward()
    assert torch.all(Xg.grad[:, :5] == 0)
    with pytest.raises(ValueError, match="d_model=6 is not divisible by the number of heads h=4"):
        xl.TransformerXLAttention(6, 4, 2)


# --- Reformer ------------------------------------------------------------------------


@pytest.mark.catalog("extra:reformer-lsh")
def test_lsh_one_bucket_equals_full_shared_qk():
    QK, V = rand(2, 8, 4), rand(2, 8, 3, seed=1)
    out, _ = reformer.lsh_attention(QK, V, n_buckets=1, chunk_size=8)
    ref, a = reformer.shared_qk_attention(QK, V)
    torch.testing.assert_close(out, ref)
    # oracle for the shared-QK target: keys are normalised queries, self only as a last resort
    K = QK / QK.norm(dim=-1, keepdim=True)
    e = QK @ K.transpose(-1, -2) / 2.0
    e = e - 1e9 * torch.eye(8)
    torch.testing.assert_close(a, torch.softmax(e, -1))


@pytest.mark.catalog("extra:reformer-lsh")
def test_lsh_equals_same_bucket_oracle_and_stays_in_bucket():
    g = torch.Generator().manual_seed(3)
    QK, V = rand(1, 16, 4), rand(1, 16, 5, seed=1)
    R = reformer.random_rotations(4, 4, g)
    out, buckets = reformer.lsh_attention(QK, V, n_buckets=4, chunk_size=16, R=R)
    # the buckets are the angular hash argmax([x R; -x R]), computed here row by row in NumPy
    x, r = QK[0].double().numpy(), R.double().numpy()
    expected = [
        int(np.argmax([float(x[i] @ r[:, j]) for j in range(2)] + [-float(x[i] @ r[:, j]) for j in range(2)]))
        for i in range(16)
    ]
    assert buckets[0].tolist() == expected
    assert len(set(expected)) > 1  # so the isolation check below is not empty
    ref, _ = reformer.same_bucket_attention(QK, V, buckets)
    torch.testing.assert_close(out, ref)
    # with chunks, a changed value outside a token's bucket never reaches it
    out_c, _ = reformer.lsh_attention(QK, V, n_buckets=4, chunk_size=4, R=R)
    other = buckets[0] != buckets[0, 0]
    V2 = V.clone()
    V2[0, other] += 100.0
    out_c2, _ = reformer.lsh_attention(QK, V2, n_buckets=4, chunk_size=4, R=R)
    same = ~other
    torch.testing.assert_close(out_c[0, same], out_c2[0, same])
    with pytest.raises(ValueError, match="chunk size m=5 must divide the sequence length n=16"):
        reformer.lsh_attention(QK, V, 4, 5, R=R)
    with pytest.raises(ValueError, match="n_buckets must be 1 or an even number"):
        reformer.random_rotations(4, 3)


@pytest.mark.catalog("extra:reformer-lsh")
def test_lsh_hash_by_hand():
    """Two buckets, R = (1, 0)^T: the sign of the first coordinate decides, [x R; -x R] = [x_1, -x_1]."""
    X = torch.tensor([[2.0, 5.0], [-1.0, 3.0], [0.5, -9.0], [-0.1, 0.0]])
    assert reformer.lsh_hash(X, torch.tensor([[1.0], [0.0]]), 2).tolist() == [0, 1, 0, 1]
    # four buckets, R = I: bucket j < 2 when coordinate j is the largest of (x, -x), j + 2 when -x_j is
    X4 = torch.tensor([[3.0, 1.0], [1.0, 3.0], [-3.0, 1.0], [1.0, -3.0]])
    assert reformer.lsh_hash(X4, torch.eye(2), 4).tolist() == [0, 1, 2, 3]


@pytest.mark.catalog("extra:reversible-layers")
def test_reversible_layers_invert_and_match_plain_gradients():
    torch.manual_seed(0)
    blocks = [(nn.Sequential(nn.Linear(4, 4), nn.Tanh()), nn.Sequential(nn.Linear(4, 4), nn.Tanh())) for _ in range(3)]
    rev = reformer.ReversibleSequence(blocks, memory_saving=True)
    x = rand(2, 5, 8).requires_grad_(True)
    y = rev(x)
    torch.testing.assert_close(rev.inverse(y.detach()), x.detach(), rtol=1e-5, atol=1e-5)
    (y**2).sum().backward()
    g_x, g_p = x.grad.clone(), [p.grad.clone() for p in rev.parameters()]
    rev.zero_grad()
    x.grad = None
    rev.memory_saving = False
    y2 = rev(x)
    torch.testing.assert_close(y2, y)
    (y2**2).sum().backward()
    torch.testing.assert_close(x.grad, g_x, rtol=1e-4, atol=1e-5)
    for p, g in zip(rev.parameters(), g_p):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-5)
    # it saves fewer activations
    saved_rev = reformer.saved_activation_bytes(lambda m, t: m(t), reformer.ReversibleSequence(blocks, True), x)
    saved_plain = reformer.saved_activation_bytes(lambda m, t: m(t), reformer.ReversibleSequence(blocks, False), x)
    assert saved_rev < saved_plain / 3
    with pytest.raises(ValueError, match="odd width 7"):
        rev(rand(2, 7))


class _IgnoresInput(nn.Module):
    """A block whose output does not depend on its input (a learned constant)."""

    def __init__(self) -> None:
        super().__init__()
        self.b = nn.Parameter(torch.ones(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b.expand_as(x)


def test_reversible_backward_with_a_block_that_ignores_its_input():
    # no gradient reaches the input through such a block (autograd leaves .grad None); the
    # memory-saving backward must skip the None rather than add it
    torch.manual_seed(0)
    rev = reformer.ReversibleSequence([(_IgnoresInput(), nn.Linear(2, 2))], memory_saving=True)
    x = rand(3, 4).requires_grad_(True)
    (rev(x) ** 2).sum().backward()
    g_x, g_p = x.grad.clone(), [p.grad.clone() for p in rev.parameters()]
    rev.zero_grad()
    x.grad = None
    rev.memory_saving = False
    (rev(x) ** 2).sum().backward()
    torch.testing.assert_close(x.grad, g_x)
    for p, g in zip(rev.parameters(), g_p):
        torch.testing.assert_close(p.grad, g)


# --- Linformer -----------------------------------------------------------------------


@pytest.mark.catalog("extra:linformer")
def test_linformer_identity_projection_equals_full_attention():
    Q, K, V = rand(2, 6, 4), rand(2, 6, 4, seed=1), rand(2, 6, 3, seed=2)
    c, a = linformer.linformer_attention(Q, K, V, torch.eye(6), torch.eye(6))
    torch.testing.assert_close(c, F_.scaled_dot_product_attention(Q, K, V))
    # k < n: weights over k projected keys; a shorter input uses the first n columns
    E, F = rand(3, 10, seed=3), rand(3, 10, seed=4)
    c, a = linformer.linformer_attention(Q, K, V, E, F)
    assert a.shape == (2, 6, 3)
    ref = torch.softmax(Q @ (E[:, :6] @ K).transpose(-1, -2) / 2.0, -1) @ (F[:, :6] @ V)
    torch.testing.assert_close(c, ref)


@pytest.mark.catalog("extra:linformer")
def test_linformer_rejects_input_longer_than_projection():
    Q = rand(1, 12, 4)
    with pytest.raises(ValueError, match=r"cover n_max=10 positions, but K has n=12 \(shape \(1, 12, 4\)\)"):
        linformer.linformer_attention(Q, Q, Q, rand(3, 10), rand(3, 10))
    m = linformer.LinformerSelfAttention(8, 2, n_max=10, k=4)
    assert m(rand(2, 10, 8))[1].shape == (2, 2, 10, 4)
    with pytest.raises(ValueError, match="n_max=10"):
        m(rand(2, 11, 8))


# --- local window ----------------------------------------------------------------------


@pytest.mark.catalog("extra:linformer")
def test_linformer_refuses_masks_that_name_input_positions():
    """With k = n the projected keys have the input's length, but key j is not position j: refused, not applied."""
    torch.manual_seed(0)
    m = linformer.LinformerSelfAttention(8, 2, n_max=10, k=5)
    X = rand(2, 5, 8)
    with pytest.raises(ValueError, match="is_causal refers to input positions"):
        m(X, is_causal=True)
    with pytest.raises(ValueError, match="key_padding_mask refers to input positions"):
        m(X, key_padding_mask=torch.ones(2, 5, dtype=torch.bool))
    allowed = torch.ones(5, 5, dtype=torch.bool)
    allowed[:, 3:] = False  # a mask over the 5 projected keys is what it takes
    assert bool((m(X, mask=allowed)[1][..., 3:] == 0).all())


@pytest.mark.catalog("extra:local-window-attention")
def test_local_window_equals_banded_sdpa():
    Q, K, V = rand(2, 9, 4), rand(2, 9, 4, seed=1), rand(2, 9, 3, seed=2)
    for w in (0, 1, 3, 20):
        c, a_band = local.local_window_attention(Q, K, V, w)
        mask = local.local_window_mask(9, w)
        torch.testing.assert_close(c, F_.scaled_dot_product_attention(Q, K, V, attn_mask=mask))
        dense = local.band_to_dense(a_band, w)
        assert torch.all(dense[..., ~mask] == 0)
        torch.testing.assert_close(dense.sum(-1), torch.ones(2, 9))
    c, _ = local.local_window_attention(Q * 1e4, K * 1e4, V, 2)
    assert torch.isfinite(c).all()
    with pytest.raises(ValueError, match="w must be >= 0"):
        local.local_window_attention(Q, K, V, -1)


# --- Lite Transformer ------------------------------------------------------------------


@pytest.mark.catalog("extra:lite-transformer")
def test_lite_lsra_branches():
    torch.manual_seed(0)
    block = lite.LiteTransformerBlock(8, 2, 16, kernel_size=3)
    X = rand(2, 10, 8)
    Y, a = lite.long_short_range_attention(X, lambda L: block.attn(L), block.W_conv, block.b_conv)
    torch.testing.assert_close(Y[..., :4], block.attn(X[..., :4])[0])
    # the conv branch against an explicit loop
    W, b = block.W_conv, block.b_conv
    R = X[..., 4:]
    for i in range(10):
        ref = b.clone()
        for t in range(3):
            if 0 <= i - 1 + t < 10:
                ref = ref + W[:, t] * R[:, i - 1 + t]
        torch.testing.assert_close(Y[:, i, 4:], ref)
    # the conv half is local: changing token 9 leaves positions < 8 of that half unchanged
    X2 = X.clone()
    X2[:, 9] += 5
    Y2, _ = lite.long_short_range_attention(X2, lambda L: block.attn(L), block.W_conv, block.b_conv)
    torch.testing.assert_close(Y2[:, :8, 4:], Y[:, :8, 4:])
    assert not torch.allclose(Y2[:, 0, :4], Y[:, 0, :4])  # the attention half is global
    out, a = block(X)
    assert out.shape == X.shape and a.shape == (2, 2, 10, 10)
    with pytest.raises(ValueError, match="kernel_size must be odd"):
        lite.depthwise_conv(X, torch.zeros(8, 2))


# --- Synthesizer -----------------------------------------------------------------------


@pytest.mark.catalog("extra:synthesizer-dense")
def test_dense_synthesizer_matches_loop():
    X = rand(2, 5, 4)
    W1, b1, W2, b2 = rand(6, 4, seed=1), rand(6, seed=2), rand(8, 6, seed=3), rand(8, seed=4)
    A = synthesizer.dense_synthesizer_weights(X, W1, b1, W2, b2, causal_mask(5))
    for bi in range(2):
        for i in range(5):
            logits = (W2 @ torch.relu(W1 @ X[bi, i] + b1) + b2)[: i + 1]
            torch.testing.assert_close(A[bi, i, : i + 1], torch.softmax(logits, 0))
            assert torch.all(A[bi, i, i + 1 :] == 0)
    with pytest.raises(ValueError, match="max_len l=8 positions, got n=9"):
        synthesizer.dense_synthesizer_weights(rand(9, 4), W1, b1, W2, b2)


@pytest.mark.catalog("extra:synthesizer-random")
def test_random_synthesizer_ignores_input():
    torch.manual_seed(0)
    m = synthesizer.RandomSynthesizer(4, max_len=6)
    _, A1 = m(rand(2, 5, 4))
    _, A2 = m(rand(2, 5, 4, seed=7))
    torch.testing.assert_close(A1, A2)
    torch.testing.assert_close(A1, torch.softmax(m.R[:5, :5], -1))
    A0 = synthesizer.random_synthesizer_weights(torch.zeros(6, 6), 4)
    torch.testing.assert_close(A0, torch.full((4, 4), 0.25))
    with pytest.raises(ValueError, match="max_len l=6 positions, got n=7"):
        m(rand(7, 4))
    fixed = synthesizer.RandomSynthesizer(4, 6, fixed=True)
    assert not fixed.R.requires_grad
    d = synthesizer.DenseSynthesizer(4, 6)
    out, A = d(rand(2, 5, 4))
    assert out.shape == (2, 5, 4) and A.shape == (2, 5, 5)


def test_linformer_names_a_dtype_mismatch_and_refuses_k_0():
    """Review 2, G: E of another dtype gave torch's 'expected scalar type'; k = 0 was accepted (no key at all)."""
    Q = K = V = rand(2, 5, 4)
    with pytest.raises(ValueError, match=r"dtype mismatch: K=torch.float32, V=torch.float32, E=torch.float64"):
        linformer.linformer_attention(Q, K, V, rand(3, 5).double(), rand(3, 5).double())
    with pytest.raises(ValueError, match=r"LinformerSelfAttention needs k to be an integer >= 1, got k=0"):
        linformer.LinformerSelfAttention(8, 2, 5, 0)
