"""The builder: every Table III configuration builds, runs and describes itself; bad input raises."""

from __future__ import annotations

import pytest
import torch

from attnsurvey import builder as B
from attnsurvey import taxonomy as tx
from attnsurvey.data.taxonomy_tasks import two_marker_task
from attnsurvey.general_mechanisms.scoring import make_score
from attnsurvey.general_model import GeneralAttention
from attnsurvey.query_related.multihead import MultiHeadAttention

D, N_F, N_G, N_CLS, BATCH = 8, 8, 3, 3, 4


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models run fastest (and identically) on one thread; restore afterwards."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(BATCH, N_F, D, generator=g),
        torch.randn(BATCH, N_G, D, generator=g),
        torch.randint(0, N_CLS, (BATCH,), generator=g),
    )


def _build(p: tx.TaxonomyPoint, **kw):
    return B.build_model(p, D, N_CLS, **kw)


def _forward_backward(p: tx.TaxonomyPoint) -> None:
    torch.manual_seed(0)
    model = _build(p, n_max=N_F)
    F, G, y = _inputs()
    model.train()
    loss = model.loss(F, G, y, generator=torch.Generator().manual_seed(1))
    assert torch.isfinite(loss)
    loss.backward()
    grads = [prm.grad for prm in model.parameters() if prm.grad is not None]
    assert grads, "no parameter received a gradient"
    assert all(torch.isfinite(gr).all() for gr in grads)
    assert model.out is None or model.out.weight.grad.abs().sum() > 0  # the output layer learns
    model.eval()
    with torch.no_grad():
        logits = model(F, G)
    assert logits.shape == (BATCH, N_CLS) and torch.isfinite(logits).all()
    assert model.last_weights.shape[-1] == N_F
    assert B.describe(model) == p


@pytest.mark.catalog(
    "table3:row01",
    "table3:row02",
    "table3:row03",
    "table3:row04",
    "table3:row05",
    "table3:row06",
    "table3:row07",
    "table3:row08",
    "table3:row09",
    "table3:row10",
    "table3:row11",
    "table3:row12",
    "table3:row13",
    "table3:row14",
    "table3:row15",
    "table3:row16",
    "table3:row17",
    by_param=True,
)
@pytest.mark.parametrize("row", tx.TABLE3, ids=[r.id for r in tx.TABLE3])
def test_table3_row_builds_runs_and_describes(row):
    configs = row.point.configurations()
    assert len(configs) >= 1
    for p in configs:
        _forward_backward(p)


_VALUES = [(dim, v) for group in tx.TAXONOMY.values() for dim, values in group.items() for v in values]


@pytest.mark.catalog("extra:taxonomy-builder")
@pytest.mark.parametrize("dim,value", _VALUES, ids=[f"{d}={v}" for d, v in _VALUES])
def test_every_value_of_every_dimension_builds(dim, value):
    extra = {"query_type": "self-attention"} if value == "capsule-based" else {}
    _forward_backward(B.point(**{**extra, dim: value}))


_SUGGESTED = [  # the combinations §5 suggests, and a Transformer-like one with hard alignment
    dict(dimensionality="multi-dimensional", query_multiplicity="multi-head"),
    dict(feature_multiplicity="rotatory", scoring="activated-general", query_multiplicity="multi-hop"),
    dict(query_type="self-attention", query_multiplicity="capsule-based + multi-hop"),
    dict(alignment="hard", query_multiplicity="multi-head + multi-hop", query_type="self-attention + basic"),
]


@pytest.mark.catalog("extra:combined-mechanisms")
@pytest.mark.parametrize("kw", _SUGGESTED, ids=["md+mh", "rot+hop", "caps+hop", "hard+mh+hop"])
def test_combined_mechanisms_build(kw):
    _forward_backward(B.point(**kw))


