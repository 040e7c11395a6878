"""The drawings of survey Figs. 1-8 (figures/survey_a.py): each draws, and names what the survey's figure shows."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest

from attnsurvey.figures import survey_a

CASES = [
    ("task_model_figure", 1, ["feature model", "query model", "attention model", "output model"]),
    ("attention_module_figure", 2, ["(1)", "(2)", "(3)", "(4)"]),
    ("alternating_co_attention_figure", 4, ["Eq. (7)", "Eq. (8)", "Eq. (9)"]),
    ("interactive_co_attention_figure", 5, ["Eq. (10)", "Eq. (11)"]),
    ("parallel_co_attention_figure", 6, ["Eq. (12)", "Eq. (14)", "Eq. (15)"]),
    ("attention_via_attention_figure", 7, ["word-level module", "character-level module"]),
    ("hierarchical_attention_figure", 8, ["module [S]", "module [D]"]),
]


@pytest.mark.parametrize("name, number, words", CASES)
def test_survey_figure_is_titled_and_labelled(name, number, words):
    fig = getattr(survey_a, name)()
    ax = fig.axes[0]
    assert ax.get_title().startswith(f"Figure {number} (survey Fig. {number})")
    text = " ".join(" ".join(t.get_text().split()) for t in ax.texts)  # a line break in a box is layout
    for w in words:
        assert w in text, (name, w)
    plt.close(fig)


def test_hierarchical_figure_draws_one_sentence_module_per_sentence():
    fig = survey_a.hierarchical_attention_figure(n_sentences=4)
    assert sum(t.get_text() == "module [S]" for t in fig.axes[0].texts) == 4
    plt.close(fig)


def test_encoder_decoder_figure_has_two_panels():
    fig = survey_a.encoder_decoder_figure()
    assert len(fig.axes) == 2
    plt.close(fig)
