"""Multi-head latent attention (beyond/latent.py): naive == absorbed, decode == full, a brute-force loop oracle,
the cache counts at DeepSeek-V2's sizes, and why the RoPE key must be decoupled; each with a planted bug it rejects."""

from __future__ import annotations

import math

import pytest
import torch

from attnsurvey.attention import attend
from attnsurvey.beyond import latent as L
from attnsurvey.beyond.decoding import KVCache
from attnsurvey.beyond.positions import apply_rope
from attnsurvey.query_related.multihead import split_heads

from .helpers import rand

D, H, D_C, D_H, D_R, D_V, D_CQ = 12, 3, 8, 5, 4, 6, 7
ROUNDING = 1e-12  # float64: the forms differ by a few ulps of values of order 1
F64 = torch.float64


def layer(d_cq: int | None = D_CQ, rms_norm: bool = True, seed: int = 0) -> L.MultiHeadLatentAttention:
    """A float64 MLA layer with random weights and random RMSNorm gains (so the gains are read)."""
    torch.manual_seed(seed)
    m = L.MultiHeadLatentAttention(D, H, D_C, D_H, D_R, d_cq, D_V, rms_norm=rms_norm, dtype=F64)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, dtype=F64) * 0.5)
    return m.requires_grad_(False).eval()


def random_mask(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(2, n, n, generator=g) < 0.6
    mask[:, :, 0] = True  # every query sees a key ...
    mask[1, 2] = False  # ... but one: a fully-masked row (zero context in both forms)
    return mask


def diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).detach().abs().max())


# --------------------------------------------------------------------------- oracle: one head, one query at a time