def test_options_default_from_build_defaults_and_unknown_names_raise():
    p = B.point(query_multiplicity="multi-head + multi-hop")
    torch.manual_seed(0)
    by_default = B.build_model(p, 8, 2)
    torch.manual_seed(0)
    spelled_out = B.build_model(p, 8, 2, **B.BUILD_DEFAULTS)
    assert all(torch.equal(a, b) for a, b in zip(by_default.state_dict().values(), spelled_out.state_dict().values()))
    assert (by_default.main.h, by_default.n_hops, by_default.hop_form) == (2, 2, "memory")
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['head'\]"):
        B.build_model(p, 8, 2, head=4)


def test_incompatible_sizes_inside_a_component_name_the_dimension():
    with pytest.raises(ValueError, match="scoring='multiplicative'.*attention-via-attention.*d_"):
        _build(B.point(scoring="multiplicative", feature_levels="attention-via-attention"))


@pytest.mark.catalog("extra:taxonomy-builder")
def test_describe_round_trip_and_plain_modules():
    p = B.point(
        scoring="scaled-multiplicative",
        query_type="self-attention + basic",
        query_multiplicity="multi-head + multi-hop",
    )
    assert p == tx.table3_row("table3:row07").point
    assert B.describe(B.build_model(p, D, N_CLS)) == p
    ga = GeneralAttention(D, D, score="additive")
    assert B.describe(ga).scoring == (("additive",),)
    assert B.describe(GeneralAttention(D, D, score="general")).scoring == (("general",),)
    mha = B.describe(MultiHeadAttention(D, 2))
    assert mha.query_multiplicity == (("multi-head",),) and mha.scoring == (("scaled-multiplicative",),)
    assert B.describe(B.LocationScore(D, 4)).scoring == (("location",),)
    with pytest.raises(ValueError, match="does not know module type 'Linear'"):
        B.describe(torch.nn.Linear(2, 2))


@pytest.mark.catalog("extra:taxonomy-builder")
def test_bad_configurations_raise_naming_dimension():
    luong = tx.table3_row("table3:row02").point
    with pytest.raises(ValueError, match="scoring lists 2 alternatives"):
        B.build_model(luong, D, N_CLS)
    with pytest.raises(ValueError, match="'quadratic' is not a value of dimension 'scoring'"):
        B.point(scoring="quadratic")
    with pytest.raises(ValueError, match="unknown dimension"):
        B.point(colour="red")
    with pytest.raises(ValueError, match="query_multiplicity='multi-head': h=2 must divide d_model=7"):
        B.build_model(B.point(query_multiplicity="multi-head"), 7, N_CLS)
    with pytest.raises(ValueError, match="dimensionality='multi-dimensional'.*scoring='general'"):
        B.build_model(B.point(dimensionality="multi-dimensional", scoring="general"), D, N_CLS)
    with pytest.raises(ValueError, match="feature_levels='hierarchical'.*alignment='hard'"):
        B.build_model(B.point(feature_levels="hierarchical", alignment="hard"), D, N_CLS)
    with pytest.raises(ValueError, match="query_multiplicity='singular'"):
        B.build_model(B.point(query_multiplicity="singular + multi-hop"), D, N_CLS)
    model = B.build_model(B.point(scoring="location"), D, N_CLS, n_max=4)
    F, G, _ = _inputs()
    with pytest.raises(ValueError, match="scoring='location' needs n_f <= n_max, got n_f=8, n_max=4"):
        model(F, G)
    with pytest.raises(ValueError, match="needs the query input G"):
        B.build_model(B.point(), D, N_CLS)(F)
    with pytest.raises(ValueError, match=r"G must have shape \(B=4, n_g, d_model=8\)"):
        B.build_model(B.point(), D, N_CLS)(F, G[..., :5])
    with pytest.raises(ValueError, match=r"F must have shape \(B, n_f, d_model=8\)"):
        B.build_model(B.point(), D, N_CLS)(F[..., :5], G)
    hier = _build(B.point(feature_levels="hierarchical"), chunk=3)
    with pytest.raises(ValueError, match="chunks of 3; n_f=8 is not a multiple"):
        hier(F, G)


