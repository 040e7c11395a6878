"""Tests for greedy and beam-search decoding (beyond the survey)."""

from __future__ import annotations

import itertools

import pytest
import torch

from attnsurvey.beyond.search import beam_search, greedy_search


def bigram_model(table: torch.Tensor):
    """A hand-made model: p(next | prefix) depends on the last token only, ``table[last]``."""
    logp = torch.log_softmax(table, -1)

    def step(prefixes: torch.Tensor) -> torch.Tensor:
        return logp[prefixes[..., -1]]

    return step, logp


def brute_force(logp: torch.Tensor, bos: int, length: int) -> tuple[tuple[int, ...], float]:
    best, best_score = None, -float("inf")
    for seq in itertools.product(range(logp.shape[1]), repeat=length):
        prev, s = bos, 0.0
        for tok in seq:
            s += float(logp[prev, tok])
            prev = tok
        if s > best_score:
            best, best_score = seq, s
    return best, best_score


@pytest.mark.catalog("extra:trained-transformer")
def test_beam_width_one_is_greedy():
    table = torch.randn(6, 6, generator=torch.Generator().manual_seed(0))
    step, _ = bigram_model(table)
    g_tok, g_lp = greedy_search(step, 0, 1, 7)
    b_tok, b_lp = beam_search(step, 0, 1, 7, beam_width=1)
    assert torch.equal(g_tok, b_tok)
    assert abs(float(g_lp[0]) - float(b_lp[0])) < 1e-6


@pytest.mark.catalog("extra:trained-transformer")
@pytest.mark.parametrize("seed", range(5))
def test_beam_finds_the_brute_force_best(seed):
    V, L = 4, 4
    table = 2 * torch.randn(V, V, generator=torch.Generator().manual_seed(seed))
    step, logp = bigram_model(table)
    best, best_score = brute_force(logp, 0, L)
    tok, lp = beam_search(step, 0, 1, L, beam_width=V ** (L - 1))  # wide enough to be exhaustive
    assert tuple(tok[0].tolist()) == best
    assert abs(float(lp[0]) - best_score) < 1e-6


@pytest.mark.catalog("extra:trained-transformer")
def test_beam_beats_greedy_on_a_garden_path():
    # From BOS (token 0): token 1 looks best (0.6) but is followed by a flat
    # distribution; token 2 (0.4) is followed by a near-certain token 3.
    p = torch.tensor(
        [
            [1e-9, 0.6, 0.4, 1e-9],
            [0.31, 0.23, 0.24, 0.22],
            [1e-9, 1e-9, 1e-9, 1.0],
            [0.31, 0.23, 0.24, 0.22],
        ]
    )
    step, logp = bigram_model(p.log())
    g_tok, g_lp = greedy_search(step, 0, 1, 2)
    b_tok, b_lp = beam_search(step, 0, 1, 2, beam_width=2)
    assert g_tok[0, 0] == 1 and b_tok[0].tolist() == [2, 3]
    assert float(b_lp[0]) > float(g_lp[0])
    assert b_tok[0].tolist() == list(brute_force(logp, 0, 2)[0])


@pytest.mark.catalog("extra:trained-transformer")
def test_batched_search_decodes_each_example_independently():
    table = torch.randn(5, 5, generator=torch.Generator().manual_seed(3))
    logp = torch.log_softmax(table, -1)
    starts = torch.tensor([0, 3])

    def step(prefixes):  # example b uses its own start token in place of BOS
        last = prefixes[..., -1].clone()
        first = prefixes.shape[-1] == 1
        if first:
            last = starts[:, None].expand_as(last)
        return logp[last]

    tok, _ = beam_search(step, 0, 2, 3, beam_width=3)
    for b, s in enumerate(starts.tolist()):
        one, _ = beam_search(
            lambda p, s=s: logp[torch.full_like(p[..., -1], s) if p.shape[-1] == 1 else p[..., -1]],
            0,
            1,
            3,
            beam_width=3,
        )
        assert torch.equal(tok[b], one[0])


@pytest.mark.catalog("extra:trained-transformer")
def test_bad_inputs_raise():
    step, _ = bigram_model(torch.zeros(3, 3))
    with pytest.raises(ValueError, match="beam_width"):
        beam_search(step, 0, 1, 3, beam_width=0)
    with pytest.raises(ValueError, match=r"\(B, k, V\)"):
        greedy_search(lambda p: torch.zeros(5), 0, 1, 2)
