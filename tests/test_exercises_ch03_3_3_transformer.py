"""Exercise self-checks of ch03_3_3_transformer: a plausible wrong answer fails, the solution passes."""

from __future__ import annotations

import pytest
import torch

from attnsurvey.exercises import ch03_3_3_transformer as ex
from attnsurvey.training import accuracy
from attnsurvey.transformer import model


def _rotate(P, t, k, i, sign=1.0):
    phi = torch.tensor(k * 10000 ** (-2 * i / P.shape[1]), dtype=P.dtype)
    R = torch.stack(
        [torch.stack([torch.cos(phi), sign * torch.sin(phi)]), torch.stack([-sign * torch.sin(phi), torch.cos(phi)])]
    )
    return R @ P[t, 2 * i : 2 * i + 2]


def test_ex1_solution_passes():
    assert "correct" in ex.check_ex1(_rotate)


def test_ex1_rotation_in_the_wrong_direction_fails():
    with pytest.raises(AssertionError):
        ex.check_ex1(lambda P, t, k, i: _rotate(P, t, k, i, sign=-1.0))


def test_ex1_reading_row_t_plus_k_fails():
    with pytest.raises(AssertionError, match="row t \\+ k"):
        ex.check_ex1(lambda P, t, k, i: P[t + k, 2 * i : 2 * i + 2])


def test_ex1_float32_rotation_passes():
    assert "correct" in ex.check_ex1(lambda P, t, k, i: _rotate(P.float(), t, k, i))


def _copy_mha(ours, ref):
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.W_Q.weight, ours.W_K.weight, ours.W_V.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.W_Q.bias, ours.W_K.bias, ours.W_V.bias]))
        ref.out_proj.load_state_dict(ours.W_O.state_dict())


def _to_torch(dec, norm_first=True, norms=("norm1", "norm2", "norm3")):
    ref = torch.nn.TransformerDecoderLayer(16, 2, 24, dropout=0.0, batch_first=True, norm_first=norm_first)
    _copy_mha(dec.self_attn, ref.self_attn)
    _copy_mha(dec.cross_attn, ref.multihead_attn)
    for name in ("linear1", "linear2"):
        getattr(ref, name).load_state_dict(getattr(dec.ffn, name).state_dict())
    for name, ours in zip(("norm1", "norm2", "norm3"), norms):
        getattr(ref, name).load_state_dict(getattr(dec, ours).state_dict())
    return ref


def test_ex2_solution_passes():
    assert "correct" in ex.check_ex2(_to_torch)


def test_ex2_post_norm_twin_fails():
    with pytest.raises(AssertionError):
        ex.check_ex2(lambda dec: _to_torch(dec, norm_first=False))


@pytest.mark.parametrize("norms", [(), ("norm3", "norm1", "norm2"), ("norm1", "norm3", "norm2")])
def test_ex2_norms_not_copied_or_misplaced_fail(norms):
    # a fresh LayerNorm is weight 1, bias 0 in both libraries: only a check with trained-looking norms sees these
    with pytest.raises(AssertionError):
        ex.check_ex2(lambda dec: _to_torch(dec, norms=norms))


def _evaluate(tagger, x, y):
    with torch.no_grad():
        return accuracy(tagger(x)[0], y)


def _sequence_accuracy(tagger, x, y):
    with torch.no_grad():
        return float((tagger(x)[0].argmax(-1) == y).all(-1).float().mean())


@pytest.fixture(scope="module")
def tagger():
    torch.manual_seed(0)
    return model.SequenceTagger(10, 10, d_model=16, h=2, d_ff=32, n_layers=2, max_len=16, position="relative").eval()


def test_ex3_solution_passes(tagger):
    assert "correct" in ex.check_ex3(_evaluate, tagger, False)


def test_ex3_sequence_accuracy_fails(tagger):
    with pytest.raises(AssertionError):
        ex.check_ex3(_sequence_accuracy, tagger, False)


def test_ex3_wrong_verdict_fails_without_giving_the_answer(tagger):
    with pytest.raises(AssertionError) as err:
        ex.check_ex3(_evaluate, tagger, True)
    assert "answer" not in str(err.value) and "False" not in str(err.value)


def test_ex3_wrong_verdict_fails(tagger):
    with pytest.raises(AssertionError):
        ex.check_ex3(_evaluate, tagger, True)


def _rotate_d(P, t, k, i, d=None):
    d = P.shape[1] if d is None else d
    phi = torch.tensor(k * 10000 ** (-2 * i / d), dtype=P.dtype)
    R = torch.stack([torch.stack([torch.cos(phi), torch.sin(phi)]), torch.stack([-torch.sin(phi), torch.cos(phi)])])
    return R @ P[t, 2 * i : 2 * i + 2]


def test_hidden_ex1_accepts_the_solution_and_rejects_d_typed_in():
    ex.hidden_check_ex1(_rotate_d)
    fixed = lambda P, t, k, i: _rotate_d(P, t, k, i, d=16)
    assert "correct" in ex.check_ex1(fixed)
    with pytest.raises(AssertionError, match="take d from P"):
        ex.hidden_check_ex1(fixed)


def test_hidden_ex2_accepts_the_solution_and_rejects_a_twin_with_dropout():
    ex.hidden_check_ex2(_to_torch)

    def with_dropout(dec):
        ref = _to_torch(dec)
        ref.dropout.p = ref.dropout1.p = ref.dropout2.p = ref.dropout3.p = 0.1  # torch's default, kept by mistake
        return ref

    assert "correct" in ex.check_ex2(with_dropout)  # eval mode hides it ...
    with pytest.raises(AssertionError, match="dropout"):
        ex.hidden_check_ex2(with_dropout)  # ... training mode does not


def test_hidden_ex3_accepts_the_solution_and_rejects_a_verdict_that_is_not_a_bool(tagger):
    ex.hidden_check_ex3(_evaluate, tagger, False)
    assert "correct" in ex.check_ex3(_evaluate, tagger, 0)
    with pytest.raises(AssertionError, match="True or False"):
        ex.hidden_check_ex3(_evaluate, tagger, 0)


def test_ex1_hint_does_not_state_the_expected_pair():
    """The message names the inputs and the reader's values, never the pair of row t + k."""
    with pytest.raises(AssertionError) as err:
        ex.check_ex1(lambda P, t, k, i: _rotate(P, t, k, i, sign=-1.0))
    message = str(err.value)
    assert "P[t+k] has" not in message and "10000" not in message