@pytest.mark.catalog("extra:location-score")
def test_location_score_ignores_keys_and_matches_hand_computation():
    Q = torch.tensor([[[1.0, 2.0]]])
    W_a = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, -1.0]])
    e = B.location_score(Q, W_a, 3)
    torch.testing.assert_close(e, torch.tensor([[[1.0, 2.0, 3.0]]]))  # W_a q, first n_f rows
    m = B.LocationScore(2, 4)
    K1, K2 = torch.randn(1, 3, 5), torch.randn(1, 3, 5)
    torch.testing.assert_close(m(Q, K1), m(Q, K2))  # content of the keys does not matter
    big = B.location_score(Q * 1e4, W_a, 4)
    assert torch.isfinite(torch.softmax(big, -1)).all()


@pytest.mark.catalog("extra:location-score")
def test_location_score_rejects_long_inputs():
    W_a = torch.zeros(4, 2)
    with pytest.raises(ValueError, match="n_f <= n_max, got n_f=5, n_max=4"):
        B.location_score(torch.zeros(1, 1, 2), W_a, 5)
    with pytest.raises(ValueError, match=r"W_a must have shape \(n_max, d_q\)"):
        B.location_score(torch.zeros(1, 1, 3), W_a, 2)


@pytest.mark.catalog("extra:taxonomy-builder")
def test_builder_learns_the_two_marker_task():
    """A query-using model beats one whose learned query cannot see G (a one-dimension change)."""
    g = torch.Generator().manual_seed(0)
    train = two_marker_task(512, 6, 8, 3, g)
    test = two_marker_task(256, 6, 8, 3, g)
    accs = {}
    for qt in ("basic", "self-attention"):
        torch.manual_seed(0)
        m = B.build_model(B.point(scoring="general", query_type=qt), 8, 3)
        opt = torch.optim.Adam(m.parameters(), lr=0.02)
        m.train()
        for step in range(120):
            i = torch.arange(step * 64, step * 64 + 64) % 512
            opt.zero_grad()
            m.loss(train["F"][i], train["G"][i], train["y"][i]).backward()
            opt.step()
        m.eval()
        with torch.no_grad():
            accs[qt] = float((m(test["F"], test["G"]).argmax(-1) == test["y"]).float().mean())
    assert accs["basic"] > 0.85
    assert accs["basic"] > accs["self-attention"] + 0.15


