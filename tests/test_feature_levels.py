"""Tests for §3.1.2 Feature levels: attention-via-attention and hierarchical attention."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F_

from attnsurvey.data.documents import KEY, make_documents
from attnsurvey.experiments.feature_related import DocumentClassifier
from attnsurvey.feature_related import levels as lv
from attnsurvey.general_mechanisms.scoring import dot_score
from attnsurvey.general_model import attend

from .helpers import rand


def softmax_list(xs):
    m = max(xs)
    ex = [math.exp(x - m) for x in xs]
    return [x / sum(ex) for x in ex]


# ---------------------------------------------------------------- attention-via-attention


@pytest.mark.catalog("extra:attention-via-attention")
def test_ava_equals_two_manual_attention_steps():
    q, Fw, Fc = rand(2, 3, 4), rand(2, 5, 6, seed=1), rand(2, 9, 7, seed=2)
    WKw, WVw = rand(4, 6, seed=3), rand(5, 6, seed=4)
    WKc, WVc = rand(9, 7, seed=5), rand(3, 7, seed=6)  # d_k^(c) = d_q + d_v^(w) = 9
    r = lv.attention_via_attention(q, Fw, Fc, WKw, WVw, WKc, WVc)
    # oracle: the two steps written with softmax by hand
    a_w = torch.softmax(q @ (Fw @ WKw.T).transpose(-1, -2) / 2.0, -1)
    c_w = a_w @ (Fw @ WVw.T)
    qc = torch.cat([q, c_w], -1)
    a_c = torch.softmax(qc @ (Fc @ WKc.T).transpose(-1, -2) / 3.0, -1)
    c_c = a_c @ (Fc @ WVc.T)
    torch.testing.assert_close(r.a_w, a_w)
    torch.testing.assert_close(r.a_c, a_c)
    torch.testing.assert_close(r.c, torch.cat([c_w, c_c], -1))
    assert r.c.shape == (2, 3, 5 + 3)


@pytest.mark.catalog("extra:attention-via-attention")
def test_ava_character_query_sees_word_context():
    # Characters carry the one-hot id of their word; the character score only
    # compares that id with the word context, so the character weights must
    # follow the word weights: chars of the attended word get all the mass.
    n_words, chars_per_word = 3, 2
    Fw = torch.eye(n_words)[None]  # word features are one-hot ids
    Fc = torch.eye(n_words).repeat_interleave(chars_per_word, 0)[None]  # (1, 6, 3)
    eye = torch.eye(n_words)
    for target in range(n_words):
        q = 50.0 * eye[target][None, None]  # query that picks word `target`
        # char keys [0; word id] so that [q; c_w] . k = c_w . word id
        WKc = torch.cat([torch.zeros(n_words, n_words), eye], 0)  # (6, 3): d_k^(c) = d_q + d_v^(w)
        r = lv.attention_via_attention(
            q, Fw, Fc, eye, eye, WKc, eye, score_w=dot_score, score_c=lambda Q, K: 50.0 * dot_score(Q, K)
        )
        mass = r.a_c[0, 0].reshape(n_words, chars_per_word).sum(-1)
        assert mass.argmax().item() == target
        assert mass[target] > 0.99


@pytest.mark.catalog("extra:attention-via-attention")
def test_ava_module_single_and_many_queries():
    torch.manual_seed(0)
    m = lv.AttentionViaAttention(d_q=4, d_f_w=6, d_f_c=5, d_v_w=3, d_v_c=2)
    q, Fw, Fc = rand(2, 4), rand(2, 7, 6, seed=1), rand(2, 11, 5, seed=2)
    mask_c = torch.ones(2, 11, dtype=torch.bool)
    mask_c[1, 6:] = False
    one = m(q, Fw, Fc, mask_c=mask_c)
    many = m(q[:, None], Fw, Fc, mask_c=mask_c[:, None])
    assert one.c.shape == (2, 5) and one.a_c.shape == (2, 11)
    torch.testing.assert_close(one.c, many.c[:, 0])
    assert torch.all(one.a_c[1, 6:] == 0)
    torch.testing.assert_close(one.a_c.sum(-1), torch.ones(2))
    ref = lv.attention_via_attention(
        q[:, None],
        Fw,
        Fc,
        m.W_K_w.weight,
        m.W_V_w.weight,
        m.W_K_c.weight,
        m.W_V_c.weight,
        None,
        mask_c[:, None],
        m.score_w,
        m.score_c,
    )
    torch.testing.assert_close(one.c, ref.c[:, 0])


@pytest.mark.catalog("extra:attention-via-attention")
def test_ava_rejects_bad_widths():
    q, Fw, Fc = rand(1, 2, 4), rand(1, 5, 6), rand(1, 9, 7)
    with pytest.raises(ValueError, match=r"W_K must have shape \(d_k, d_f\)"):
        lv.attention_via_attention(q, Fw, Fc, rand(4, 5), rand(5, 6), rand(9, 7), rand(3, 7))
    # the character query has d_q + d_v^(w) = 4 + 5 = 9 entries, the keys only 8
    with pytest.raises(ValueError, match="d_q == d_k, got d_q=9, d_k=8"):
        lv.attention_via_attention(q, Fw, Fc, rand(4, 6), rand(5, 6), rand(8, 7), rand(3, 7))
    m = lv.AttentionViaAttention(d_q=4, d_f_w=6, d_f_c=7)
    with pytest.raises(ValueError, match="d_q of q == d_q of the module"):
        m(rand(1, 3), Fw, Fc)


# ---------------------------------------------------------------- hierarchical attention (Fig. 8)


def _weights(d_f=5, d_k=4, d_vS=3, d_vD=2, seed=10, dtype=torch.float32):
    return dict(
        q_S=rand(d_k, seed=seed, dtype=dtype),
        W_K_S=rand(d_k, d_f, seed=seed + 1, dtype=dtype),
        W_V_S=rand(d_vS, d_f, seed=seed + 2, dtype=dtype),
        q_D=rand(d_k, seed=seed + 3, dtype=dtype),
        W_K_D=rand(d_k, d_vS, seed=seed + 4, dtype=dtype),
        W_V_D=rand(d_vD, d_vS, seed=seed + 5, dtype=dtype),
    )


def _brute_force_hierarchical(F, mask, w):
    """Loops over documents, sentences and words with Python floats."""
    B, n_S, n_w, _ = F.shape
    d_k = w["q_S"].shape[0]
    out_c, out_aS, out_aW = [], [], []
    for b in range(B):
        sent_vecs, sent_ok, aW = [], [], []
        for s in range(n_S):
            words = [l for l in range(n_w) if mask[b, s, l]]
            scores = [float(w["q_S"] @ (w["W_K_S"] @ F[b, s, l])) / math.sqrt(d_k) for l in words]
            a = softmax_list(scores) if words else []
            row = [0.0] * n_w
            c = torch.zeros(w["W_V_S"].shape[0])
            for l, al in zip(words, a):
                row[l] = al
                c = c + al * (w["W_V_S"] @ F[b, s, l])
            aW.append(row)
            sent_vecs.append(c)
            sent_ok.append(bool(words))
        idx = [s for s in range(n_S) if sent_ok[s]]
        scores = [float(w["q_D"] @ (w["W_K_D"] @ sent_vecs[s])) / math.sqrt(d_k) for s in idx]
        a = softmax_list(scores) if idx else []
        aS = [0.0] * n_S
        c = torch.zeros(w["W_V_D"].shape[0])
        for s, al in zip(idx, a):
            aS[s] = al
            c = c + al * (w["W_V_D"] @ sent_vecs[s])
        out_c.append(c)
        out_aS.append(aS)
        out_aW.append(aW)
    return torch.stack(out_c), torch.tensor(out_aS), torch.tensor(out_aW)


def _mask(B=3, n_S=4, n_w=5, seed=0):
    m = rand(B, n_S, n_w, seed=seed) > -0.6
    m[:, :, 0] = True
    m[0, 2] = False  # an empty sentence in the middle of a document
    return m


@pytest.mark.catalog("extra:hierarchical-attention")
def test_hierarchical_matches_brute_force_loops():
    F, mask, w = rand(3, 4, 5, 5), _mask(), _weights()
    r = lv.hierarchical_attention(F, word_mask=mask, **w)
    c, aS, aW = _brute_force_hierarchical(F, mask, w)
    torch.testing.assert_close(r.c, c, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(r.a_chunk, aS, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(r.a_word, aW, atol=1e-6, rtol=1e-5)
    assert r.C.shape == (3, 4, 3)


@pytest.mark.catalog("extra:hierarchical-attention", "extra:hierarchical-chunk-contexts")
def test_empty_sentence_gets_zero_weight_and_zero_vector():
    F, mask, w = rand(3, 4, 5, 5), _mask(), _weights()
    F = F.clone().requires_grad_(True)
    r = lv.hierarchical_attention(F, word_mask=mask, **w)
    assert r.a_chunk[0, 2] == 0 and torch.all(r.a_word[0, 2] == 0)
    assert torch.equal(r.C[0, 2], torch.zeros(3))
    torch.testing.assert_close(r.a_chunk.sum(-1), torch.ones(3))
    r.c.sum().backward()
    assert torch.isfinite(F.grad).all()
    # the review's eq. 8-9 form does the same
    r2 = lv.hierarchical_chunk_attention(rand(4), rand(3, 4, 5, 4), rand(3, 4, 5, 4, seed=1), mask)
    assert r2.a_chunk[0, 2] == 0 and torch.equal(r2.C[0, 2], torch.zeros(4))
    # a document that is all padding gives a zero document vector
    empty = torch.zeros(1, 4, 5, dtype=torch.bool)
    r3 = lv.hierarchical_attention(rand(1, 4, 5, 5), word_mask=empty, **w)
    assert torch.equal(r3.c, torch.zeros(1, 2)) and torch.equal(r3.a_chunk, torch.zeros(1, 4))


@pytest.mark.catalog("extra:hierarchical-attention")
def test_padding_does_not_change_the_result():
    F, mask, w = rand(3, 4, 5, 5), _mask(), _weights()
    r = lv.hierarchical_attention(F, word_mask=mask, **w)
    # write garbage into padded positions and add an extra empty sentence + padded word slot
    F2 = torch.where(mask[..., None], F, 1e3 * rand(*F.shape, seed=9))
    F2 = F_.pad(F2, (0, 0, 0, 1, 0, 1), value=7.0)
    mask2 = F_.pad(mask, (0, 1, 0, 1), value=False)
    r2 = lv.hierarchical_attention(F2, word_mask=mask2, **w)
    torch.testing.assert_close(r2.c, r.c)
    torch.testing.assert_close(r2.a_chunk[:, :4], r.a_chunk)
    assert torch.all(r2.a_chunk[:, 4] == 0)


@pytest.mark.catalog("extra:hierarchical-attention")
def test_hierarchical_permutation_invariance():
    F, mask, w = rand(3, 4, 5, 5), _mask(), _weights()
    r = lv.hierarchical_attention(F, word_mask=mask, **w)
    ps, pw = torch.tensor([2, 0, 3, 1]), torch.tensor([4, 1, 0, 3, 2])
    # permuting sentences permutes sentence weights; permuting words inside sentences permutes word weights
    r2 = lv.hierarchical_attention(F[:, ps][:, :, pw], word_mask=mask[:, ps][:, :, pw], **w)
    torch.testing.assert_close(r2.c, r.c)
    torch.testing.assert_close(r2.a_chunk, r.a_chunk[:, ps])
    torch.testing.assert_close(r2.a_word, r.a_word[:, ps][:, :, pw])
    # flat attention is invariant to any permutation of all words, hierarchical is not:
    # moving one word to another sentence changes the hierarchical result
    F3 = F.clone()
    F3[1, 0, 0], F3[1, 1, 0] = F[1, 1, 0], F[1, 0, 0]
    F3[1, 0, 1], F3[1, 3, 1] = F[1, 3, 1], F[1, 0, 1]
    full = torch.ones(3, 4, 5, dtype=torch.bool)
    r3 = lv.hierarchical_attention(F3, word_mask=full, **w)
    r4 = lv.hierarchical_attention(F, word_mask=full, **w)
    assert not torch.allclose(r3.c[1], r4.c[1], atol=1e-4)
    K, V = rand(3, 4, 5, 4, seed=1), rand(3, 4, 5, 2, seed=2)
    c_flat, _ = lv.flat_attention(rand(4), K, V)
    perm = torch.randperm(20, generator=torch.Generator().manual_seed(0))
    Kp = K.reshape(3, 20, 4)[:, perm].reshape(3, 4, 5, 4)
    Vp = V.reshape(3, 20, 2)[:, perm].reshape(3, 4, 5, 2)
    torch.testing.assert_close(lv.flat_attention(rand(4), Kp, Vp)[0], c_flat)


@pytest.mark.catalog("extra:hierarchical-attention")
def test_hierarchical_large_scores_and_gradcheck():
    F, mask, w = rand(2, 4, 5, 5), _mask(2), _weights()
    big = {k: (v * 1e3 if k.startswith("q") else v) for k, v in w.items()}
    r = lv.hierarchical_attention(F * 10, word_mask=mask, **big)
    for t in r:
        assert torch.isfinite(t).all()
    torch.testing.assert_close(r.a_chunk.sum(-1), torch.ones(2))
    # float64 gradcheck through both levels, with an empty sentence
    F64 = rand(1, 3, 3, 3, dtype=torch.float64).requires_grad_(True)
    w64 = {k: v.requires_grad_(True) for k, v in _weights(3, 2, 2, 2, dtype=torch.float64).items()}
    m = _mask(1, 3, 3)
    names = list(w64)
    fn = lambda F, *ws: lv.hierarchical_attention(F, word_mask=m, **dict(zip(names, ws))).c
    assert torch.autograd.gradcheck(fn, (F64, *w64.values()))
    K = rand(1, 3, 3, 3, dtype=torch.float64, seed=3).requires_grad_(True)
    q = rand(3, dtype=torch.float64, seed=4).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda q, K: lv.hierarchical_chunk_attention(q, K, K, m).c, (q, K))


@pytest.mark.catalog("extra:hierarchical-attention")
def test_hierarchical_rejects_mismatched_documents():
    w = _weights()
    with pytest.raises(ValueError, match=r"F must have shape \(\.\.\., n_S, n_w, d_f\^\(S\)\)"):
        lv.hierarchical_attention(rand(4, 5), **w)
    with pytest.raises(ValueError, match=r"word_mask must have shape \(\.\.\., n_S, n_w\) = \(3, 4, 5\)"):
        lv.hierarchical_attention(rand(3, 4, 5, 5), word_mask=torch.ones(3, 4, 6, dtype=torch.bool), **w)
    with pytest.raises(ValueError, match="word_mask must be a boolean"):
        lv.hierarchical_attention(rand(3, 4, 5, 5), word_mask=torch.ones(3, 4, 5), **w)
    with pytest.raises(ValueError, match=r"W_K must have shape \(d_k, d_f\) = \(4, 6\)"):
        lv.hierarchical_attention(rand(3, 4, 5, 6), **w)
    bad = dict(w, W_K_D=rand(4, 5))
    with pytest.raises(ValueError, match=r"W_K\^\(D\) must have shape \(d_k\^\(D\), d_v\^\(S\)\)"):
        lv.hierarchical_attention(rand(3, 4, 5, 5), **bad)
    with pytest.raises(ValueError, match=r"K and V must hold the same documents.*\(2, 4, 5\).*\(2, 3, 5\)"):
        lv.chunk_contexts(rand(4), rand(2, 4, 5, 4), rand(2, 3, 5, 4))
    m = lv.HierarchicalAttention(d_f=5, d_k=4)
    with pytest.raises(ValueError, match="d_f of F == d_f of the module, got d_f of F=6, d_f of the module=5"):
        m(rand(2, 3, 4, 6))


@pytest.mark.catalog("extra:hierarchical-chunk-contexts")
def test_chunk_contexts_match_per_sentence_attend():
    q, K, V, mask = rand(3, 4), rand(3, 4, 5, 4, seed=1), rand(3, 4, 5, 6, seed=2), _mask()
    C, aW = lv.chunk_contexts(q, K, V, mask)
    for b in range(3):
        for s in range(4):
            c, a = attend(q[b][None], K[b, s], V[b, s], mask[b, s][None])
            torch.testing.assert_close(C[b, s], c[0])
            torch.testing.assert_close(aW[b, s], a[0])
    r = lv.hierarchical_chunk_attention(q, K, K, mask)
    for b in range(3):
        c, a = attend(q[b][None], r.C[b], r.C[b], lv.sentence_mask(mask[b])[None])
        torch.testing.assert_close(r.c[b], c[0])
        torch.testing.assert_close(r.a_chunk[b], a[0])


# ---------------------------------------------------------------- review eq. 7 vs eq. 8-9


@pytest.mark.catalog("extra:hierarchical-scaled-weights")
def test_scaled_weights_hand_computed():
    a_word = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    a_chunk = torch.tensor([0.25, 0.75])
    out = lv.scaled_word_weights(a_word, a_chunk)
    # products: [.125, .125, 0], [.15, .225, .375]; they sum to 1 already
    torch.testing.assert_close(out, torch.tensor([[0.125, 0.125, 0.0], [0.15, 0.225, 0.375]]))
    # word weights normalised over the document: the denominator is no longer 1
    a_word = torch.tensor([[0.1, 0.1], [0.4, 0.4]])
    a_chunk = torch.tensor([0.5, 0.5])
    out = lv.scaled_word_weights(a_word, a_chunk)
    torch.testing.assert_close(out, torch.tensor([[0.1, 0.1], [0.4, 0.4]]))
    a_chunk = torch.tensor([0.8, 0.2])  # products .08,.08,.08,.08 -> uniform
    torch.testing.assert_close(lv.scaled_word_weights(a_word, a_chunk), torch.full((2, 2), 0.25))
    # everything masked -> zeros, not NaN
    z = lv.scaled_word_weights(a_word, a_chunk, torch.zeros(2, 2, dtype=torch.bool))
    assert torch.equal(z, torch.zeros(2, 2))


@pytest.mark.catalog("extra:hierarchical-scaled-weights")
def test_scaled_weights_rejects_bad_input():
    with pytest.raises(ValueError, match=r"a_chunk must have shape \(\.\.\., n_S\) = \(2, 3\)"):
        lv.scaled_word_weights(torch.rand(2, 3, 4), torch.rand(2, 4))
    with pytest.raises(ValueError, match="non-negative"):
        lv.scaled_word_weights(-torch.rand(2, 3), torch.rand(2))
    with pytest.raises(ValueError, match=r"V must have shape \(\.\.\., n_S, n_w, d_v\)"):
        lv.hierarchical_scaled_attention(torch.rand(2, 3), torch.rand(2), torch.rand(2, 4, 5))


@pytest.mark.catalog("extra:hierarchical-chunk-contexts", "extra:hierarchical-scaled-weights")
def test_scaled_equals_chunk_contexts_with_same_weights():
    # Derivation: c^doc = sum_m b_m c_m = sum_m b_m sum_i a_mi v_mi = sum_{m,i} (b_m a_mi) v_mi,
    # and with per-chunk normalised a_mi the eq. 7 denominator sum_m b_m sum_i a_mi is 1.
    q, K, V, mask = rand(3, 4), rand(3, 4, 5, 4, seed=1), rand(3, 4, 5, 4, seed=2), _mask()
    r = lv.hierarchical_chunk_attention(q, K, V, mask)
    c7, a7 = lv.hierarchical_scaled_attention(r.a_word, r.a_chunk, V, mask)
    torch.testing.assert_close(c7, r.c)
    torch.testing.assert_close(a7, r.a_word * r.a_chunk[..., None])
    # a linear value map W at the document level commutes with the weighted sum
    W = rand(3, 4, seed=5)
    rl = lv.hierarchical_chunk_attention(q, K, V, mask, value_map=lambda C: C @ W.T)
    torch.testing.assert_close(rl.c, c7 @ W.T)


@pytest.mark.catalog("extra:hierarchical-chunk-contexts")
def test_forms_disagree_with_nonlinear_values():
    q, K, V, mask = rand(3, 4), rand(3, 4, 5, 4, seed=1), rand(3, 4, 5, 4, seed=2), _mask()
    r = lv.hierarchical_chunk_attention(q, K, V, mask, value_map=torch.tanh)
    c7, _ = lv.hierarchical_scaled_attention(r.a_word, r.a_chunk, torch.tanh(V), mask)
    assert (r.c - c7).abs().max() > 1e-2


@pytest.mark.catalog("extra:hierarchical-scaled-weights")
def test_scaled_with_document_normalised_words_reweights_chunks():
    # If a_mi is normalised over the whole document, a_mi = p_m r_mi with p_m the
    # mass of chunk m; eq. 7 then equals eq. 8-9 with chunk weights b'_m ~ p_m b_m.
    K, V, mask = rand(2, 3, 4, 4, seed=1), rand(2, 3, 4, 4, seed=2), _mask(2, 3, 4)
    _, a_flat = lv.flat_attention(rand(4), K, V, mask)
    b = torch.softmax(rand(2, 3, seed=7), -1)
    c7, a7 = lv.hierarchical_scaled_attention(a_flat, b, V, mask)
    p = a_flat.sum(-1)
    r_within = torch.nan_to_num(a_flat / p[..., None])  # an empty chunk has p_m = 0
    b_eff = p * b / (p * b).sum(-1, keepdim=True)
    c89 = torch.einsum("bm,bmd->bd", b_eff, torch.einsum("bmi,bmid->bmd", r_within, V))
    torch.testing.assert_close(c7, c89)
    # and it differs from using b directly unless p is constant
    c_b = torch.einsum("bm,bmd->bd", b, torch.einsum("bmi,bmid->bmd", r_within, V))
    assert (c7 - c_b).abs().max() > 1e-3


# ---------------------------------------------------------------- the experiment, small


def test_document_data_has_one_deciding_sentence():
    d = make_documents(50, n_sentences=4, min_sentences=2, generator=torch.Generator().manual_seed(0))
    assert d.tokens.shape == (50, 4, 6) and torch.equal(d.word_mask, d.tokens != 0)
    has_key = (d.tokens == KEY).any(-1)
    assert torch.equal(has_key.sum(-1), torch.ones(50, dtype=torch.long))
    assert torch.equal(has_key.float().argmax(-1), d.key_sentence)
    key_sent = d.tokens[torch.arange(50), d.key_sentence]
    good = ((key_sent >= 2) & (key_sent < 5)).any(-1).long()
    assert torch.equal(good, d.labels)
    assert (~d.word_mask.any(-1)).any()  # some empty sentences
    with pytest.raises(ValueError, match="min_sentences"):
        make_documents(3, n_sentences=2, min_sentences=3)


N_STEPS = 50


@pytest.mark.catalog("extra:hierarchical-attention")
def test_hierarchical_beats_flat_on_deciding_sentence_task(one_thread):
    from attnsurvey.training import accuracy, train

    g = torch.Generator().manual_seed(0)
    data = make_documents(500, n_sentences=4, min_sentences=3, generator=g)
    tr, te = data.subset(slice(0, 300)), data.subset(slice(300, None))

    def batches(n):
        gg = torch.Generator().manual_seed(1)
        for _ in range(n):
            i = torch.randint(0, 300, (64,), generator=gg)
            yield tr.tokens[i], tr.word_mask[i], tr.labels[i]

    accs, mass = {}, {}
    for kind in ("hierarchical", "flat"):
        torch.manual_seed(0)
        m = DocumentClassifier(len(data.vocab), 12, 2, kind)
        train(m, lambda m, b: F_.cross_entropy(m(b[0], b[1]).logits, b[2]), batches(N_STEPS), lr=5e-2)
        with torch.no_grad():
            out = m(te.tokens, te.word_mask)
        accs[kind] = accuracy(out.logits, te.labels)
        mass[kind] = float(out.a_chunk[torch.arange(len(te)), te.key_sentence].mean())
        torch.testing.assert_close(out.a_chunk.sum(-1), torch.ones(len(te)))
    assert accs["hierarchical"] > 0.9 > accs["flat"], accs
    assert mass["hierarchical"] > 0.6 > mass["flat"], mass


@pytest.mark.catalog("extra:hierarchical-attention")
def test_flat_attention_is_one_softmax_over_every_word_of_the_document():
    """The baseline against a hand loop: scaled dot scores of every unmasked word, one softmax per document."""
    f64 = torch.float64
    q, K, V = rand(3, 4, seed=3, dtype=f64), rand(3, 4, 5, 4, seed=4, dtype=f64), rand(3, 4, 5, 2, seed=5, dtype=f64)
    mask = torch.ones(3, 4, 5, dtype=torch.bool)
    mask[0, 1] = False  # an empty sentence
    mask[2, :, 3:] = False  # short sentences
    c, a = lv.flat_attention(q, K, V, mask)
    for b in range(3):
        words = [(s, w) for s in range(4) for w in range(5) if mask[b, s, w]]
        e = torch.tensor([float(q[b] @ K[b, s, w]) / math.sqrt(4) for s, w in words], dtype=torch.float64)
        p = torch.exp(e - e.max())
        p = p / p.sum()
        want_a = torch.zeros(4, 5, dtype=torch.float64)
        for (s, w), pw in zip(words, p, strict=True):
            want_a[s, w] = pw
        torch.testing.assert_close(a[b], want_a)
        torch.testing.assert_close(c[b], sum(pw * V[b, s, w] for (s, w), pw in zip(words, p, strict=True)))


def test_hierarchical_scaled_attention_ignores_nan_in_a_padded_word():
    """Review 2, A: the einsum met the NaN of a padded word's value (0 * NaN), so the whole c was NaN."""
    q, K, V = rand(4, seed=1), rand(2, 3, 4, seed=2), rand(2, 3, 4, seed=3)
    wm = torch.tensor([[True, True, False], [True, False, False]])
    _, a_word = lv.chunk_contexts(q, K, V, wm)
    a_chunk = torch.tensor([0.6, 0.4])
    bad = V.clone()
    bad[0, 2] = bad[1, 1] = float("nan")
    c, a = lv.hierarchical_scaled_attention(a_word, a_chunk, bad, wm)
    want = sum(a[m, i] * V[m, i] for m in range(2) for i in range(3) if wm[m, i])  # by hand, real words only
    torch.testing.assert_close(c, want)
    bad[0, 0] = float("nan")  # a real word's NaN still shows
    assert torch.isnan(lv.hierarchical_scaled_attention(a_word, a_chunk, bad, wm)[0]).all()
    # the scaled weights select the real words: NaN stored in a padded word's weight is inert
    a_nan = torch.tensor([[0.5, 0.5, float("nan")], [1.0, float("nan"), float("nan")]])
    got = lv.scaled_word_weights(a_nan, a_chunk, wm)
    torch.testing.assert_close(got, torch.tensor([[0.3, 0.3, 0.0], [0.4, 0.0, 0.0]]))  # by hand: products / 1.0


