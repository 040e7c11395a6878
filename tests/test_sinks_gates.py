"""Chapter 6.6's task and experiment: the triggered-copy sequences against their rule, and the measures of the three
variants against what they must give by construction."""

from __future__ import annotations

import pytest
import torch

from attnsurvey import masking as mk
from attnsurvey.beyond.sinks import GatedAttention, SinkAttention
from attnsurvey.data.next_token import triggered_copy_batch
from attnsurvey.data.sequences import IGNORE
from attnsurvey.experiments import sinks_gates as sg
from attnsurvey.query_related.multihead import MultiHeadAttention


def test_triggered_copy_follows_its_rule():
    """Brute force with Python ints: after a trigger, the token lag positions before it; no early trigger."""
    lag, n = 3, 40
    x, y = triggered_copy_batch(50, n, 6, torch.Generator().manual_seed(0), lag=lag, p_trigger=0.4)
    xs, ys = x.tolist(), y.tolist()
    copies = 0
    for row, targets in zip(xs, ys):
        assert all(tok != 0 for tok in row[:lag]), "a trigger before position lag"
        assert all(0 <= tok < 6 for tok in row)
        for t in range(n - 1):
            assert targets[t] == (IGNORE if t < lag else row[t + 1])
            if row[t] == 0:
                assert row[t + 1] == row[t - lag]
                copies += 1
    assert copies > 100  # the rule was exercised


def test_triggered_copy_frequencies_and_a_planted_bug():
    x, _ = triggered_copy_batch(400, 30, 8, torch.Generator().manual_seed(1), lag=4, p_trigger=0.3)
    free = x[:, 5:][x[:, 4:-1] != 0]  # tokens that follow a non-trigger are drawn
    assert abs(float((free == 0).float().mean()) - 0.3) < 0.02
    wrong = x.clone()
    wrong[:, 1:] = torch.where(wrong[:, :-1] == 0, wrong[:, 1:].roll(1, 0), wrong[:, 1:])  # copy from another row
    hits = [(wrong[b, t + 1] == wrong[b, t - 4]).item() for b in range(400) for t in range(4, 29) if wrong[b, t] == 0]
    assert not all(hits)  # the rule check above would reject it


@pytest.mark.parametrize(
    ("kw", "match"),
    [({"vocab": 2}, "vocab >= 3"), ({"lag": 0}, "lag"), ({"lag": 10}, "lag < n"), ({"p_trigger": 1.5}, "p_trigger")],
)
def test_triggered_copy_refuses_bad_arguments(kw, match):
    args = {"batch": 2, "n": 10, "vocab": 5, "lag": 2, "p_trigger": 0.2} | kw
    with pytest.raises(ValueError, match=match):
        triggered_copy_batch(args.pop("batch"), args.pop("n"), args.pop("vocab"), torch.Generator(), **args)


def test_the_variants_differ_only_in_the_attention_module():
    types = {v: type(sg.WindowTagger(8, v).encoder.layers[0].self_attn) for v in sg.VARIANTS}
    assert types["softmax"] is MultiHeadAttention
    assert types["sink"] is SinkAttention
    assert issubclass(types["gate"], GatedAttention)
    shapes = {
        v: [p.shape for n, p in sg.WindowTagger(8, v).named_parameters() if "W_G" not in n] for v in ("softmax", "gate")
    }
    assert shapes["softmax"] == shapes["gate"]
    # the same seed gives every variant the same initial values in the parameters they share (the gate's draws
    # must not shift the FFN's)
    start = {}
    for v in sg.VARIANTS:
        torch.manual_seed(0)
        start[v] = sg.WindowTagger(8, v).state_dict()
    for v in ("sink", "gate"):
        shared = [k for k in start["softmax"] if k in start[v]]
        assert len(shared) == len(start["softmax"])
        assert all(torch.equal(start["softmax"][k], start[v][k]) for k in shared), v
    with pytest.raises(ValueError, match="variant"):
        sg.WindowTagger(8, "linear")


