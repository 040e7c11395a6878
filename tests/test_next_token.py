import pytest
import torch

from attnsurvey.data.next_token import lagged_sum_batch
from attnsurvey.data.sequences import IGNORE


def test_noise_free_sequences_follow_the_rule_token_by_token():
    x, y = lagged_sum_batch(4, 12, 7, torch.Generator().manual_seed(0), lag=2, p_noise=0.0)
    for b in range(4):
        seq = x[b].tolist() + [int(y[b, -1])]
        for t in range(3, 13):  # hand recurrence: x_t = x_{t-1} + x_{t-3} mod 7
            assert seq[t] == (seq[t - 1] + seq[t - 3]) % 7
    assert (y[:, :2] == IGNORE).all() and torch.equal(y[:, 2:-1], x[:, 3:])


def test_the_noise_rate_is_the_fraction_of_tokens_that_break_the_rule():
    x, y = lagged_sum_batch(2000, 20, 10, torch.Generator().manual_seed(1), lag=1, p_noise=0.3)
    rule = (x[:, 1:] + x[:, :-1]) % 10  # what the rule predicts for targets 1..n-1
    broken = (y[:, 1:] != rule).float().mean()
    assert abs(float(broken) - 0.3 * 0.9) < 0.01  # a redrawn token equals the rule's by chance 1 time in 10


def test_bad_sizes_are_refused():
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="lag"):
        lagged_sum_batch(2, 3, 5, g, lag=3)
    with pytest.raises(ValueError, match="p_noise"):
        lagged_sum_batch(2, 8, 5, g, p_noise=1.5)