def test_flat_context_words_carry_the_mean_of_their_sentence():
    torch.manual_seed(0)
    m = DocumentClassifier(6, d_e=2, n_classes=2, kind="flat-context")
    flat = DocumentClassifier(6, d_e=2, n_classes=2, kind="flat")
    flat.load_state_dict(m.state_dict())
    tokens = torch.tensor([[[1, 2, 0], [3, 0, 0]]])  # two sentences, padded
    E = m.embed.weight.detach()
    # by hand: sentence 0 has mean (E1 + E2)/2, sentence 1 has mean E3; padding stays E0 = 0 (masked anyway)
    by_hand = torch.stack([E[1] + (E[1] + E[2]) / 2, E[2] + (E[1] + E[2]) / 2, E[0] + (E[1] + E[2]) / 2])
    by_hand = torch.stack([by_hand, torch.stack([E[3] + E[3], E[0] + E[3], E[0] + E[3]])])
    # the flat model fed those vectors must give the flat-context model's output
    flat.embed = torch.nn.Embedding.from_pretrained(torch.cat([by_hand.reshape(6, 2)]), freeze=True)
    out = m(tokens)
    ref = flat(torch.arange(6).reshape(1, 2, 3) + 0, tokens != 0)
    torch.testing.assert_close(out.logits, ref.logits)
    torch.testing.assert_close(out.a_word, ref.a_word)
