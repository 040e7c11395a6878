"""The shared validation helpers of ``attnsurvey._checks``: each raises on bad input and passes good input."""

import numpy as np
import pytest
import torch

from attnsurvey._checks import InputTypeError, check_rank, check_same_shape, with_defaults


def test_check_rank_returns_a_tensor_of_the_rank():
    w = torch.ones(3)
    assert check_rank(w, 1, "w", "(d_w,)") is w


def test_check_rank_names_symbol_layout_and_shape():
    with pytest.raises(ValueError, match=r"^w must have shape \(d_w,\), got \(3, 2\)$"):
        check_rank(torch.ones(3, 2), 1, "w", "(d_w,)")


def test_check_rank_rejects_non_tensors():
    with pytest.raises(InputTypeError, match="W_d must be a torch.Tensor"):
        check_rank(np.ones((2, 2)), 2, "W_d", "(d_w, d_v)")


def test_check_same_shape():
    check_same_shape(torch.ones(2, 3), torch.zeros(2, 3), "a", "G", "needs one shape")
    with pytest.raises(ValueError, match=r"^needs one shape, got a \(2, 3\), G \(3, 2\)$"):
        check_same_shape(torch.ones(2, 3), torch.zeros(3, 2), "a", "G", "needs one shape")


def test_with_defaults_fills_the_missing_options_and_rejects_undeclared_names():
    defaults = {"heads": 2, "hops": 1}
    assert with_defaults({"hops": 3}, defaults, "Opts") == {"heads": 2, "hops": 3}  # given wins
    assert with_defaults({}, defaults, "Opts") == defaults
    assert defaults == {"heads": 2, "hops": 1}  # the defaults are not modified
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['head', 'hop'\]; Opts declares \['heads', 'hops'\]"):
        with_defaults({"hop": 1, "head": 4}, defaults, "Opts")
