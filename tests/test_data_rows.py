"""The shared row helpers of the data generators."""

from __future__ import annotations

import pytest
import torch

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
