"""question_in_features: every feature vector gains the mean of G, element by element; nothing else changes."""

from __future__ import annotations

import pytest
import torch

from attnsurvey.data.taxonomy_tasks import question_in_features, two_marker_task


def test_every_feature_vector_gains_the_mean_question():
    task = two_marker_task(5, 4, 3, 2, torch.Generator().manual_seed(0))
    out = question_in_features(task)
    for b in range(5):  # brute force, one entry at a time
        for l in range(4):
            for i in range(3):
                expected = float(task["F"][b, l, i]) + (float(task["G"][b, 0, i]) + float(task["G"][b, 1, i])) / 2
                assert float(out["F"][b, l, i]) == pytest.approx(expected, abs=1e-6)
    for key in ("G", "y", "pos", "k"):
        assert out[key] is task[key]
    assert out["F"] is not task["F"] and not torch.equal(out["F"], task["F"])


def test_mismatched_shapes_are_refused():
    F, G = torch.zeros(2, 4, 3), torch.zeros(2, 2, 5)
    with pytest.raises(ValueError, match="share B and d"):
        question_in_features({"F": F, "G": G})
    with pytest.raises(ValueError, match="must hold F"):
        question_in_features({"F": F})


def test_other_is_the_marked_item_that_was_not_asked():
    from attnsurvey.data.taxonomy_tasks import _directions

    task = two_marker_task(64, 6, 8, 3, torch.Generator().manual_seed(0), noise=0.0)
    markers, protos = _directions(8, 3, 0)
    for b in range(64):  # without noise, each item is a class prototype plus at most one marker
        gold, other, k = int(task["pos"][b]), int(task["other"][b]), int(task["k"][b])
        assert gold != other
        torch.testing.assert_close(task["F"][b, gold] - markers[k], protos[task["y"][b]])
        rest = task["F"][b, other] - markers[1 - k]
        assert min(float((rest - p).abs().max()) for p in protos) < 1e-6
