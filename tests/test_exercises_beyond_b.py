"""Each self-check of chapters 6.1, 6.2 and 6.4 accepts the solution and rejects a plausible wrong answer."""

from __future__ import annotations

import pytest
import torch

from attnsurvey.beyond.positions import apply_rope
from attnsurvey.data.sequences import PAD
from attnsurvey.exercises import beyond_decoding as exd
from attnsurvey.exercises import beyond_positions as exp
from attnsurvey.exercises import beyond_trained as ext
from attnsurvey.experiments import trained_transformer as tt
from attnsurvey.experiments.long_positions import copy_back_accuracy, train_copy_back


def test_cache_gib():
    exd.check_cache_gib(1.25)  # 2 x 80 x 4096 x 8 x 128 x 2 bytes
    for wrong in (0.625, 10.0, 1.0):
        with pytest.raises(AssertionError):
            exd.check_cache_gib(wrong)


def test_expand_kv():
    exd.check_expand_kv(lambda k, h: k.repeat_interleave(h // k.shape[1], dim=1))
    with pytest.raises(AssertionError, match="tiled"):
        exd.check_expand_kv(lambda k, h: k.repeat(1, h // k.shape[1], 1, 1))
    for axis in (0, 2):  # the group size taken from B or from n, which the old single case (B = n = h/g = 2) let pass
        with pytest.raises(AssertionError):
            exd.check_expand_kv(lambda k, h, axis=axis: k.repeat_interleave(k.shape[axis], dim=1))


def test_score_counts():
    exd.check_score_counts(512 * 513 // 2, 512 * 513 * 1025 // 6)
    with pytest.raises(AssertionError, match="swapped"):
        exd.check_score_counts(512 * 513 * 1025 // 6, 512 * 513 // 2)
    with pytest.raises(AssertionError):
        exd.check_score_counts(512 * 513 // 2, 512 * 512)


def test_alibi_slopes_4():
    exp.check_alibi_slopes_4([1 / 4, 1 / 16, 1 / 64, 1 / 256])
    with pytest.raises(AssertionError, match="8-head"):
        exp.check_alibi_slopes_4([1 / 2, 1 / 4, 1 / 8, 1 / 16])


def test_rotate():
    exp.check_rotate(lambda x, t: apply_rope(x[None], offset=t)[0])

    with pytest.raises(AssertionError, match="wrong way"):
        exp.check_rotate(_negated)
    with pytest.raises(AssertionError):  # the identity is not a rotation by t theta
        exp.check_rotate(lambda x, t: x)


def _negated(x, t):
    # rotating by -t theta equals conjugating: flip the sign of the odd coordinates, rotate, flip back
    sign = torch.tensor([1.0, -1.0] * (x.shape[0] // 2), dtype=x.dtype)
    return apply_rope((x * sign)[None], offset=t)[0] * sign


def test_sinusoidal_at_512():
    model = train_copy_back("sinusoidal", 0)
    exp.check_sinusoidal_at_512(copy_back_accuracy(model, 512))
    with pytest.raises(AssertionError, match="training length"):
        exp.check_sinusoidal_at_512(copy_back_accuracy(model, 64))


def test_uniform_mirrored():
    ext.check_uniform_mirrored(8 / 68)  # 8 lengths 5..12, one unit of weight each, 68 output tokens
    with pytest.raises(AssertionError, match="over sentences"):
        ext.check_uniform_mirrored(sum(1 / n for n in range(5, 13)) / 8)


def test_exact_match():
    def solution(pred, data):
        valid = torch.arange(pred.shape[1])[None] < data.lengths[:, None]
        return float(((pred == data.tgt_out) | ~valid).all(1).float().mean())

    ext.check_exact_match(solution)
    with pytest.raises(AssertionError, match="padded"):
        ext.check_exact_match(lambda pred, data: float((pred == data.tgt_out).all(1).float().mean()))
    with pytest.raises(AssertionError, match="token accuracy"):
        ext.check_exact_match(lambda pred, data: float((pred == data.tgt_out)[data.tgt_out != PAD].float().mean()))


def test_length_exact():
    data = tt.reversal_data(64, torch.Generator().manual_seed(1))
    pred = data.tgt_out.clone()
    pred[data.lengths == 12, 0] = PAD  # every length-12 example wrong, the others right
    n_right = float((data.lengths != 12).float().mean())
    ext.check_length_exact_of(0.0, pred, data, 12)
    with pytest.raises(AssertionError, match="all lengths"):
        ext.check_length_exact_of(n_right, pred, data, 12)
    with pytest.raises(ValueError, match="no example"):
        ext.check_length_exact_of(0.0, pred, data, 99)


def test_length_exact_decodes_the_model_itself(monkeypatch):
    # the check decodes greedily with the model it is given: the targets passed as "predictions" with an
    # answer of 1.0 used to pass (the reference was computed from the reader's pred)
    data = tt.reversal_data(64, torch.Generator().manual_seed(1))
    rows = (data.lengths == 12).nonzero().flatten()
    calls = []

    def decode(model, batch, beam):  # every second length-12 row wrong: a reference strictly between 0 and 1
        calls.append((model, beam))
        pred = batch.tgt_out.clone()
        pred[rows[::2], 0] += 1
        return pred

    monkeypatch.setattr(ext, "decode", decode)
    model = tt.make_model().eval()
    right = 1 - len(rows[::2]) / len(rows)
    assert 0 < right < 1
    ext.check_length_exact(right, model, data, 12)
    assert calls == [(model, 1)]  # this model, greedy
    with pytest.raises(AssertionError):
        ext.check_length_exact(1.0, model, data, 12)