def rope_loop(x: torch.Tensor, pos: int, base: float = 10000.0) -> torch.Tensor:
    """RoPE by explicit 2x2 rotations of the pairs (2i, 2i+1) by pos * base^(-2i/d)."""
    out, d = x.clone(), x.shape[-1]
    for i in range(d // 2):
        th = pos * base ** (-2 * i / d)
        cs, sn = math.cos(th), math.sin(th)
        out[2 * i] = cs * x[2 * i] - sn * x[2 * i + 1]
        out[2 * i + 1] = sn * x[2 * i] + cs * x[2 * i + 1]
    return out


def rms_loop(x: torch.Tensor, norm: torch.nn.RMSNorm | None) -> torch.Tensor:
    if norm is None:
        return x
    assert norm.eps is not None
    return x / math.sqrt(float((x * x).mean()) + norm.eps) * norm.weight


def oracle(m: L.MultiHeadLatentAttention, X: torch.Tensor, allowed: torch.Tensor, bug: str = "") -> torch.Tensor:
    """MLA of one sequence X (n, d) by loops over heads, queries and keys; ``allowed`` (n, n) True = may attend.

    ``bug`` plants a mistake: ``"scale"`` divides by sqrt(d_h) (the RoPE width forgotten), ``"unrotated-key"``
    leaves k^R at position 0, ``"head-order"`` reads the heads of W_UK in reverse order.
    """
    W = m.weights()
    n, d_o = X.shape[0], W.W_O.shape[0]
    c = [rms_loop(W.W_DKV @ X[t], m.norm_kv) for t in range(n)]
    k_R = [rope_loop(W.W_KR @ X[t], 0 if bug == "unrotated-key" else t) for t in range(n)]
    c_Q = [X[t] if W.W_DQ is None else rms_loop(W.W_DQ @ X[t], m.norm_q) for t in range(n)]
    scale = 1 / math.sqrt(D_H if bug == "scale" else D_H + D_R)
    out = torch.zeros(n, d_o, dtype=X.dtype)
    for i in range(H):
        j = H - 1 - i if bug == "head-order" else i
        W_UK, W_UQ = W.W_UK[j * D_H : (j + 1) * D_H], W.W_UQ[i * D_H : (i + 1) * D_H]
        W_QR, W_UV = W.W_QR[i * D_R : (i + 1) * D_R], W.W_UV[i * D_V : (i + 1) * D_V]
        for s in range(n):
            q_C, q_R = W_UQ @ c_Q[s], rope_loop(W_QR @ c_Q[s], s)
            keys = [t for t in range(n) if allowed[s, t]]
            if not keys:
                continue  # a fully-masked query: zero context
            e = torch.stack([(q_C @ (W_UK @ c[t]) + q_R @ k_R[t]) * scale for t in keys])
            a = torch.softmax(e, 0)
            o = sum(a[m_] * (W_UV @ c[t]) for m_, t in enumerate(keys))
            out[s] += W.W_O[:, i * D_V : (i + 1) * D_V] @ o
    return out


# --------------------------------------------------------------------------- the equations


@pytest.mark.catalog("extra:mla")
@pytest.mark.parametrize("d_cq,rms_norm", [(D_CQ, True), (None, True), (D_CQ, False)])
def test_module_equals_a_loop_over_heads_queries_and_keys(d_cq, rms_norm):
    m, X = layer(d_cq, rms_norm), rand(2, 6, D, seed=1, dtype=F64)
    mask = random_mask(6, seed=2)
    for form in L.FORMS:
        out, a = m(X, mask, form=form)
        assert a is not None and a.shape == (2, H, 6, 6)
        for b in range(2):
            assert diff(out[b], oracle(m, X[b], mask[b])) < ROUNDING, form
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    assert diff(m(X, is_causal=True)[0][0], oracle(m, X[0], causal)) < ROUNDING
    for bug in ("scale", "unrotated-key", "head-order"):  # the oracle rejects each planted mistake
        assert diff(m(X, mask)[0][0], oracle(m, X[0], mask[0], bug)) > 1e-3, bug


@pytest.mark.catalog("extra:mla-absorbed")
@pytest.mark.parametrize("d_cq,rms_norm", [(D_CQ, True), (None, False)])
def test_absorbed_equals_naive_to_rounding(d_cq, rms_norm):
    m, X = layer(d_cq, rms_norm, seed=3), rand(2, 7, D, seed=4, dtype=F64)
    for kw in ({}, {"is_causal": True}, {"mask": random_mask(7, seed=5)}, {"mask": random_mask(7, 6)[:, None]}):
        naive, a_naive = m(X, **kw)
        absorbed, a_abs = m(X, form="absorbed", **kw)
        assert diff(naive, absorbed) < ROUNDING and diff(a_naive, a_abs) < ROUNDING, kw
        assert naive.abs().max() > 0.1  # not a trivial agreement of zeros
        fused, none = m(X, form="absorbed", need_weights=False, **kw)  # the core's SDPA path
        assert none is None and diff(fused, naive) < ROUNDING


@pytest.mark.catalog("extra:mla-absorbed")
def test_absorbed_rejects_a_planted_transposed_w_uk(monkeypatch):
    m, X = layer(seed=7), rand(1, 5, D, seed=8, dtype=F64)
    naive = m(X, is_causal=True)[0]

    def transposed(q_C, W_UK):  # the stack read as (h, d_c, d_h) and transposed: the wrong rows per head
        h, d_h = q_C.shape[-3], q_C.shape[-1]
        return q_C @ W_UK.reshape(h, -1, d_h).transpose(-1, -2)

    monkeypatch.setattr(L, "absorbed_query", transposed)
    assert diff(naive, m(X, is_causal=True, form="absorbed")[0]) > 1e-3


@pytest.mark.catalog("extra:mla-absorbed")
def test_absorbed_form_attends_to_one_key_head_of_width_d_c_plus_d_r(monkeypatch):
    """The absorbed form hands the core one key head [c; k^R] and one value head c, with the naive form's scale."""
    m, X = layer(seed=9), rand(2, 5, D, seed=10, dtype=F64)
    seen = []
    core = L.attend_unchecked

    def spy(Q, K, V, settings):
        seen.append((tuple(Q.shape), tuple(K.shape), tuple(V.shape), settings.scale))
        return core(Q, K, V, settings)

    monkeypatch.setattr(L, "attend_unchecked", spy)
    m(X, form="absorbed")
    m(X)
    scale = 1 / math.sqrt(D_H + D_R)
    assert seen == [
        ((2, H, 5, D_C + D_R), (2, 1, 5, D_C + D_R), (2, 1, 5, D_C), scale),
        ((2, H, 5, D_H + D_R), (2, H, 5, D_H + D_R), (2, H, 5, D_V), scale),
    ]


@pytest.mark.catalog("extra:mla-absorbed")
@pytest.mark.parametrize("form", L.FORMS)
def test_decoding_with_the_latent_cache_equals_full_recomputation(form, monkeypatch):
    m, X = layer(seed=11), rand(2, 8, D, seed=12, dtype=F64)
    full, _ = m(X, is_causal=True)
    cache = m.new_cache(2, 8)
    steps = [m.decode(X[:, :3], cache, form=form)[0]]  # a prompt of 3, then one token at a time, then 2
    steps += [m.decode(X[:, t : t + 1], cache, form=form)[0] for t in range(3, 6)]
    steps.append(m.decode(X[:, 6:8], cache, form=form)[0])
    assert diff(torch.cat(steps, 1), full) < ROUNDING
    c, k_R = L.latent_kv(X, m.weights())  # the cache holds exactly c and the rotated k^R, nothing else
    assert cache.tensors() == (cache.c, cache.k_R) and cache.length == 8
    assert diff(cache.c, c) < ROUNDING and diff(cache.k_R, k_R) < ROUNDING
    # planted: the new rows' RoPE position restarts at 0 in every step
    monkeypatch.setattr(L, "apply_rope", lambda x, offset=0, base=1e4, convention="interleaved": apply_rope(x))
    cache = m.new_cache(2, 8)
    m.decode(X[:, :3], cache, form=form)
    assert diff(m.decode(X[:, 3:4], cache, form=form)[0], full[:, 3:4]) > 1e-3


@pytest.mark.catalog("extra:mla")
def test_masked_nan_rows_are_inert_in_both_forms():
    m, X = layer(seed=13), rand(1, 5, D, seed=14, dtype=F64)
    mask = torch.ones(1, 5, 5, dtype=torch.bool)
    mask[..., 2] = False  # no query may attend key 2
    clean = m(X, mask)[0]
    X_nan = X.clone()
    X_nan[0, 2] = float("nan")
    for form in L.FORMS:
        out = m(X_nan, mask, form=form)[0]
        keep = [0, 1, 3, 4]  # row 2 is a query holding NaN itself
        assert torch.isfinite(out[:, keep]).all() and diff(out[:, keep], clean[:, keep]) < ROUNDING
    m.requires_grad_(True)
    m(X_nan, mask, form="absorbed")[0][:, [0, 1, 3, 4]].sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)


