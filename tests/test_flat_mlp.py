"""FlatMLP, the no-attention baseline of the match-the-query experiment: its input and its output by hand."""

from __future__ import annotations

import pytest
import torch

from attnsurvey.experiments.general_model import FlatMLP, evaluate_match_query, fit_match_query


def test_output_is_one_relu_layer_on_query_masked_items_and_mask():
    m = FlatMLP(d_f=2, d_u=1, n_items=2, n_classes=2, d_hidden=3)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.linspace(-1, 1, p.numel()).reshape(p.shape))
    F = torch.tensor([[[1.0, 2.0], [float("nan"), 5.0]]])  # item 2 is masked and holds NaN
    q = torch.tensor([[0.5]])
    mask = torch.tensor([[True, False]])
    logits, a = m(F, q, mask)
    # by hand: the input is [q; f_1; f_2 zeroed; mask] = [0.5, 1, 2, 0, 0, 1, 0]
    x = [0.5, 1.0, 2.0, 0.0, 0.0, 1.0, 0.0]
    W1, b1, W2, b2 = (t.tolist() for t in (m.hidden.weight, m.hidden.bias, m.out.weight, m.out.bias))
    h = [max(0.0, sum(w * v for w, v in zip(W1[j], x)) + b1[j]) for j in range(3)]
    expected = [sum(w * v for w, v in zip(W2[k], h)) + b2[k] for k in range(2)]
    torch.testing.assert_close(logits[0], torch.tensor(expected))
    assert a is None and sum(p.numel() for p in m.parameters()) == 7 * 3 + 3 + 3 * 2 + 2


def test_refuses_wrong_shapes_and_a_float_mask():
    m = FlatMLP(d_f=2, d_u=1, n_items=2, n_classes=2, d_hidden=3)
    with pytest.raises(ValueError, match="n=2, d_f=2"):
        m(torch.zeros(1, 3, 2), torch.zeros(1, 1))
    with pytest.raises(ValueError, match="boolean"):
        m(torch.zeros(1, 2, 2), torch.zeros(1, 1), torch.ones(1, 2))
    with pytest.raises(ValueError, match="d_hidden to be an integer >= 1"):
        FlatMLP(2, 1, 2, 2, 0)


def test_the_match_query_loop_trains_it_and_reports_accuracy_only():
    torch.manual_seed(0)
    m = FlatMLP(d_f=12, d_u=8, n_items=16, n_classes=4, d_hidden=5)
    fit_match_query(m, 3, torch.Generator().manual_seed(0), batch_size=8, layout="graph")
    r = evaluate_match_query(m, 20, torch.Generator().manual_seed(1), layout="graph")
    assert set(r) == {"accuracy"} and 0.0 <= r["accuracy"] <= 1.0
