"""Inputs at the boundary of training helpers and data generators: arrays and lists refused at the entry,
generators that validate when called, an empty batch's loss, negative counts refused."""

from __future__ import annotations

import pytest
import torch

from attnsurvey import training
from attnsurvey._checks import InputTypeError
from attnsurvey.data.sentiment import sentiment_reviews
from attnsurvey.data.sorting import sorting_batches
from attnsurvey.experiments.general_mechanisms import AlignmentClassifier, classifier_loss


def test_lists_and_arrays_refused_naming_the_argument():
    logits, targets = torch.randn(3, 4), torch.tensor([0, 1, 2])
    for bad in (logits.tolist(), logits.numpy()):
        with pytest.raises(InputTypeError, match="logits"):
            training.cross_entropy_mean(bad, targets)  # type: ignore[arg-type]
        with pytest.raises(InputTypeError, match="logits"):
            training.accuracy(bad, targets)  # type: ignore[arg-type]
    with pytest.raises(InputTypeError, match="logits"):
        training.cross_entropy_mean(logits.long(), targets)


def test_generators_validate_when_called():
    with pytest.raises(ValueError, match="batch_size"):
        training.minibatches((torch.zeros(4),), 1, batch_size=0)
    with pytest.raises(ValueError, match="n_max"):
        sorting_batches(3, 2, 2, -1)
    with pytest.raises(ValueError, match="n=-1"):
        sentiment_reviews(-1)


def test_classifier_loss_of_an_empty_batch_is_zero_on_the_graph():
    torch.manual_seed(0)
    model = AlignmentClassifier(3, 4, 2)
    batch = (
        torch.zeros(0, 5, 4),
        torch.zeros(0, 3),
        torch.zeros(0, dtype=torch.long),
        torch.zeros(0, dtype=torch.long),
    )
    loss = classifier_loss(model, batch)
    assert float(loss.detach()) == 0.0
    loss.backward()
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters())
