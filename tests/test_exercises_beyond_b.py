"""Each self-check of chapters 6.1, 6.2 and 6.4 accepts the solution and rejects a plausible wrong answer."""

from __future__ import annotations

import functools
import math

import pytest
import torch

from attnsurvey.beyond.positions import apply_rope
from attnsurvey.data.sequences import PAD
from attnsurvey.exercises import beyond_decoding as exd
from attnsurvey.exercises import beyond_positions as exp
from attnsurvey.exercises import beyond_trained as ext
from attnsurvey.experiments import trained_transformer as tt
from attnsurvey.experiments.long_positions import next_token_accuracy, train_next_token


def test_cache_gib():
    exd.check_cache_gib(1.875)  # 2 x 40 layers x batch 3 x window 4096 x 8 K/V heads x 128 x 2 bytes
    # the whole sequence kept, also for one sequence; keys only; all 32 query heads; one sequence of the batch; 1 % off
    for wrong in (15.0, 5.0, 0.9375, 7.5, 0.625, 1.9):
        with pytest.raises(AssertionError):
            exd.check_cache_gib(wrong)
    # the hint for the whole-sequence answer points to the buffer; it does not say that the window bounds the cache
    for whole_sequence in (15.0, 5.0):
        with pytest.raises(AssertionError, match="rolling buffer") as hint:
            exd.check_cache_gib(whole_sequence)
        assert "window" not in str(hint.value)