# --------------------------------------------------------------------------- the cache


@pytest.mark.catalog("extra:mla-absorbed")
def test_cache_counts_at_deepseek_v2_sizes():
    """n_h = 128, d_h = 128, d_c = 512, d_R = 64: 576 numbers per token and layer against MHA's 32768."""
    mla = L.MultiHeadLatentAttention(5120, 128, 512, 128, 64, d_cq=1536, device="meta")  # shapes, no memory
    cache = mla.new_cache(batch=2, max_len=3)
    assert (cache.c.shape, cache.k_R.shape) == ((2, 3, 512), (2, 3, 64))
    assert L.cache_elements_per_token(cache) == 576
    h, d_h = 128, 128
    counts = {g: L.cache_elements_per_token(KVCache(2, g, 3, d_h, device="meta")) for g in (h, 8, 1)}
    assert counts == {128: 2 * 128 * 128, 8: 2 * 8 * 128, 1: 2 * 128}  # MHA 32768, GQA(8) 2048, MQA 256
    assert counts[128] == 32768 and counts[128] / 576 > 56  # MLA caches 57 times less than MHA
    # a small layer's cache after real decoding steps: d_c + d_R
    m = layer(seed=15)
    small = m.new_cache(1, 4)
    m.decode(rand(1, 2, D, seed=16, dtype=F64), small)
    assert L.cache_elements_per_token(small) == D_C + D_R


