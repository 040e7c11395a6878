"""The drawings of survey Figs. 9-11: one box per head / hop / capsule, and bad sizes rejected."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest

from attnsurvey.figures import survey_b
from attnsurvey.figures.architectures import diagram_edges, layout_problems


def _texts(fig):
    return [t.get_text() for t in fig.axes[0].texts]


@pytest.mark.parametrize("h", [1, 2, 4])
def test_multi_head_draws_one_attention_module_per_head(h):
    fig = survey_b.multi_head_figure(h)
    assert sum(t.startswith("attention module") for t in _texts(fig)) == h
    plt.close(fig)


@pytest.mark.parametrize("h", [1, 3, 6])
def test_multi_head_boxes_lie_inside_the_axes(h):
    """Fig. 9 at 3 heads lost the right border of the last column to the x limits."""
    fig = survey_b.multi_head_figure(h)
    assert layout_problems(fig) == []
    plt.close(fig)


@pytest.mark.parametrize("n_hops", [1, 3])
def test_multi_hop_draws_one_transform_per_hop(n_hops):
    fig = survey_b.multi_hop_figure(n_hops)
    assert sum(t == "transform" for t in _texts(fig)) == n_hops
    plt.close(fig)


def _name(label):
    return "attention" if label and label.startswith("attention module") else label


@pytest.mark.parametrize("n_hops", [1, 3, 5])
def test_multi_hop_arrows_follow_eq_41_42_and_the_optional_context(n_hops):
    """Survey Fig. 10: solid arrows the basic structure, the other ones (grey, dashed here)
    the optional connection c^(s) -> transform of hop s (the context as the transform's query);
    no basic arrow joins the same two boxes, so the optional one shows something of its own."""
    fig = survey_b.multi_hop_figure(n_hops)
    edges = diagram_edges(fig.axes[0])
    optional = [(a, b) for a, b, colour, style in edges if style != "solid"]
    basic = [(_name(a), _name(b), colour) for a, b, colour, style in edges if style == "solid"]
    assert all(colour == "#999999" for _, _, colour, style in edges if style != "solid")
    assert sorted(optional) == sorted((f"$c^{{({s})}}$", "transform") for s in range(n_hops))
    F = "feature matrix $F$ (keys and values, every hop)"
    expected = []
    for s in range(n_hops):
        q, q_next, c, c_next = (f"$q^{{({s})}}$", f"$q^{{({s + 1})}}$", f"$c^{{({s})}}$", f"$c^{{({s + 1})}}$")
        expected += [(q, "transform"), ("transform", q_next), (q_next, "attention"), (c, "attention")]
        expected += [(F, "attention"), ("attention", c_next)]
    assert sorted((a, b) for a, b, _ in basic) == sorted(expected)
    assert not {(a, b) for a, b, _ in basic} & set(optional)
    attention_labels = [t for t in _texts(fig) if t.startswith("attention module")]
    assert attention_labels == [f"attention module\nquery $[q^{{({s + 1})}}; c^{{({s})}}]$" for s in range(n_hops)]
    assert layout_problems(fig) == []  # the "optional" labels overlap no box and cross no arrow
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