def test_expand_kv():
    exd.check_expand_kv(lambda k, h: k.repeat_interleave(h // k.shape[1], dim=1))
    with pytest.raises(AssertionError, match="tiled"):
        exd.check_expand_kv(lambda k, h: k.repeat(1, h // k.shape[1], 1, 1))
    for axis in (0, 2):  # the group size taken from B or from n, which the old single case (B = n = h/g = 2) let pass
        with pytest.raises(AssertionError):
            exd.check_expand_kv(lambda k, h, axis=axis: k.repeat_interleave(k.shape[axis], dim=1))


WINDOW_COUNT = 128 * 129 // 2 + (512 - 128) * 128  # steps 1..128 see t keys, the later ones 128


def test_score_counts():
    exd.check_score_counts(WINDOW_COUNT, WINDOW_COUNT / (512 * 513 // 2))
    for wrong, hint in (
        (512 * 128, "first few steps"),  # every step with a full window: the hint points to the cache, not to min(t, w)
        (512 * 513 // 2, "full cache"),  # the full cache of the first section (the old exercise)
        (129 * 130 // 2 + (512 - 129) * 129, "off by one"),
    ):
        with pytest.raises(AssertionError, match=hint):
            exd.check_score_counts(wrong, 0.5)
    with pytest.raises(AssertionError, match="fraction"):
        exd.check_score_counts(WINDOW_COUNT, WINDOW_COUNT / (512 * 512))


HALF_4 = [math.log(2) * 4 ** (j + 1) for j in range(4)]  # ln 2 / m_j with m_j = 4^-(j+1)


def test_half_distance_4():
    exp.check_half_distance_4(HALF_4)
    for wrong, hint in (
        ([math.log(2) * 2 ** (j + 1) for j in range(4)], "8-head"),  # the first four heads of eight
        ([4.0, 16.0, 64.0, 256.0], "one unit of score"),  # 1 / m_j: the penalty, not the weight
        (HALF_4[::-1], "reversed"),
        ([1 / 4, 1 / 16, 1 / 64, 1 / 256], "not right"),  # the slopes themselves (the old exercise's answer)
        ([math.log2(2) * 4 ** (j + 1) for j in range(4)], "one unit"),  # log base 2 of 2 = 1: the same as 1 / m_j
    ):
        with pytest.raises(AssertionError, match=hint) as message:
            exp.check_half_distance_4(wrong)
        assert "exp" not in str(message.value)  # no hint states the key step (the weight ratio is exp(-m delta))


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


# exercise 3: made-up accuracies of the same kind as the chapter's (sinusoidal below the position-blind model)
AT_512 = {"sinusoidal": [0.15, 0.16, 0.15, 0.16, 0.15], "none": [0.18, 0.18, 0.17, 0.18, 0.18]}
AT_256 = {"sinusoidal": [0.18, 0.17, 0.18, 0.19, 0.18], "none": [0.20, 0.21, 0.20, 0.20, 0.20]}


def test_sinusoidal_vs_none_at_512_accepts_the_supported_verdict():
    exp.check_sinusoidal_vs_none_at_512(AT_512, "none", AT_256)


@pytest.mark.parametrize(
    ("results", "verdict", "match"),
    [
        pytest.param(AT_512, "sinusoidal", "does not follow", id="the-wrong-winner"),
        pytest.param(AT_512, "not resolved", "does not follow", id="a-resolved-difference-ignored"),
        pytest.param(AT_256, "none", "evaluate at n = 512", id="the-table-at-256"),
        pytest.param({k: v[:1] for k, v in AT_512.items()}, "none", "at least 5 seeds", id="one-seed"),
        pytest.param(AT_512, "sinusoidal hurts", "must be one of", id="another-word"),
        # one seed's models repeated five times: zero spread, so a zero-width interval would resolve anything
        pytest.param(
            {"sinusoidal": [0.157] * 5, "none": [0.18] * 5}, "none", "every seed gives the same value", id="one-seed-x5"
        ),
        pytest.param(
            {"sinusoidal": [0.157] * 5, "none": AT_512["none"]}, "none", "every seed gives the same", id="one-row-x5"
        ),
    ],
)
def test_sinusoidal_vs_none_at_512_rejects_plausible_wrong_answers(results, verdict, match):
    with pytest.raises(AssertionError, match=match) as err:
        exp.check_sinusoidal_vs_none_at_512(results, verdict, AT_256)
    assert "supports" not in str(err.value)


def test_uniform_mirrored():
    ext.check_uniform_mirrored(8 / 68)  # 8 lengths 5..12, one unit of weight each, 68 output tokens
    with pytest.raises(AssertionError, match="over sentences") as hint:
        ext.check_uniform_mirrored(sum(1 / n for n in range(5, 13)) / 8)
    assert "token" not in str(hint.value)  # the hint points to the definition of m, it does not state the weighting


def test_exact_match():
    def solution(pred, data):
        valid = torch.arange(pred.shape[1])[None] < data.lengths[:, None]
        return float(((pred == data.tgt_out) | ~valid).all(1).float().mean())

    ext.check_exact_match(solution)
    with pytest.raises(AssertionError, match="padded"):
        ext.check_exact_match(lambda pred, data: float((pred == data.tgt_out).all(1).float().mean()))
    with pytest.raises(AssertionError, match="token accuracy"):
        ext.check_exact_match(lambda pred, data: float((pred == data.tgt_out)[data.tgt_out != PAD].float().mean()))


def _wrong_by_length(data, wrong_rows):
    """Predictions equal to the targets except in ``wrong_rows``; the exact match per length 5..12 they give."""
    pred = data.tgt_out.clone()
    pred[wrong_rows, 0] += 1
    ok = torch.ones(len(data.lengths), dtype=torch.bool)
    ok[wrong_rows] = False
    return pred, [float(ok[data.lengths == n].float().mean()) for n in range(5, 13)]


def test_exact_by_length():
    data = tt.reversal_data(200, torch.Generator().manual_seed(1))
    wrong_rows = torch.cat([(data.lengths == n).nonzero().flatten()[: n - 4] for n in range(5, 13)])
    pred, right = _wrong_by_length(data, wrong_rows)  # more wrong rows for longer sequences: 8 different values
    assert len(set(right)) == 8
    ext.check_exact_by_length_of(right, pred, data)
    overall = float((pred == data.tgt_out).all(1).float().mean())
    counts = [float(((data.lengths == n) & ~torch.isin(torch.arange(200), wrong_rows)).sum()) for n in range(5, 13)]
    for wrong, hint in (
        ([0.0] * 8, "one value for every length"),  # the guess "none right" everywhere
        ([overall] * 8, "one value for every length"),
        (right[::-1], "reversed"),
        (counts, "counts"),
        (right[:-1], "one value per length"),
        ([*right[:-1], right[-1] + 0.05], r"lengths \[12\]"),
    ):
        with pytest.raises(AssertionError, match=hint):
            ext.check_exact_by_length_of(wrong, pred, data)
    with pytest.raises(ValueError, match="no example"):
        ext.check_exact_by_length_of(right, pred, tt.reversal_data(3, torch.Generator().manual_seed(1)))


def test_exact_by_length_decodes_the_model_itself(monkeypatch):
    # the check decodes greedily with the model it is given: the targets passed as "predictions" with an
    # answer of all ones must fail (a reference computed from the reader's pred would accept them)
    data = tt.reversal_data(200, torch.Generator().manual_seed(1))
    wrong_rows = (data.lengths >= 11).nonzero().flatten()[::2]  # strictly between 0 and 1 for lengths 11 and 12
    calls = []

    def decode(model, batch, beam):
        calls.append((model, beam))
        return _wrong_by_length(batch, wrong_rows)[0]

    monkeypatch.setattr(ext, "decode", decode)
    model = tt.make_model().eval()
    right = _wrong_by_length(data, wrong_rows)[1]
    assert 0 < right[-1] < 1
    ext.check_exact_by_length(right, model, data)
    assert calls == [(model, 1)]  # this model, greedy
    with pytest.raises(AssertionError):
        ext.check_exact_by_length(right[:6] + [1.0, 1.0], model, data)


def test_checks_print_no_answer(capsys):
    exd.check_cache_gib(1.875)
    exd.check_score_counts(WINDOW_COUNT, WINDOW_COUNT / (512 * 513 // 2))
    exp.check_half_distance_4(HALF_4)
    ext.check_uniform_mirrored(8 / 68)
    out = capsys.readouterr().out
    for leak in ("1.875", "57408", "57,408", "0.437", "2.77", "11.09", "44.36", "177.4", "0.1176"):
        assert leak not in out, out


def test_hidden_cache_gib_accepts_the_solution_and_rejects_a_rounded_size():
    exd.hidden_check_cache_gib(2 * 40 * 3 * 4096 * 8 * 128 * 2 / 2**30)
    exd.check_cache_gib(1.88)  # within the visible check's 1 % ...
    with pytest.raises(AssertionError, match="not exact"):
        exd.hidden_check_cache_gib(1.88)


def test_hidden_expand_kv_accepts_the_solution_and_rejects_tiling():
    exd.hidden_check_expand_kv(lambda k, h: k.repeat_interleave(h // k.shape[1], dim=1))
    with pytest.raises(AssertionError, match="j // "):
        exd.hidden_check_expand_kv(lambda k, h: k.repeat(1, h // k.shape[1], 1, 1))


def test_hidden_score_counts_accepts_the_solution_and_rejects_a_rounded_fraction():
    exd.hidden_check_score_counts(WINDOW_COUNT, WINDOW_COUNT / (512 * 513 // 2))
    exd.check_score_counts(WINDOW_COUNT, 0.4371)  # within the visible check's tolerance ...
    with pytest.raises(AssertionError, match="unrounded"):
        exd.hidden_check_score_counts(WINDOW_COUNT, 0.4371)
    with pytest.raises(AssertionError, match="recount"):
        exd.hidden_check_score_counts(512 * 128, 0.5)


def test_hidden_half_distance_accepts_the_solution_and_rejects_rounded_distances():
    exp.hidden_check_half_distance_4(HALF_4)
    rounded = [round(x, 5) for x in HALF_4]
    exp.check_half_distance_4(rounded)  # within the visible check's 1e-6 ...
    with pytest.raises(AssertionError, match="not exact"):
        exp.hidden_check_half_distance_4([round(x, 4) for x in HALF_4])


def _rope(x, t, d=None):
    d = x.shape[0] if d is None else d
    angle = t * 10000.0 ** (-torch.arange(0, x.shape[0], 2, dtype=x.dtype) / d)
    out = x.clone()
    out[0::2] = x[0::2] * torch.cos(angle) - x[1::2] * torch.sin(angle)
    out[1::2] = x[0::2] * torch.sin(angle) + x[1::2] * torch.cos(angle)
    return out


def test_hidden_rotate_accepts_the_solution_and_rejects_d_typed_in():
    exp.hidden_check_rotate(_rope)
    fixed = lambda x, t: _rope(x, t, d=8)
    exp.check_rotate(fixed)
    with pytest.raises(AssertionError, match="take d from x"):
        exp.hidden_check_rotate(fixed)


def test_hidden_sinusoidal_vs_none_at_512_accepts_the_measurement_and_rejects_other_evaluations():
    # briefly trained stand-ins for the chapter's models (the check only evaluates them)
    trained = {(enc, s): train_next_token(enc, s, n_train=16, steps=5) for enc in exp.EX3_ENCODINGS for s in (0, 4)}

    @functools.cache  # an evaluation is seeded (next_token_accuracy's test seed): each is computed once here
    def accuracy(e, s, n, batch):
        return next_token_accuracy(trained[e, s], n, batch=batch)

    def rows(n, batch=exp.EX3_BATCH, shift=0.0, last=4):
        def at(e, s):
            return accuracy(e, s, n, batch) + shift

        return {e: [at(e, 0), *AT_512[e][1:4], at(e, last)] for e in exp.EX3_ENCODINGS}

    exp.hidden_check_sinusoidal_vs_none_at_512(rows(512), trained)
    # the last wrong answer: the first seed's models in every place, which re-evaluating seed 0 alone accepted
    for wrong in (rows(256), rows(512, batch=32), rows(512, shift=0.001), rows(512, last=0)):
        with pytest.raises(AssertionError, match="another value"):
            exp.hidden_check_sinusoidal_vs_none_at_512(wrong, trained)


def test_hidden_uniform_mirrored_accepts_the_solution_and_rejects_three_decimals():
    ext.hidden_check_uniform_mirrored(8 / 68)
    ext.check_uniform_mirrored(0.118)
    with pytest.raises(AssertionError, match="four correct decimals"):
        ext.hidden_check_uniform_mirrored(0.118)


def test_hidden_exact_match_accepts_the_solution_and_rejects_a_check_of_the_first_token_only():
    def solution(pred, data):
        valid = torch.arange(pred.shape[1])[None] < data.lengths[:, None]
        return float(((pred == data.tgt_out) | ~valid).all(1).float().mean())

    ext.hidden_check_exact_match(solution)
    with pytest.raises(AssertionError, match="last valid token"):
        ext.hidden_check_exact_match(lambda pred, data: float((pred[:, 0] == data.tgt_out[:, 0]).float().mean()))


def test_hidden_exact_by_length_accepts_fractions_of_sequences_and_rejects_rounded_ones():
    data = tt.reversal_data(200, torch.Generator().manual_seed(1))
    counts = [int((data.lengths == n).sum()) for n in range(5, 13)]
    ext.hidden_check_exact_by_length([1 / c for c in counts], None, data)
    with pytest.raises(AssertionError, match="whole number of sequences"):
        ext.hidden_check_exact_by_length([round(1 / c, 2) + 0.001 for c in counts], None, data)
