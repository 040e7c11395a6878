"""Each exercise check of chapters 6 and 6.3 accepts the worked solution and rejects a plausible wrong answer."""

from __future__ import annotations

import math

import pytest
import torch

from attnsurvey.beyond.ring import ring_work
from attnsurvey.beyond.tiled import finalize, online_softmax_merge
from attnsurvey.exercises import beyond_ring as er
from attnsurvey.exercises import beyond_tiled as et


def _merge_lse(L_old, m_t, l_t):
    top = max(L_old, m_t)
    return top + math.log(math.exp(L_old - top) + l_t * math.exp(m_t - top))


def test_merge_lse_check_accepts_the_solution_and_rejects_plausible_mistakes():
    et.check_merge_lse(_merge_lse)
    et.check_merge_lse(lambda L, m, l: float(torch.logaddexp(torch.tensor(L), torch.tensor(m + math.log(l)))))
    wrong = {
        "larger part only": lambda L, m, l: max(L, m + math.log(l)),
        "own maximum": lambda L, m, l: L + math.log(l),  # l_t added at the wrong reference
        "failed": lambda L, m, l: math.log(math.exp(L) + l * math.exp(m)),  # exact in reals, overflows near 1000
        "not right": lambda L, m, l: math.exp(L - m),  # the displayed rescale factor pasted in
    }
    for hint, answer in wrong.items():
        with pytest.raises(AssertionError, match=hint):
            et.check_merge_lse(answer)


def test_merge_lse_float32_tensor_passes():
    et.check_merge_lse(
        lambda L, m, l: torch.logaddexp(torch.tensor(L, dtype=torch.float32), torch.tensor(m + math.log(l)))
    )


def _stream(scores, rescale=True, m0=-math.inf):
    m, l = m0, 0.0
    for e in scores:
        m_new = max(m, e)
        l = (l * math.exp(m - m_new) if rescale else l) + math.exp(e - m_new)
        m = m_new
    return m, l


def test_streaming_check():
    et.check_streaming_logsumexp(_stream)
    with pytest.raises(AssertionError):
        et.check_streaming_logsumexp(lambda s: _stream(s, rescale=False))  # forgets to rescale l


def test_streaming_check_float32_tensors_pass():
    et.check_streaming_logsumexp(lambda s: tuple(torch.tensor(v) for v in _stream(s)))


def _two_pass(scores):
    """Not a stream: the maximum first, then the sum (reads the scores twice)."""
    m = max(scores)
    return m, sum(math.exp(e - m) for e in scores)


def test_streaming_checks_reject_reading_the_scores_twice():
    assert _two_pass([1.0, 2.0, 3.0]) == _stream([1.0, 2.0, 3.0])  # right on a list: only the iterator rejects it
    with pytest.raises(AssertionError, match="read only once"):
        et.check_streaming_logsumexp(_two_pass)
    with pytest.raises(AssertionError, match="log-sum-exp"):
        et.hidden_check_streaming_logsumexp(_two_pass)


def test_streaming_check_maximum_started_at_zero_fails():
    with pytest.raises(AssertionError, match="largest score"):
        et.check_streaming_logsumexp(lambda s: _stream(s, m0=0.0))