def test_measures_follow_from_their_definitions():
    models = {v: sg.train_variant(v, 0, steps=3) for v in sg.VARIANTS}
    n = sg.SINK_TASK["n"]
    x, y = triggered_copy_batch(64, n, 8, torch.Generator().manual_seed(2000), lag=4, p_trigger=0.3)
    copy, other = (x == 0) & (y != IGNORE), (x != 0) & (y != IGNORE)
    t_ = torch.arange(n)
    for v, model in models.items():
        # a window as long as the sequence evicts nothing: the window masks give the causal losses
        with torch.no_grad():
            causal = sg._losses(model(x, mk.causal_mask(n))[0], y, copy, other)
            for n_sink in (0, 1):
                got = sg._losses(model(x, mk.sink_mask(n, n_sink, n))[0], y, copy, other)
                assert got == pytest.approx(causal, abs=1e-6)
            beyond = t_ >= sg.SINK_TASK["window"]
            m = sg.sink_measures(model)  # its "full" losses reuse the run that gives the weights: the causal run's
            full = sg._losses(model(x, mk.causal_mask(n))[0], y, copy & beyond, other & beyond)
        assert (m["copy_full"], m["other_full"]) == full
        assert (m["row_sum"] < 1) if v == "sink" else m["row_sum"] == pytest.approx(1, abs=1e-6)
        assert m["first_weight"] <= m["first_weight_top"]
    t = torch.arange(n)
    late_other = (x != 0) & (t >= 8)
    assert sg.sink_measures(models["softmax"])["uniform_first"] == pytest.approx(
        float((1.0 / (t + 1.0)).expand(64, n)[late_other].mean())
    )
    per_position = sg.first_weight_by_position(models["softmax"])
    assert len(per_position) == n - sg.SINK_TASK["start"]


def test_the_window_mask_reaches_the_model():
    """A window of one key (the query itself) must change a trained model's loss at the triggers."""
    model = sg.train_variant("softmax", 0, steps=60)
    m = sg.sink_measures(model, window=1)
    assert m["copy_evicted"] > m["copy_full"] + 0.1


def test_gate_openness_reads_the_gates_of_the_first_layer():
    """With W_G's weight at zero every gate is sigmoid(b): both means equal it; the mean is over the gate's coordinates."""
    model = sg.train_variant("gate", 0, steps=2)
    attn = model.encoder.layers[0].self_attn
    with torch.no_grad():
        attn.W_G.weight.zero_()
        attn.W_G.bias.copy_(torch.linspace(-2.0, 1.0, attn.W_G.bias.numel()))
    want = float(torch.sigmoid(attn.W_G.bias.detach()).mean())
    got = sg.gate_openness(model)
    assert got["gate_copy"] == pytest.approx(want, abs=1e-6) and got["gate_other"] == pytest.approx(want, abs=1e-6)
    with torch.no_grad():  # a gate that reads the input: the trigger's embedding alone opens it
        attn.W_G.weight.copy_(torch.ones_like(attn.W_G.weight))
        attn.W_G.bias.zero_()
    x, _ = triggered_copy_batch(4, 24, 8, torch.Generator().manual_seed(2000), lag=4, p_trigger=0.3)
    normed = model.encoder.layers[0].norm1(model.position(model.embed(x)))
    brute = torch.sigmoid(normed.detach().sum(-1))  # every gate row is the sum of the input's coordinates
    late = (torch.arange(24) >= 8) & (x != 0)
    assert sg.gate_openness(model, n_test=4)["gate_other"] == pytest.approx(float(brute[late].mean()), abs=1e-5)
    with pytest.raises(ValueError, match="gate_openness"):
        sg.gate_openness(sg.WindowTagger(8, "softmax"))


@pytest.mark.parametrize("variant", sg.VARIANTS)
@pytest.mark.parametrize("n_layers", [1, 2])
def test_the_tagger_trusting_its_layers_computes_the_bits_of_clearing_layers(variant, n_layers):
    """WindowTagger runs its layers with the private _finite_inputs flag (tokens in): the same logits, weights and
    gradients, bit for bit, as layers that make masked slots inert themselves, under the causal mask and a window."""
    torch.manual_seed(0)
    m = sg.WindowTagger(8, variant, d_model=16, h=4, d_ff=16, n_layers=n_layers)
    x, y = triggered_copy_batch(4, 20, 8, torch.Generator().manual_seed(1), lag=4, p_trigger=0.3)
    for mask in (mk.causal_mask(20), mk.sink_mask(20, 0, 6)):
        runs = []
        for trusted in (True, False):
            m.zero_grad()
            if trusted:
                logits, ws = m(x, mask)
            else:  # WindowTagger.forward spelled out, the layers left to clear masked slots themselves
                H, ws = m.encoder(m.position(m.embed(x)), mask[None])
                logits = m.readout(H)
            torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=IGNORE).backward()
            runs.append(
                (logits.detach(), [w.detach() for w in ws], {k: p.grad.clone() for k, p in m.named_parameters()})
            )
        (l1, w1, g1), (l0, w0, g0) = runs
        assert torch.equal(l1, l0) and all(torch.equal(a, b) for a, b in zip(w1, w0, strict=True))
        assert g1.keys() == g0.keys() and all(torch.equal(g1[k], g0[k]) for k in g0)