@pytest.mark.catalog("extra:taxonomy-builder")
def test_describe_inspects_the_model_not_its_build_configuration():
    model = B.build_model(B.point(scoring="general", query_multiplicity="multi-head"), D, N_CLS)
    assert B.describe(model).scoring == (("general",),)
    # swap the score modules of every head: describe reports what the model now computes
    for step in model.main.steps:
        step.score = make_score("cosine", D // 2, D // 2)
    assert B.describe(model).scoring == (("similarity",),)
    del model.main.steps[1:]
    model.main.h = 1
    assert B.describe(model).query_multiplicity == (("singular",),)
    assert B.describe(MultiHeadAttention(D, 1)).query_multiplicity == (("singular",),)


def test_module_points_name_each_value_with_its_dimension():
    from attnsurvey import describe as ds

    # hand-written: what the one-row-per-class table must expand to
    assert ds.MODULE_POINTS["RotatoryAttention"] == {
        "feature_multiplicity": "rotatory",
        "scoring": "activated-general",
        "query_type": "specialized",
    }
    assert ds.MODULE_POINTS["MultiHopAttention"] == {"scoring": "general", "query_multiplicity": "multi-hop"}
    assert ds.MODULE_POINTS["GeneralAttention"] == {}
    with pytest.raises(ValueError, match="'singular' must be a value of exactly one dimension"):
        ds._dimension_of("singular")  # feature and query multiplicity both have it
    with pytest.raises(ValueError, match="found in \\[\\]"):
        ds._dimension_of("no-such-mechanism")


def test_describe_rejects_unknown_score_modules():
    class OddScore(torch.nn.Module):
        def forward(self, Q, K):
            return Q @ K.transpose(-1, -2)

    ga = GeneralAttention(D, D)
    ga.score = OddScore()
    with pytest.raises(ValueError, match="does not know score module type 'OddScore'"):
        B.describe(ga)  # an unknown score is refused, not reported as "additive"


@pytest.mark.catalog("eq41")
@pytest.mark.parametrize("hop_form", ["memory", "eq41"])
def test_multi_hop_forms(hop_form):
    p = B.point(scoring="general", query_multiplicity="multi-hop")
    torch.manual_seed(0)
    model = B.build_model(p, D, N_CLS, hops=3, hop_form=hop_form)
    F, G, y = _inputs()
    logits = model(F, G)
    assert logits.shape == (BATCH, N_CLS) and torch.isfinite(logits).all()
    assert B.describe(model) == p
    assert hasattr(model, "H") == (hop_form == "eq41")
    model.loss(F, G, y).backward()


@pytest.mark.catalog("eq41")
def test_memory_network_hop_is_q_plus_c():
    # with one head and the memory form, hop s+1 attends with q^(s) + c^(s): recompute by hand
    p = B.point(scoring="general", query_multiplicity="multi-hop")
    torch.manual_seed(1)
    model = B.build_model(p, D, N_CLS, hops=2).eval()
    F, G, _ = _inputs()
    model(F, G)
    step = model.main.steps[0]
    q = model.W_q(G.mean(-2)).unsqueeze(-2)
    c1, _, _ = step(q, F)
    _, a2, _ = step(q + c1, F)
    torch.testing.assert_close(model.last_weights, a2)
    with pytest.raises(ValueError, match="hop_form must be one of"):
        B.build_model(p, D, N_CLS, hop_form="loop")


@pytest.mark.catalog("extra:location-score")
def test_location_score_lives_in_the_score_registry():
    from attnsurvey.general_mechanisms import scoring as sc

    assert B.location_score is sc.location_score and B.LocationScore is sc.LocationScore
    assert isinstance(sc.make_score("location", D, D, n_max=4), sc.LocationScore)


def _heads(h: int = 2, d: int = D, **step):
    cfg = dict(scoring="scaled-multiplicative", alignment="global", dimensionality="single-dimensional", n_max=N_F)
    torch.manual_seed(3)
    return B.Heads(d, h, **{**cfg, **step})


def _stacked(heads: B.Heads) -> tuple[torch.Tensor, ...]:
    """The heads' weights in the stacked layout of multi_head_attention: W_Q, W_K, W_V, W_O."""
    W_K = torch.cat([s.W_K.weight for s in heads.steps])
    W_V = torch.cat([s.W_V.weight for s in heads.steps])
    return heads.W_Q.weight, W_K, W_V, heads.W_O.weight


@pytest.mark.parametrize("h", [2, 4])
def test_builder_heads_equal_multi_head_attention_and_torch(h):
    # the plain configuration: the builder's heads are multi_head_attention, which is nn.MultiheadAttention
    from attnsurvey.query_related.multihead import multi_head_attention

    heads = _heads(h)
    F, G, _ = _inputs()
    Q = torch.cat([G, F], dim=-2)  # several queries
    out, a, log_prob = heads(Q, F, None)
    assert log_prob is None
    ref_out, ref_a = multi_head_attention(Q, F, F, *_stacked(heads), h, average_attn_weights=True)
    torch.testing.assert_close(out, ref_out, rtol=0, atol=0)
    torch.testing.assert_close(a, ref_a, rtol=0, atol=0)
    W_Q, W_K, W_V, W_O = _stacked(heads)
    mha = torch.nn.MultiheadAttention(D, h, bias=False, batch_first=True)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([W_Q, W_K, W_V]))
        mha.out_proj.weight.copy_(W_O)
    torch_out, torch_a = mha.eval()(Q, F, F)
    torch.testing.assert_close(out, torch_out)
    torch.testing.assert_close(a, torch_a)  # torch averages the head weights too


