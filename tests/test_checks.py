"""The shared validation helpers of ``attnsurvey._checks``: each raises on bad input and passes good input."""

from typing import Annotated, TypedDict

import numpy as np
import pytest
import torch

from attnsurvey._checks import (
    Default,
    InputTypeError,
    broadcast_batch,
    check_rank,
    check_same_shape,
    option_defaults,
    with_defaults,
)


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


class _Sizes(TypedDict, total=False):
    width: Annotated[int, Default(32)]
    name: Annotated[str, Default("plain")]


class _MoreSizes(_Sizes, total=False):
    depth: Annotated[int, Default(2)]


class _Undeclared(TypedDict, total=False):
    width: Annotated[int, Default(32)]
    depth: int  # no default


def test_option_defaults_reads_each_annotation_inherited_ones_included():
    assert option_defaults(_Sizes) == {"width": 32, "name": "plain"}
    assert option_defaults(_MoreSizes) == {"width": 32, "name": "plain", "depth": 2}
    d = option_defaults(_Sizes)
    d["width"] = 1  # a new dict each time: a caller cannot change the defaults
    assert option_defaults(_Sizes)["width"] == 32
    assert with_defaults({"depth": 5}, option_defaults(_MoreSizes), "_MoreSizes")["depth"] == 5


def test_option_defaults_refuses_an_option_without_a_default():
    with pytest.raises(TypeError, match=r"_Undeclared\.depth must be annotated"):
        option_defaults(_Undeclared)


@pytest.mark.parametrize(
    ("shapes", "expected"),
    [
        (((2, 3), (2, 3), (2, 3)), (2, 3)),
        (((2, 1), (1, 3)), (2, 3)),
        (((4, 1), (3,)), (4, 3)),
        (((2,), (3,)), None),
        (((2, 3), [2, 3]), (2, 3)),  # a list and a tuple: not the one-shape shortcut, the same answer
        ((), ()),
    ],
)
def test_broadcast_batch_against_torch(shapes, expected):
    assert broadcast_batch(*shapes) == expected
    if expected is not None and shapes:
        assert expected == tuple(torch.broadcast_shapes(*(tuple(s) for s in shapes)))