@pytest.mark.catalog("extra:mla-absorbed")
def test_cache_count_rejects_a_planted_cache_that_forgets_k_r(monkeypatch):
    cache = L.LatentCache(1, 2, 512, 64, device="meta")
    monkeypatch.setattr(L.LatentCache, "tensors", lambda self: (self.c,))
    assert L.cache_elements_per_token(cache) != 576


# --------------------------------------------------------------------------- why the RoPE key is decoupled


@pytest.mark.catalog("extra:mla-absorbed")
def test_rope_on_the_up_projected_keys_breaks_absorption():
    """Rotating k^C = W_UK c itself (no decoupled key): folding W_UK into the query is then wrong.

    q_s^T R_s^T R_t W_UK c_t depends on t - s through R_{t-s}, so no fixed matrix replaces W_UK. Without the
    rotation the same folding is exact, so the test sees the rotation, not a mistake in the folding.
    """
    g = torch.Generator().manual_seed(17)
    n, h, d_c, d_h = 6, 2, 8, 4
    c = torch.randn(1, n, d_c, generator=g, dtype=F64)
    q_C = torch.randn(1, h, n, d_h, generator=g, dtype=F64)
    W_UK, W_UV = torch.randn(h * d_h, d_c, generator=g, dtype=F64), torch.randn(h * d_h, d_c, generator=g, dtype=F64)
    k_C, v = split_heads(c @ W_UK.T, h), split_heads(c @ W_UV.T, h)
    c1 = c[:, None]  # one latent key/value head
    scale = 1 / math.sqrt(d_h)

    def folded(q):  # the absorbed form: W_UK into the query, W_UV applied after the weighted sum of latents
        o, _ = attend(L.absorbed_query(q, W_UK), c1, c1, is_causal=True, scale=scale)
        return o @ W_UV.reshape(h, d_h, d_c).transpose(-1, -2)

    plain, _ = attend(q_C, k_C, v, is_causal=True)
    assert diff(folded(q_C), plain) < ROUNDING  # no rotation: absorption is exact
    rotated, _ = attend(apply_rope(q_C), apply_rope(k_C), v, is_causal=True)
    assert diff(folded(apply_rope(q_C)), rotated) > 1e-2  # rotated keys: far more than rounding


# --------------------------------------------------------------------------- bad input


