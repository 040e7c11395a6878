"""Each self-check of chapter 6.8 accepts the solution and rejects plausible wrong answers (also under ``python -O``)."""

from __future__ import annotations

import pytest
import torch

from attnsurvey.beyond import selective as sel
from attnsurvey.exercises import ch06_8_selective as ex
from attnsurvey.experiments import recall as E
from attnsurvey.masking import causal_mask


def right_break_even(n, d, top_k, index_heads, d_index):
    visible = n * (n + 1) // 2
    m = min(top_k, n)
    saved = 4 * d * (visible - m * (m + 1) // 2 - (n - m) * top_k)
    if saved <= 0:
        return None
    return index_heads * (2 * d_index + 2) * visible // saved + 1


def test_break_even_heads():
    ex.check_breakeven_heads(right_break_even)
    ex.hidden_check_breakeven_heads(right_break_even)
    for case in [(4096, 128, 512, 64, 128), (1000, 64, 100, 4, 16), (32768, 128, 2048, 64, 128)]:
        assert right_break_even(*case) == ex._breakeven_heads(*case)  # the closed form and the search agree
    assert not hasattr(ex, "breakeven_heads_reference")  # the search is not handed to the reader as ex.<name>

    def not_strict(n, d, k, h, di):  # H >= I/s instead of H > I/s: one head short when I/s is not whole
        r = right_break_even(n, d, k, h, di)
        return None if r is None else r - 1

    def square_sums(n, d, k, h, di):  # n^2 / 2 instead of n (n + 1) / 2 and k per query from the start
        saved = 4 * d * (n * n / 2 - n * k)
        return None if saved <= 0 else int(h * (2 * di + 2) * n * n / 2 // saved) + 1

    def no_none(n, d, k, h, di):  # never admits that the selection saves nothing
        r = right_break_even(n, d, k, h, di)
        return 1 if r is None else r

    def indexer_per_head(n, d, k, h, di):  # ignores that one indexer serves all heads
        return None if right_break_even(n, d, k, h, di) is None else 1

    for wrong, hint in ((not_strict, "strict"), (square_sums, "not right"), (indexer_per_head, "not right")):
        with pytest.raises(AssertionError, match=hint):
            ex.check_breakeven_heads(wrong)
    with pytest.raises(AssertionError):
        ex.hidden_check_breakeven_heads(no_none)  # the hidden test has a case with n <= top_k
    with pytest.raises(AssertionError, match="whole number"):
        ex.check_breakeven_heads(lambda n, d, k, h, di: right_break_even(n, d, k, h, di) + 0.5)

    def ceiling(n, d, k, h, di):  # ceil(I / s): equal to the answer unless s divides I, where H = I/s only ties
        visible = n * (n + 1) // 2
        m = min(k, n)
        saved = 4 * d * (visible - m * (m + 1) // 2 - (n - m) * k)
        return None if saved <= 0 else -(-h * (2 * di + 2) * visible // saved)

    def off_by_one(n, d, k, h, di):  # min(k, t) keys for query t instead of min(k, t + 1)
        visible = n * (n + 1) // 2
        saved = 4 * d * (visible - sum(min(k, t) for t in range(n)))
        return None if saved <= 0 else h * (2 * di + 2) * visible // saved + 1

    for wrong in (ceiling, off_by_one):
        with pytest.raises(AssertionError):
            ex.check_breakeven_heads(wrong)
    with pytest.raises(AssertionError):
        ex.hidden_check_breakeven_heads(ceiling)


def right_shared(gates, block_size, top_k):
    n = gates.shape[-2]
    blocks = sel.block_selection(gates.sum(-3), block_size, n, top_k)
    return blocks.repeat_interleave(block_size, dim=-1)[..., :n] & causal_mask(n)


def _ranked(combine):  # blocks ranked by a combination of the heads' gates, MoBA's rule, causal
    def mask(gates, B, top_k):
        n = gates.shape[-2]
        blocks = sel.block_selection(combine(gates), B, n, top_k)
        return blocks.repeat_interleave(B, dim=-1)[..., :n] & causal_mask(n)

    return mask


def _own(gates, B, top_k):  # each head's own MoBA choice, (batch, h, n, n)
    return _ranked(lambda s: s)(gates, B, top_k)


def _nsa_sum(gates):  # NSA's own rule with MoBA's gate: each head's softmax over its visible blocks, summed
    n, n_b = gates.shape[-2:]
    later = torch.arange(n_b)[None, :] > (torch.arange(n) // -(-n // n_b))[:, None]
    return gates.masked_fill(later, float("-inf")).softmax(-1).sum(-3)


def _ties_to_later(gates, B, top_k):  # the best earlier blocks, ties broken towards the later block
    gate = gates.sum(-3)
    n, n_b = gate.shape[-2:]
    own = (torch.arange(n) // B)[:, None]
    earlier = torch.arange(n_b)[None, :] < own
    flipped = gate.masked_fill(~earlier, float("-inf")).flip(-1)
    order = n_b - 1 - flipped.sort(dim=-1, descending=True, stable=True).indices  # stable: the later block first
    chosen = torch.zeros_like(earlier.expand_as(gate)).scatter(-1, order[..., : top_k - 1], True) & earlier
    blocks = chosen | (torch.arange(n_b)[None, :] == own)
    return blocks.repeat_interleave(B, dim=-1)[..., :n] & causal_mask(n)


def test_shared_mask():
    ex.check_shared_mask(right_shared)
    ex.hidden_check_shared_mask(right_shared)
    ex.check_shared_mask(_ranked(lambda s: s.mean(-3)))  # the mean ranks as the sum does
    for seed, h, n, d, B, top_k, ties in [(0, 2, 16, 4, 4, 2, False), (3, 2, 16, 2, 2, 3, True)]:
        q, k = ex._shared_case(seed, h, n, d, ties)
        gates = sel.moba_gate_scores(q, k, B)
        assert torch.equal(right_shared(gates, B, top_k), ex._shared_mask_reference(q, k, B, top_k))  # the identity
    assert not torch.equal(_ties_to_later(gates, B, top_k), right_shared(gates, B, top_k))  # the tied case has ties

    def not_causal(gates, B, top_k):  # whole blocks, the own block read into the future
        n = gates.shape[-2]
        return sel.block_selection(gates.sum(-3), B, n, top_k).repeat_interleave(B, dim=-1)[..., :n]

    def in_place(gates, B, top_k):  # the right mask, with the caller's gates averaged in place
        return right_shared(gates.div_(gates.shape[-3]), B, top_k)

    for wrong, hint in (
        (_own, "head axis"),
        (lambda s, B, t: _own(s, B, t).any(-3), "union"),
        (lambda s, B, t: _own(s, B, t).all(-3), "intersection"),
        (not_causal, "later key"),
        (_ranked(lambda s: s[..., 0, :, :]), "first head"),  # head 0's gate for all
        (_ranked(lambda s: s.amax(-3)), "not right"),  # the most interested head decides
        (_ranked(lambda s: s.abs().sum(-3)), "not right"),  # magnitudes summed: a negative gate counts as interest
        (_ranked(_nsa_sum), "not right"),  # probabilities summed, as NSA sums its compressed branch's weights
        (_ties_to_later, "ties included"),
        (in_place, "in place"),
        (lambda s, B, t: right_shared(s, B, t).float(), "boolean"),
    ):
        with pytest.raises(AssertionError, match=hint):
            ex.check_shared_mask(wrong)
    assert not hasattr(ex, "shared_mask_reference")  # the reference is not handed to the reader as ex.<name>


NEEDLE = {"n": 32, "n_keys": 8, "n_values": 8, "n_filler": 16}  # the chapter's task


def test_moba_variation():
    model, _ = E.train_recall("softmax", "needle", NEEDLE, 0, 60)
    x, y = E.held_out_batch("needle", NEEDLE, 0, 64)
    right = ex.moba_accuracy(model, x, y, ex.EX3_BLOCK, ex.EX3_TOP_K)
    chapter = ex.moba_accuracy(model, x, y, 8, 2)
    dense = E.accuracy(model, x, y)
    assert len({right, chapter, dense}) == 3  # the wrong answers below are distinguishable here
    ex.check_moba_variation(right, model, x, y)
    ex.hidden_check_moba_variation(right, model, x, y)
    assert E.accuracy(model, x, y) == dense  # the check leaves the model's mixers in place
    for wrong, hint in (
        (chapter, "chapter's setting"),
        (dense, "dense model"),
        (None, "number"),
        (right + 0.01, "not"),
    ):
        with pytest.raises(AssertionError, match=hint):
            ex.check_moba_variation(wrong, model, x, y)
    with pytest.raises(AssertionError):
        ex.hidden_check_moba_variation(chapter, model, x, y)