def _head_by_head(heads: B.Heads, Q: torch.Tensor, F: torch.Tensor, generator):
    """The oracle: project the queries, run step j on head j's queries, concatenate, mix (Eq. 38-40 by hand)."""
    h, d_k = heads.h, Q.shape[-1] // heads.h
    q = Q @ heads.W_Q.weight.T
    outs = [step(q[..., j * d_k : (j + 1) * d_k], F, generator) for j, step in enumerate(heads.steps)]
    c = torch.cat([o[0] for o in outs], dim=-1) @ heads.W_O.weight.T
    a = sum(o[1] for o in outs) / h
    lps = [o[2] for o in outs if o[2] is not None]
    return c, a, (sum(lps) if lps else None)


@pytest.mark.parametrize(
    "step",
    [
        dict(scoring="general"),
        dict(scoring="additive"),
        dict(scoring="similarity"),
        dict(scoring="location"),
        dict(scoring="additive", alignment="hard"),
        dict(scoring="general", alignment="local"),
        dict(scoring="additive", alignment="reinforced"),
        dict(scoring="additive", dimensionality="multi-dimensional"),
    ],
    ids=lambda s: "-".join(s.values()),
)
@pytest.mark.parametrize("training", [True, False])
def test_builder_heads_with_per_head_parameters_equal_a_loop_over_heads(step, training):
    # every head keeps its own score weights, position predictor or policy; the stack hands head j to step j,
    # and the sampled alignments draw from the generator head after head
    heads = _heads(4, **step).train(training)
    F, G, _ = _inputs()
    Q = torch.cat([G, F], dim=-2)
    out, a, lp = heads(Q, F, torch.Generator().manual_seed(5))
    ref_out, ref_a, ref_lp = _head_by_head(heads, Q, F, torch.Generator().manual_seed(5))
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(a, ref_a)
    assert (lp is None) == (ref_lp is None)
    if lp is not None:
        torch.testing.assert_close(lp, ref_lp)
        assert lp.shape == (BATCH,)
    if step.get("alignment") in ("hard", "reinforced") and training:  # the draws depend on the generator
        _, a_other, _ = heads(Q, F, torch.Generator().manual_seed(6))
        assert not torch.equal(a, a_other)


def test_builder_heads_go_through_the_one_stack(monkeypatch):
    # the multi-head path calls multi_head_attention (multi-dimensional heads are the documented exception)
    from attnsurvey import attention_step
    from attnsurvey.query_related import multihead

    calls = []
    real = multihead.multi_head_attention
    monkeypatch.setattr(multihead, "multi_head_attention", lambda *a, **k: calls.append(k) or real(*a, **k))
    F, G, _ = _inputs()
    for step in (
        dict(),
        dict(scoring="general"),
        dict(alignment="hard"),
        dict(scoring="additive", dimensionality="multi-dimensional"),
    ):
        _heads(2, **step)(G, F, None)
    assert len(calls) == 3
    assert calls[0]["align"] == "softmax" and isinstance(calls[0]["score"], torch.nn.Module)  # no per-head hook
    assert isinstance(calls[1]["score"].__self__, attention_step._StepHooks)
    assert calls[2]["align"].__func__ is attention_step._StepHooks.align


def test_fit_and_evaluate_reports_the_weight_on_any_position():
    """attention_on_other reads the position it is given: other = pos repeats the gold weight, and the
    weights on the six positions, one call each (same seed, same model), sum to one."""
    g = torch.Generator().manual_seed(0)
    train, test = two_marker_task(64, 6, 8, 3, g), two_marker_task(32, 6, 8, 3, g)
    p = B.point(query_multiplicity="multi-head")

    def on_other(other: torch.Tensor) -> dict[str, float]:
        return B.fit_and_evaluate(p, train, {**test, "other": other}, 3, epochs=1, seed=0)

    same = on_other(test["pos"])
    assert same["attention_on_other"] == pytest.approx(same["attention_on_gold"], abs=1e-6)
    total = sum(on_other(torch.full((32,), j))["attention_on_other"] for j in range(6))
    assert total == pytest.approx(1.0, abs=1e-5)
    assert "attention_on_other" not in B.fit_and_evaluate(
        p, train, {k: v for k, v in test.items() if k != "other"}, 3, epochs=1
    )
