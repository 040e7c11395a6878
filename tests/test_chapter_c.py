"""Experiment helpers of the Transformer-variants and evaluation chapters (attnsurvey.experiments.chapter_c)."""

from __future__ import annotations

import pytest
import torch

from attnsurvey.experiments import chapter_c as cc
from attnsurvey.general_model import attend
from attnsurvey.transformer import linformer, local


def test_weight_bytes_equal_the_tensors_the_implementations_build():
    g = torch.Generator().manual_seed(0)
    n, d, w, k = 64, 8, 3, 16
    Q, K, V = (torch.randn(n, d, generator=g) for _ in range(3))
    _, a_full = attend(Q, K, V)
    _, a_local = local.local_window_attention(Q, K, V, w)
    _, a_lin = linformer.linformer_attention(Q, K, V, torch.randn(k, n, generator=g), torch.randn(k, n, generator=g))
    for method, a in [("full", a_full), ("local", a_local), ("linformer", a_lin)]:
        cost = cc.analytic_attention_cost(method, n, d, w=w, k=k)
        assert cost["weight_bytes"] == a.numel() * a.element_size(), method


def test_macs_by_hand_and_lsh_is_n_log_n():
    assert cc.analytic_attention_cost("full", 10, 3)["macs"] == 600
    assert cc.analytic_attention_cost("linformer", 10, 3, k=2)["macs"] == 4 * 10 * 2 * 3
    lsh = cc.analytic_attention_cost("lsh", 1024, 4, m=8, n_buckets=2)
    assert lsh["macs"] == 1024 * 4 * 1 + 1024 * 10 + 2 * 1024 * 16 * 4
    assert "log" in lsh["order"]
    with pytest.raises(ValueError, match="method must be 'full', 'local', 'linformer' or 'lsh', got 'sparse'"):
        cc.analytic_attention_cost("sparse", 8, 2)


def test_segment_average_linformer_is_exact_without_noise():
    g = torch.Generator().manual_seed(1)
    Q, K, V = cc.low_rank_sequences(3, 32, 4, 4, 0.0, g)
    S = cc.segment_average(32, 4)
    c, _ = linformer.linformer_attention(Q, K, V, S, S)
    assert cc.relative_error(c, attend(Q, K, V)[0]) < 1e-5
    assert cc.relative_error(torch.zeros_like(c), c) == 1.0
    with pytest.raises(ValueError, match="r=4 must divide n=30"):
        cc.low_rank_sequences(1, 30, 4, 4, 0.0, g)


def test_trained_projections_beat_their_random_start():
    g = torch.Generator().manual_seed(2)
    Q, K, V = cc.low_rank_sequences(8, 32, 4, 4, 0.1, g)
    full = attend(Q, K, V)[0]
    E0 = torch.randn(8, 32, generator=torch.Generator().manual_seed(3)) / 8**0.5
    F0 = torch.randn(8, 32, generator=torch.Generator().manual_seed(3)) / 8**0.5
    before = cc.relative_error(linformer.linformer_attention(Q, K, V, E0, F0)[0], full)
    E, F = cc.fit_linformer_projections(Q, K, V, full, 8, steps=60, lr=0.03, generator=torch.Generator().manual_seed(3))
    after = cc.relative_error(linformer.linformer_attention(Q, K, V, E, F)[0], full)
    assert after < 0.5 * before


def test_reversal_tagger_learned_sd_changes_the_scale_of_the_table_only():
    from attnsurvey.experiments.chapter_c import train_reversal_tagger

    small = train_reversal_tagger("learned", 3, steps=0, learned_sd=0.02)
    big = train_reversal_tagger("learned", 3, steps=0, learned_sd=1.0)
    torch.testing.assert_close(big.position.P, small.position.P / 0.02)  # the same draws, 50 times larger
    assert abs(float(big.position.P.detach().std()) - 1.0) < 0.2
    for (name, a), (_, b) in zip(small.named_parameters(), big.named_parameters()):
        if name != "position.P":
            torch.testing.assert_close(a, b)


def test_reversal_tagger_refuses_bad_options():
    from attnsurvey.experiments.chapter_c import train_reversal_tagger

    with pytest.raises(ValueError, match="n=17"):
        train_reversal_tagger("learned", 0, n=17, steps=0)
    with pytest.raises(ValueError, match="learned_sd"):
        train_reversal_tagger("learned", 0, learned_sd=0.0, steps=0)


def test_reversal_accuracy_is_the_token_accuracy_on_its_test_batch():
    from attnsurvey.data.sequences import reversal_batch
    from attnsurvey.experiments.chapter_c import reversal_accuracy, train_reversal_tagger

    m = train_reversal_tagger("relative", 0, steps=2)
    x, y = reversal_batch(40, 8, 10, torch.Generator().manual_seed(5))
    with torch.no_grad():
        hand = float((m(x)[0].argmax(-1) == y).float().mean())
    assert reversal_accuracy(m, 8, n_test=40, seed=5) == pytest.approx(hand)