def test_causal_tiles_check():
    et.check_causal_tiles(40)  # 16 query tiles; tile i visits ceil(256 (i + 1) / 1024) key tiles
    assert et.causal_tiles(4096, 256, 1024) == sum(math.ceil(256 * (i + 1) / 1024) for i in range(16)) == 40
    with pytest.raises(AssertionError, match="picture") as wrong:
        et.check_causal_tiles(16 * 4 // 2)  # "half of the tiles"
    assert "start" not in str(wrong.value) and "qe" not in str(wrong.value)  # the hint does not state the counting rule
    with pytest.raises(AssertionError, match="whole number"):
        et.check_causal_tiles(40.9)


def _training_bytes(n, d, P, size, h, h_kv):
    return (3 * P - 2) * (n // P) * 2 * d * h_kv * size


def test_ring_bytes_check():
    er.check_ring_bytes(_training_bytes)
    wrong = {
        "forward ring alone": lambda n, d, P, s, h, hk: (P - 1) * (n // P) * 2 * d * hk * s,
        "query heads": lambda n, d, P, s, h, hk: (3 * P - 2) * (n // P) * 2 * d * h * s,
        "backward K/V without gradients": lambda n, d, P, s, h, hk: 2 * (P - 1) * (n // P) * 2 * d * hk * s,
        "gradients without the hop home": lambda n, d, P, s, h, hk: 3 * (P - 1) * (n // P) * 2 * d * hk * s,
        "the displayed forward formula": lambda n, d, P, s, h, hk: (P - 1) * (n // P) * 2 * d * s,
    }
    for name, answer in wrong.items():
        with pytest.raises(AssertionError):
            er.check_ring_bytes(answer)
            pytest.fail(name)


def _merge_outputs(parts):
    """The solution: a softmax over the chunks' log-sum-exps weights their contexts."""
    C = torch.stack([c for c, _ in parts])
    L = torch.stack([L for _, L in parts])
    return (torch.softmax(L, 0).unsqueeze(-1) * C).sum(0)


def _through_the_triple(parts):
    """Also right: (L, 1, c) is a triple with the same context and log-sum-exp, so chapter 6's merge applies."""
    run = None
    for c, L in parts:
        triple = (L, torch.isfinite(L).to(c.dtype), c)  # a hidden chunk is the empty part (-inf, 0, 0)
        run = triple if run is None else online_softmax_merge(*run, *triple)
    return finalize(*run)[0]


def _stacked(parts):
    return torch.stack([c for c, _ in parts]), torch.stack([L for _, L in parts])


def _weights_from_the_largest(parts, normalise=True):
    C, L = _stacked(parts)
    w = torch.exp(L - L.max(0).values)
    return (w.unsqueeze(-1) * C).sum(0) / (w.sum(0).unsqueeze(-1) if normalise else 1.0)


def _weights_from_the_first(parts):
    C, L = _stacked(parts)
    w = torch.exp(L - L[0])  # the first chunk as the reference: -inf - (-inf) where it hides a row
    return (w.unsqueeze(-1) * C).sum(0) / w.sum(0).unsqueeze(-1)


def _largest_chunk_only(parts):
    C, L = _stacked(parts)
    return C.gather(0, L.argmax(0)[None, :, None].expand(1, *C.shape[1:]))[0]


def test_merge_outputs_check_accepts_the_solutions():
    for answer in (_merge_outputs, _through_the_triple, _weights_from_the_largest):
        er.check_merge_outputs(answer)
        er.hidden_check_merge_outputs(answer)


MERGE_WRONG = {
    "the plain average of the contexts": lambda parts: _stacked(parts)[0].mean(0),
    "exp(L) without a reference (overflows near 1000)": lambda parts: (
        sum(torch.exp(L).unsqueeze(-1) * c for c, L in parts) / sum(torch.exp(L) for _, L in parts).unsqueeze(-1)
    ),
    "the shares not normalised": lambda parts: _weights_from_the_largest(parts, normalise=False),
    "the chunk with the largest L alone": _largest_chunk_only,
    "the first chunk as the reference": _weights_from_the_first,
}


@pytest.mark.parametrize("name", MERGE_WRONG)
def test_merge_outputs_check_rejects_plausible_mistakes(name):
    with pytest.raises(AssertionError) as hint:
        er.check_merge_outputs(MERGE_WRONG[name])
    message = str(hint.value)
    for leak in ("softmax", "exp(L_s - L", "share", "1/P", "same weight"):  # no formula, no answer to the "why"
        assert leak not in message, message


def _zigzag_pairs(P=4, p=512):
    return [2 * P * p * p + p] * P


def test_causal_work_check():
    er.check_causal_work(_zigzag_pairs())
    contiguous = [
        r * 1024 * 1024 + 1024 * 1025 // 2 for r in range(4)
    ]  # the old exercise's answer, the Explore formula
    with pytest.raises(AssertionError, match="contiguous"):
        er.check_causal_work(contiguous)
    with pytest.raises(AssertionError, match="whole tiles"):
        er.check_causal_work([w["score_entries"] for w in ring_work(4096, 4, "zigzag")])
    with pytest.raises(AssertionError):
        er.check_causal_work([9 * 512 * 512] * 4)  # every piece's diagonal counted as a full square
    with pytest.raises(AssertionError):
        er.check_causal_work([4096 * 4096 // 4 // 2] * 4)  # "exactly half"


def test_checks_print_no_answer(capsys):
    et.check_merge_lse(_merge_lse)
    et.check_causal_tiles(40)
    er.check_causal_work(_zigzag_pairs())
    er.check_ring_bytes(_training_bytes)
    out = capsys.readouterr().out
    for leak in ("exp(m_old", "40", "64", "7.0", "times", "2097664", "2,097,664", "3P"):
        assert leak not in out, out


def test_hidden_merge_lse_accepts_the_solution_and_rejects_an_underflow():
    et.hidden_check_merge_lse(_merge_lse)
    shifted = lambda L, m, l: m + math.log(math.exp(L - m) + l)  # reference m_t: overflows when L >> m_t
    et.check_merge_lse(shifted)  # the visible cases never put L_old far above m_t ...
    with pytest.raises(AssertionError, match="merge_lse"):
        et.hidden_check_merge_lse(shifted)  # ... the hidden ones do


def test_hidden_streaming_accepts_the_solution_and_rejects_a_stream_without_rescaling():
    et.hidden_check_streaming_logsumexp(_stream)
    with pytest.raises(AssertionError, match="log-sum-exp"):
        et.hidden_check_streaming_logsumexp(lambda s: _stream(s, rescale=False))


def test_hidden_causal_tiles_accepts_the_solution_and_rejects_half():
    et.hidden_check_causal_tiles(40)
    with pytest.raises(AssertionError, match="one by one"):
        et.hidden_check_causal_tiles(32)


def test_hidden_ring_bytes_accepts_the_solution_and_rejects_the_forward_ring_alone():
    er.hidden_check_ring_bytes(_training_bytes)
    with pytest.raises(AssertionError, match="not right"):
        er.hidden_check_ring_bytes(lambda n, d, P, s, h, hk: (P - 1) * (n // P) * 2 * d * hk * s)


def test_hidden_merge_outputs_accepts_the_solution_and_rejects_three_chunks_typed_in():
    er.hidden_check_merge_outputs(_merge_outputs)
    three = lambda parts: _merge_outputs(parts[:3])  # written for the visible check's three chunks
    er.check_merge_outputs(three)
    with pytest.raises(AssertionError, match="merged context"):
        er.hidden_check_merge_outputs(three)


def test_hidden_causal_work_accepts_the_solution_and_rejects_the_contiguous_counts():
    er.hidden_check_causal_work(_zigzag_pairs())
    with pytest.raises(AssertionError, match="causal mask"):
        er.hidden_check_causal_work([r * 1024 * 1024 + 1024 * 1025 // 2 for r in range(4)])
