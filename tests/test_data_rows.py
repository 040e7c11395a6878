"""The shared row helpers of the data generators, and the label contracts of the VQA and aspect data (§3.1.1)."""

from __future__ import annotations

import pytest
import torch

from attnsurvey.data import aspect, vqa
from attnsurvey.data._rows import check_positive
from attnsurvey.data.documents import make_documents
from attnsurvey.data.vqa import make_vqa


def test_subset_keeps_rows_of_every_tensor_field_and_passes_the_rest():
    data = make_vqa(6, grid=3, generator=torch.Generator().manual_seed(0))
    assert len(data) == 6
    idx = torch.tensor([4, 1])
    sub = data.subset(idx)
    assert type(sub) is type(data) and len(sub) == 2 and sub.grid == 3
    for name in ("image", "question", "q_mask", "answer", "region"):
        assert torch.equal(getattr(sub, name), getattr(data, name)[idx])
    assert len(data.subset(slice(0, 3))) == 3


def test_subset_of_documents_keeps_the_vocabulary():
    docs = make_documents(5, generator=torch.Generator().manual_seed(0))
    sub = docs.subset(slice(1, 3))
    assert sub.vocab is docs.vocab and torch.equal(sub.tokens, docs.tokens[1:3])


def test_check_positive_names_the_size():
    check_positive(n=1, d=3)
    with pytest.raises(ValueError, match="n_f must be >= 1, got n_f=0"):
        check_positive(n=2, n_f=0)


def test_vqa_answer_and_region_are_those_of_the_object_the_question_names():
    """Oracle: decode the noise-free image cell by cell, find the one object with the attribute the question
    names, and read its cell (the region) and its other attribute (the answer)."""
    n_c = len(vqa.COLOURS)
    data = make_vqa(60, grid=3, n_objects=4, noise=0.0, generator=torch.Generator().manual_seed(3))
    kinds = set()
    for i in range(60):
        objects = {}  # cell -> (colour, shape)
        for cell, v in enumerate(data.image[i].tolist()):
            assert set(v) <= {0.0, 1.0}
            if v[-1] == 1.0:
                (colour,) = [vqa.COLOURS[j] for j in range(n_c) if v[j]]
                (shape,) = [vqa.SHAPES[j] for j in range(len(vqa.SHAPES)) if v[n_c + j]]
                objects[cell] = (colour, shape)
            else:
                assert sum(v) == 0.0
        assert len(objects) == 4
        words = data.question_words(i)
        kinds.add(words[1])
        if words[1] == "colour":  # what colour is the <shape>
            assert words[:4] == ["what", "colour", "is", "the"] and len(words) == 5
            (cell,) = [c for c, (_, shape) in objects.items() if shape == words[4]]
            expected = objects[cell][0]
        else:  # what shape is the <colour> thing
            assert words[:4] == ["what", "shape", "is", "the"] and words[5] == "thing" and len(words) == 6
            (cell,) = [c for c, (colour, _) in objects.items() if colour == words[4]]
            expected = objects[cell][1]
        assert int(data.region[i]) == cell
        assert vqa.ANSWERS[int(data.answer[i])] == expected
    assert kinds == {"colour", "shape"}


def test_aspect_opinion_points_at_the_target_categorys_opinion_word_with_the_labelled_polarity():
    """Oracle: the target's noun names its category; the one opinion word of that category in the sentence (found
    by a scan) is where ``opinion`` points, and its polarity is the label; every layout of the sentence occurs."""
    data = aspect.make_aspect(120, p_empty=0.5, generator=torch.Generator().manual_seed(2))
    layouts = set()
    for i in range(120):
        left, target, right = data.words(i)
        (category,) = [c for c, (nouns, _, _) in aspect.CATEGORIES.items() if target[-1] in nouns]
        _, positive, negative = aspect.CATEGORIES[category]
        found = [
            (side, at) for side, ctx in enumerate((left, right)) for at, w in enumerate(ctx) if w in positive + negative
        ]
        assert found == [tuple(data.opinion[i].tolist())]
        side, at = found[0]
        word = (left, right)[side][at]
        assert int(data.label[i]) == (word in positive)
        assert aspect.LABELS[int(data.label[i])] == ("positive" if word in positive else "negative")
        layouts.add((len(left) > 0, len(right) > 0))
    assert layouts == {(False, True), (True, False), (True, True)}  # target opens, closes, or sits inside
