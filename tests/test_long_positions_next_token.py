import math

import pytest
import torch

from attnsurvey.data.next_token import lagged_sum_batch
from attnsurvey.data.sequences import IGNORE
from attnsurvey.experiments import long_positions as lp


def test_learned_table_starts_at_the_requested_scale():
    torch.manual_seed(0)
    m = lp.PositionTagger(8, "learned", d_model=32, max_len=64, learned_sd=1.0)
    assert abs(float(m.position.P.detach().std()) - 1.0) < 0.05
    torch.manual_seed(0)
    small = lp.PositionTagger(8, "learned", d_model=32, max_len=64, learned_sd=0.02)
    assert abs(float(small.position.P.detach().std()) - 0.02) < 0.002


def test_next_token_accuracy_is_the_hand_count_and_nan_beyond_a_learned_table():
    m = lp.train_next_token("alibi", 0, n_train=8, steps=1, d_model=16, h=8, d_ff=16)
    x, y = lagged_sum_batch(32, 24, 8, torch.Generator().manual_seed(2000), lag=1, p_noise=0.1)
    keep = y != IGNORE
    with torch.no_grad():
        hand = float((m(x)[0].argmax(-1)[keep] == y[keep]).float().mean())
    assert lp.next_token_accuracy(m, 24) == pytest.approx(hand)
    learned = lp.train_next_token("learned", 0, n_train=8, steps=1, d_model=16, h=8, d_ff=16)
    assert math.isnan(lp.next_token_accuracy(learned, 9)) and not math.isnan(lp.next_token_accuracy(learned, 8))


def test_next_token_table_keeps_every_model_and_trains_on_the_same_seeds():
    models = {}
    table = lp.next_token_table(("none",), (0, 1), (8, 16), models=models, n_train=8, steps=2, d_model=16, d_ff=16)
    assert sorted(models) == [("none", 0), ("none", 1)] and len(table["none"]) == 2
    again = lp.train_next_token("none", 1, n_train=8, steps=2, d_model=16, d_ff=16)
    assert table["none"][1] == [lp.next_token_accuracy(again, 8), lp.next_token_accuracy(again, 16)]


class _Fixed(torch.nn.Module):
    """A stand-in whose weights are uniform over the causal prefix: the far mass has a closed form."""

    def forward(self, x):
        n = x.shape[-1]
        w = torch.tril(torch.ones(n, n))
        w = w / w.sum(-1, keepdim=True)
        return torch.zeros(*x.shape, 8), w.expand(x.shape[0], 2, n, n)


def test_far_attention_mass_matches_the_uniform_closed_form():
    n, far = 12, 4
    # query t spreads 1/(t+1) over keys 0..t; keys 0..t-far hold (t - far + 1)/(t + 1)
    want = sum((t - far + 1) / (t + 1) for t in range(far, n)) / (n - far)
    assert lp.far_attention_mass(_Fixed(), n, far) == pytest.approx(want)
    with pytest.raises(ValueError, match="far"):
        lp.far_attention_mass(_Fixed(), n, n)


@pytest.mark.parametrize("encoding", lp.ENCODINGS)
def test_the_tagger_trusting_its_layers_computes_the_bits_of_clearing_layers(encoding):
    """PositionTagger runs its layer with the private _finite_inputs flag (tokens in, every row finite): the same
    logits, weights and gradients, bit for bit, as the layer that makes masked slots inert itself."""
    torch.manual_seed(0)
    m = lp.PositionTagger(8, encoding, d_model=16, h=4, d_ff=16, max_len=32)
    x, y = lagged_sum_batch(4, 24, 8, torch.Generator().manual_seed(1))
    runs = []
    for trusted in (True, False):
        m.zero_grad()
        if trusted:
            logits, a = m(x)
        else:  # PositionTagger.forward spelled out, the layer left to clear masked slots itself
            H, ws = m.encoder(m.position(m.embed(x)), lp.causal_mask(24)[None])
            logits, a = m.readout(H), ws[0]
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=IGNORE).backward()
        runs.append((logits.detach(), a.detach(), {k: p.grad.clone() for k, p in m.named_parameters()}))
    (l1, a1, g1), (l0, a0, g0) = runs
    assert torch.equal(l1, l0) and torch.equal(a1, a0)
    assert g1.keys() == g0.keys() and all(torch.equal(g1[k], g0[k]) for k in g0)
