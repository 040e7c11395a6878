"""The drawings of survey Figs. 9-11: one box per head / hop / capsule, and bad sizes rejected."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest

from attnsurvey.figures import survey_b


def _texts(fig):
    return [t.get_text() for t in fig.axes[0].texts]


@pytest.mark.parametrize("h", [1, 2, 4])
def test_multi_head_draws_one_attention_module_per_head(h):
    fig = survey_b.multi_head_figure(h)
    assert sum(t.startswith("attention module") for t in _texts(fig)) == h
    plt.close(fig)


@pytest.mark.parametrize("n_hops", [1, 3])
def test_multi_hop_draws_one_transform_per_hop(n_hops):
    fig = survey_b.multi_hop_figure(n_hops)
    assert sum(t == "transform" for t in _texts(fig)) == n_hops
    plt.close(fig)


def test_capsule_draws_three_modules_per_class():
    fig = survey_b.capsule_figure(3, ("a", "b", "c"))
    texts = _texts(fig)
    for module in ("attention module", "probability module", "reconstruction module"):
        assert sum(t.startswith(module) for t in texts) == 3
    plt.close(fig)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: survey_b.multi_head_figure(0), "between 1 and 6 heads, got h=0"),
        (lambda: survey_b.multi_hop_figure(6), "between 1 and 5 hops, got n_hops=6"),
        (lambda: survey_b.capsule_figure(5), "between 1 and 4 capsules, got d_y=5"),
        (lambda: survey_b.capsule_figure(2, ("only one",)), "1 class names for d_y=2 capsules"),
    ],
)
def test_bad_sizes_raise(call, message):
    with pytest.raises(ValueError, match=message):
        call()