@pytest.mark.catalog("extra:mla")
def test_bad_input_names_the_symbol_and_shapes():
    m, X = layer(seed=18), rand(1, 4, D, seed=19, dtype=F64)
    W = m.weights()
    with pytest.raises(ValueError, match=r"d of X.*13"):
        L.latent_attention(rand(1, 4, 13, dtype=F64), W, H)
    with pytest.raises(ValueError, match=r"W_UK must have shape \(h\*d_h, d_c\) = \(15, 8\), got \(15, 9\)"):
        L.latent_attention(X, W._replace(W_UK=rand(15, 9, dtype=F64)), H)
    with pytest.raises(ValueError, match=r"W_UV .*h=3 dividing"):
        L.latent_attention(X, W._replace(W_UV=rand(16, D_C, dtype=F64)), H)
    with pytest.raises(ValueError, match="d_R must be even"):
        L.latent_attention(X, W._replace(W_KR=rand(3, D, dtype=F64)), H)
    with pytest.raises(ValueError, match=r"W_QR must have shape \(h\*d_R, d_cq\)"):
        L.latent_attention(X, W._replace(W_QR=rand(H * D_R, D, dtype=F64)), H)
    with pytest.raises(TypeError, match="W_O must be a floating-point tensor"):
        L.latent_attention(X, W._replace(W_O=torch.ones(D, H * D_V, dtype=torch.long)), H)
    with pytest.raises(ValueError, match="form must be one of"):
        m(X, form="fused")
    with pytest.raises(ValueError, match="boolean"):
        m(X, torch.zeros(4, 4, dtype=F64))
    with pytest.raises(ValueError, match="mask"):
        m(X, torch.ones(3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="d_R must be even"):
        L.MultiHeadLatentAttention(D, H, D_C, D_H, 5)
    cache = m.new_cache(1, 4)
    with pytest.raises(ValueError, match=r"LatentCache.append: c must have shape \(B, n_new, d_c\)"):
        m.decode(rand(2, 1, D, dtype=F64), cache)  # batch 2 for a cache of batch 1
    with pytest.raises(TypeError, match="dtype mismatch: X=torch.float32, W_DKV=torch.float64"):
        m.decode(rand(1, 1, D), cache)
    with pytest.raises(
        ValueError, match=r"LatentCache.append: c .* and dtype torch.float64, got \(1, 1, 8\) torch.float32"
    ):
        L.LatentCache(1, 2, D_C, D_R, dtype=F64).append(rand(1, 1, D_C), rand(1, 1, D_R))
    m.decode(X, cache)
    with pytest.raises(ValueError, match="LatentCache full: 4 cached"):
        m.decode(X[:, :1], cache)
    with pytest.raises(TypeError, match="LatentCache or a KVCache"):
        L.cache_elements_per_token(object())  # type: ignore[arg-type]


# --------------------------------------------------------------------------- transformers' DeepSeek-V3 attention


@pytest.mark.catalog("extra:mla", "extra:mla-absorbed")
def test_deepseek_agrees_to_rounding_once_its_float32_steps_run_in_float64(monkeypatch):
    """The conformance checks agree to about 1e-8; the rest is transformers' float32 RMSNorm, RoPE and softmax.

    Run in float64, DeepSeek-V3's attention (transformers) and the book's module agree to float64 rounding, in
    both forms, with the weights mapped by latent_from_deepseek; a mapping that swaps W_UK and W_UV's rows does not.
    """
    pytest.importorskip("transformers")
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds

    from attnsurvey.conformance import transformers_mla as tm

    def rms(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    def rotary(self, x, position_ids):
        d = self.config.qk_rope_head_dim
        inv_freq = 1.0 / (self.config.rope_parameters["rope_theta"] ** (torch.arange(0, d, 2, dtype=F64) / d))
        angles = torch.cat([position_ids[..., None].to(F64) * inv_freq] * 2, -1)
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)

    def eager(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        a = torch.softmax(query @ key.transpose(2, 3) * scaling + attention_mask, dim=-1)
        return (a @ value).transpose(1, 2).contiguous(), a

    monkeypatch.setattr(ds.DeepseekV3RMSNorm, "forward", rms)
    monkeypatch.setattr(ds.DeepseekV3RotaryEmbedding, "forward", rotary)
    monkeypatch.setattr(ds, "eager_attention_forward", eager)
    attention, rot = tm._deepseek(31)
    X = rand(2, 6, tm.D, seed=32, dtype=F64)
    theirs = tm._run(attention, rot, X)
    mine = tm.latent_from_deepseek(attention)
    for form in L.FORMS:
        assert diff(mine(X, is_causal=True, form=form)[0], theirs) < ROUNDING, form
    with torch.no_grad():  # planted: the value rows read as key rows
        mine.W_UK.weight[: tm.D_H] = mine.W_UV.weight[: tm.D_H]
    assert diff(mine(X, is_causal=True)[0], theirs) > 1e-5  # outputs of order 0.05
