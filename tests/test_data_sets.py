"""Tests for the match-the-query task of Chapter 2 and its Fig. 1 task model."""

from __future__ import annotations

import pytest
import torch

from attnsurvey import general_model as gm
from attnsurvey.data.sets import match_query_batch
from attnsurvey.general_model import TaskModel


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_noise_free_query_points_at_the_target_item():
    b = match_query_batch(64, n_items=9, d_u=6, n_classes=3, noise=0.0, generator=gen())
    u = b.F[..., :6]
    sims = (u @ b.q[:, :, None]).squeeze(-1)  # cosine similarity: keys and q are unit vectors
    assert torch.equal(sims.argmax(-1), b.target)
    assert torch.equal(b.F[torch.arange(64), b.target, 6:].argmax(-1), b.y)


def test_grid_is_the_same_set_as_the_sequence():
    s = match_query_batch(4, n_items=16, layout="sequence", generator=gen(1))
    g = match_query_batch(4, n_items=16, layout="grid", generator=gen(1))
    assert g.F.shape == (4, 4, 4, 12)
    assert torch.equal(g.flat_F(), s.F) and torch.equal(g.q, s.q) and torch.equal(g.target, s.target)


def test_graph_mask_is_the_query_nodes_neighbourhood():
    b = match_query_batch(32, n_items=10, layout="graph", edge_prob=0.2, generator=gen(2))
    A = b.adjacency
    assert torch.equal(A, A.transpose(1, 2)) and not A.diagonal(dim1=1, dim2=2).any()
    assert b.mask.any(-1).all()  # every query node has a neighbour
    assert b.mask[torch.arange(32), b.target].all()  # the answer is a neighbour
    # every example's mask is the adjacency row of some node of its graph (its query node)
    assert all(any(torch.equal(b.mask[i], A[i, c]) for c in range(10)) for i in range(32))


@pytest.mark.catalog("extra:task-model")
def test_task_model_is_the_composition_of_fig1():
    torch.manual_seed(0)
    m = TaskModel(d_f=12, d_u=8, n_classes=4, d=16)
    b = match_query_batch(5, layout="graph", generator=gen(3))
    logits, a = m(b.F, b.q, b.mask)
    feats = b.F @ m.feature_model.weight.T + m.feature_model.bias  # feature model
    q = b.q @ m.query_model.weight.T + m.query_model.bias  # query model
    K, V = gm.keys_values(feats, m.attention.W_K.weight, m.attention.W_V.weight)  # Eq. (1)
    c, a_ref = gm.attend(q[:, None], K, V, b.mask[:, None])  # Eq. (2)-(4)
    torch.testing.assert_close(a, a_ref[:, 0])
    y = gm.output_model(c[:, 0], m.output.linear.weight, m.output.linear.bias)  # Eq. (5)
    torch.testing.assert_close(torch.softmax(logits, -1), y)
    assert torch.all(a[~b.mask] == 0)


@pytest.mark.catalog("extra:task-model")
def test_mean_pool_baseline_is_uniform_attention():
    torch.manual_seed(0)
    m = TaskModel(d_f=12, d_u=8, n_classes=4, d=16, pool="mean")
    b = match_query_batch(6, n_items=8, layout="graph", generator=gen(4))
    logits, a = m(b.F, b.q, b.mask)
    expected = b.mask.float() / b.mask.sum(-1, keepdim=True)
    torch.testing.assert_close(a, expected)
    _, V = m.attention.keys_values(m.feature_model(b.F))
    mean = (V * b.mask[..., None]).sum(1) / b.mask.sum(-1, keepdim=True)
    torch.testing.assert_close(logits, m.output.logits(mean))
    # the baseline ignores the query completely
    torch.testing.assert_close(m(b.F, torch.randn(6, 8), b.mask)[0], logits)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="unknown layout 'tree'"):
        match_query_batch(2, layout="tree")
    with pytest.raises(ValueError, match="a grid needs n = H \\* W with H = W, got n=10"):
        match_query_batch(2, n_items=10, layout="grid")
    with pytest.raises(ValueError, match="need batch_size"):
        match_query_batch(0)
    with pytest.raises(ValueError, match="pool must be"):
        TaskModel(4, 4, 2, pool="max")
