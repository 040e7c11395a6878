"""Tests for greedy and beam-search decoding (beyond the survey)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsurvey.beyond.search import beam_search, coverage_penalty, greedy_search, length_penalty


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


# --------------------------------------------------------------------------- end token, length and coverage penalty

EOS_ID = 3  # vocabulary {0, 1, 2, 3}; 0 is also the begin token


def prefix_model(seed: int, V: int = 4, n_x: int = 3):
    """A fixed random model whose next-token distribution and attention depend on the whole prefix (and example)."""
    memo: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor]] = {}

    def one(b: int, prefix: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        key = (b, *prefix)
        if key not in memo:
            code = seed
            for x in key:
                code = (code * 1_000_003 + x + 1) % (2**61 - 1)
            g = torch.Generator().manual_seed(code)
            memo[key] = (
                torch.log_softmax(2 * torch.randn(V, generator=g, dtype=torch.float64), -1),
                torch.softmax(torch.randn(n_x, generator=g, dtype=torch.float64), -1),
            )
        return memo[key]

    def step(prefixes: torch.Tensor):
        B, k, _ = prefixes.shape
        rows = [[one(b, tuple(prefixes[b, j].tolist())) for j in range(k)] for b in range(B)]
        lp = torch.stack([torch.stack([r[0] for r in row]) for row in rows])
        attn = torch.stack([torch.stack([r[1] for r in row]) for row in rows])
        return lp, attn

    return step, one


def gnmt_score(one, b: int, seq: tuple[int, ...], alpha: float, beta: float, mask=None) -> float:
    """log P(seq) / ((5 + |Y|) / 6)^alpha + beta * sum_i log(min(coverage_i, 1)), by hand in Python floats."""
    logp, cov, prefix = 0.0, None, (0,)
    for tok in seq:
        lp, a = one(b, prefix)
        logp += float(lp[tok])
        cov = a.clone() if cov is None else cov + a
        prefix = (*prefix, tok)
    cp = sum(math.log(min(float(c), 1.0)) for i, c in enumerate(cov) if mask is None or mask[i])
    return logp / ((5 + len(seq)) / 6) ** alpha + beta * cp


def brute_force_eos(one, b: int, max_len: int, alpha: float, beta: float, mask=None, open_at_length: bool = True):
    """The best hypothesis by its penalised score over every sequence up to max_len.

    Candidates: every y_1 .. y_m EOS with m + 1 <= max_len and, with ``open_at_length``, every
    sequence of max_len tokens without EOS (open at the maximum length, finished there).
    """
    body = [t for t in range(4) if t != EOS_ID]
    hyps = [(*seq, EOS_ID) for m in range(max_len) for seq in itertools.product(body, repeat=m)]
    if open_at_length:
        hyps += list(itertools.product(body, repeat=max_len))
    scored = [(gnmt_score(one, b, h, alpha, beta, mask), h) for h in hyps]
    return max(scored)


def hypothesis_of(row: torch.Tensor) -> tuple[int, ...]:
    toks = row.tolist()
    return tuple(toks[: toks.index(EOS_ID) + 1]) if EOS_ID in toks else tuple(toks)


@pytest.mark.catalog("extra:length-penalty")
@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
@pytest.mark.parametrize("beta", [0.0, 0.4])
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("finalize", [True, False])
def test_exhaustive_beam_with_end_token_is_the_brute_force_best(alpha, beta, seed, finalize):
    max_len = 4
    step, one = prefix_model(seed)
    mask = torch.tensor([[True, True, True], [True, True, False]])  # example 1 has a padded source position
    tok, score = beam_search(
        step,
        0,
        2,
        max_len,
        beam_width=4**max_len,
        eos=EOS_ID,
        alpha=alpha,
        beta=beta,
        source_mask=mask,
        finalize_at_length=finalize,
    )
    assert tok.shape == (2, max_len)
    for b in range(2):
        best_score, best = brute_force_eos(one, b, max_len, alpha, beta, mask[b].tolist(), open_at_length=finalize)
        assert hypothesis_of(tok[b]) == best
        assert abs(float(score[b]) - best_score) < 1e-9
        assert torch.all(tok[b, len(best) :] == EOS_ID)  # padded with eos (the default pad)


@pytest.mark.catalog("extra:length-penalty")
@pytest.mark.parametrize("alpha", [0.0, 0.6])
@pytest.mark.parametrize("seed", range(4))
def test_greedy_with_end_token_equals_beam_width_one(alpha, seed):
    step, one = prefix_model(10 + seed)
    g_tok, g_score = greedy_search(step, 0, 2, 6, eos=EOS_ID, alpha=alpha, beta=0.3, pad=0)
    b_tok, b_score = beam_search(step, 0, 2, 6, beam_width=1, eos=EOS_ID, alpha=alpha, beta=0.3, pad=0)
    assert torch.equal(g_tok, b_tok)
    torch.testing.assert_close(g_score, b_score)
    for b in range(2):  # the greedy path by hand: argmax at every step until EOS
        prefix: tuple[int, ...] = ()
        while len(prefix) < 6 and EOS_ID not in prefix:
            prefix = (*prefix, int(one(b, (0, *prefix))[0].argmax()))
        assert hypothesis_of(g_tok[b]) == prefix
        assert abs(float(g_score[b]) - gnmt_score(one, b, prefix, alpha, 0.3)) < 1e-9


def chain_model():
    """From the begin token: EOS with 0.5 or symbol 1 with about 0.49; then 1 -> 2 -> EOS with about 0.98 each."""
    p = torch.full((4, 4), 0.01, dtype=torch.float64)
    p[0, EOS_ID], p[0, 1] = 0.5, 0.48
    p[1, 2] = 0.97
    p[2, EOS_ID] = 0.97
    p[EOS_ID, EOS_ID] = 0.97
    logp = (p / p.sum(-1, keepdim=True)).log()
    return (lambda prefixes: logp[prefixes[..., -1]]), logp


@pytest.mark.catalog("extra:length-penalty")
def test_without_length_penalty_the_short_hypothesis_wins_and_with_it_the_long_one():
    step, logp = chain_model()
    short, long_ = float(logp[0, EOS_ID]), float(logp[0, 1] + logp[1, 2] + logp[2, EOS_ID])
    assert short > long_  # EOS alone is more probable than 1 2 EOS ...
    assert long_ / ((5 + 3) / 6) ** 0.6 > short  # ... but not per token: lp(3) = (8/6)^0.6
    tok0, s0 = beam_search(step, 0, 1, 5, beam_width=4, eos=EOS_ID, alpha=0.0)
    tok6, s6 = beam_search(step, 0, 1, 5, beam_width=4, eos=EOS_ID, alpha=0.6)
    assert hypothesis_of(tok0[0]) == (EOS_ID,) and abs(float(s0[0]) - short) < 1e-12
    assert hypothesis_of(tok6[0]) == (1, 2, EOS_ID) and abs(float(s6[0]) - long_ / (8 / 6) ** 0.6) < 1e-12
    # greedy takes EOS at once whatever alpha: the penalty only reranks finished hypotheses
    assert hypothesis_of(greedy_search(step, 0, 1, 5, eos=EOS_ID, alpha=0.6)[0][0]) == (EOS_ID,)


@pytest.mark.catalog("extra:length-penalty")
def test_length_and_coverage_penalty_by_hand():
    torch.testing.assert_close(
        length_penalty(torch.tensor([1, 5]), 1.0), torch.tensor([1.0, 10 / 6], dtype=torch.float64)
    )
    torch.testing.assert_close(length_penalty(torch.tensor([7]), 0.0), torch.tensor([1.0], dtype=torch.float64))
    # two output steps over n_x = 3 source positions; coverage (1.3, 0.3, 0.4); the first is capped at 1
    a = torch.tensor([[0.7, 0.2, 0.1], [0.6, 0.1, 0.3]], dtype=torch.float64)
    cp = coverage_penalty(a.sum(0), 0.5)
    assert abs(float(cp) - 0.5 * (math.log(1.0) + math.log(0.3) + math.log(0.4))) < 1e-12
    cp_masked = coverage_penalty(a.sum(0), 0.5, torch.tensor([True, True, False]))
    assert abs(float(cp_masked) - 0.5 * math.log(0.3)) < 1e-12
    # the same through greedy search: a fixed model that writes 1 then EOS with these attentions
    logp = torch.log(torch.tensor([0.1, 0.6, 0.1, 0.2], dtype=torch.float64))
    logp_end = torch.log(torch.tensor([0.1, 0.1, 0.1, 0.7], dtype=torch.float64))

    def step(prefixes):
        t = prefixes.shape[-1] - 1
        lp = (logp if t == 0 else logp_end).expand(*prefixes.shape[:2], 4)
        return lp, a[t].expand(*prefixes.shape[:2], 3)

    tok, score = greedy_search(step, 0, 1, 4, eos=EOS_ID, beta=0.5)
    assert tok[0].tolist() == [1, EOS_ID, EOS_ID, EOS_ID]
    assert abs(float(score[0]) - (math.log(0.6 * 0.7) + float(cp))) < 1e-12


@pytest.mark.catalog("extra:length-penalty")
def test_end_token_search_rejects_bad_inputs():
    step, _ = bigram_model(torch.zeros(4, 4))
    with pytest.raises(ValueError, match="eos=4 is not in the vocabulary of V=4"):
        beam_search(step, 0, 1, 3, eos=4)
    with pytest.raises(ValueError, match="eos=-1"):
        greedy_search(step, 0, 1, 3, eos=-1)
    with pytest.raises(ValueError, match="alpha"):
        beam_search(step, 0, 1, 3, eos=3, alpha=-0.1)
    with pytest.raises(ValueError, match="alpha"):
        length_penalty(torch.tensor([1]), float("nan"))
    with pytest.raises(ValueError, match="beta"):
        greedy_search(step, 0, 1, 3, eos=3, beta=-1.0)
    with pytest.raises(ValueError, match="beam_width"):
        beam_search(step, 0, 1, 3, beam_width=0, eos=3)
    with pytest.raises(ValueError, match="maximum length"):
        greedy_search(step, 0, 1, 0, eos=3)
    with pytest.raises(ValueError, match=r"return \(log_probs, attention\)"):
        beam_search(step, 0, 1, 3, eos=3, beta=0.2)
    with pytest.raises(ValueError, match="source_mask must be boolean"):
        beam_search(prefix_model(0)[0], 0, 1, 3, eos=3, beta=0.2, source_mask=torch.ones(1, 3))
    with pytest.raises(ValueError, match=r"\(B, n_x\)"):
        greedy_search(prefix_model(0)[0], 0, 2, 3, eos=3, beta=0.2, source_mask=torch.ones(1, 3, dtype=torch.bool))


@pytest.mark.catalog("extra:length-penalty")
@settings(max_examples=25)
@given(
    seed=st.integers(0, 10_000),
    width=st.integers(1, 6),
    alpha=st.floats(0.0, 2.0),
    max_len=st.integers(1, 4),
)
def test_returned_score_is_the_penalised_score_of_the_returned_tokens_and_exhaustive_is_best(
    seed, width, alpha, max_len
):
    table = 2 * torch.randn(4, 4, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    step, logp = bigram_model(table)
    tok, score = beam_search(step, 0, 1, max_len, beam_width=width, eos=EOS_ID, alpha=alpha)
    hyp = hypothesis_of(tok[0])
    logp_hyp = sum(float(logp[a, b]) for a, b in zip((0, *hyp), hyp))
    assert abs(float(score[0]) - logp_hyp / ((5 + len(hyp)) / 6) ** alpha) < 1e-9
    assert len(hyp) <= max_len and (hyp[-1] == EOS_ID or len(hyp) == max_len)
    if hyp[-1] == EOS_ID:  # a finished hypothesis: exhaustive search finds one at least as good
        _, best = beam_search(step, 0, 1, max_len, beam_width=4**max_len, eos=EOS_ID, alpha=alpha)
        assert float(best[0]) >= float(score[0]) - 1e-12


@pytest.mark.catalog("extra:length-penalty")
@pytest.mark.parametrize("seed", range(40))
def test_open_hypotheses_at_the_maximum_length_compete(seed):
    """On small random models the exhaustive search against brute force, both ways; the two differ in some cases.

    With ``finalize_at_length`` (the default) the winner is the best of every ended sequence and every
    sequence open at the maximum length; without it, the best ended one. The same beam (any width) visits
    the same prefixes either way, so finalizing never scores lower.
    """
    max_len, width = 3, 3
    step, one = prefix_model(100 + seed)
    for finalize in (True, False):
        tok, score = beam_search(step, 0, 2, max_len, 4**max_len, eos=EOS_ID, alpha=0.6, finalize_at_length=finalize)
        for b in range(2):
            best_score, best = brute_force_eos(one, b, max_len, 0.6, 0.0, open_at_length=finalize)
            assert hypothesis_of(tok[b]) == best
            assert abs(float(score[b]) - best_score) < 1e-9
    new = beam_search(step, 0, 2, max_len, width, eos=EOS_ID, alpha=0.6)[1]
    old = beam_search(step, 0, 2, max_len, width, eos=EOS_ID, alpha=0.6, finalize_at_length=False)[1]
    assert bool((new >= old).all())


def test_finalizing_changes_the_winner_on_some_random_models():
    """A control that the option matters: among 40 random models an open hypothesis wins somewhere."""
    changed = 0
    for seed in range(40):
        step, _ = prefix_model(100 + seed)
        new = beam_search(step, 0, 2, 3, 64, eos=EOS_ID, alpha=0.6)[0]
        old = beam_search(step, 0, 2, 3, 64, eos=EOS_ID, alpha=0.6, finalize_at_length=False)[0]
        changed += int((new != old).any(-1).sum())
    assert changed > 0
