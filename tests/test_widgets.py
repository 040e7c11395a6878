"""explore(): every grid value is precomputed by the real function and linked client-side."""

from __future__ import annotations

import html

import ipywidgets as widgets
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest

from attnsurvey.widgets import MAX_RESULTS, explore, grid_size


def _leaves(w):
    if isinstance(w, widgets.Stack):
        return [leaf for c in w.children for leaf in _leaves(c)]
    return [w]


def test_one_parameter_precomputes_each_value_and_links_the_control():
    calls = []

    def f(k):
        calls.append(k)
        return f"k = {k}"

    box = explore(f, k=[1, 2, 3], initial={"k": 2})
    ctrl, stack = box.children[0].children[0], box.children[1]
    assert calls == [1, 2, 3]
    assert isinstance(ctrl, widgets.SelectionSlider) and ctrl.index == 1
    assert stack.selected_index == 1
    texts = [leaf.children[0].value for leaf in _leaves(stack)]
    assert ["k = 1" in t for t in texts] == [True, False, False]
    # the link is a jslink: it lives in the browser, so it is a Link widget, not a Python observer
    ctrl.index = 2
    assert stack.selected_index == 1


def test_two_parameters_nest_stacks_and_capture_prints_and_figures():
    def f(a, name):
        print("a", a, name)
        fig, ax = plt.subplots()
        ax.plot([0, a])
        return fig

    box = explore(f, a=[1.0, 2.0], name={"x": "X", "y": "Y"})
    ctrls = box.children[0].children
    assert isinstance(ctrls[1], widgets.Dropdown)
    leaves = _leaves(box.children[1])
    assert len(leaves) == grid_size(a=[1, 2], name=["x", "y"]) == 4
    assert "a 1.0 X" in leaves[0].children[0].value
    figure = leaves[0].children[1]  # a figure is an <img> with its alternative text, as a PNG data URL
    assert (
        isinstance(figure, widgets.HTML) and '<img alt="' in figure.value and "data:image/png;base64," in figure.value
    )


def test_bad_grids_and_returns_are_clear_errors():
    with pytest.raises(ValueError, match="at least one parameter"):
        explore(lambda: "x")
    with pytest.raises(ValueError, match="empty"):
        explore(lambda k: "x", k=[])
    with pytest.raises(ValueError, match="not on its grid"):
        explore(lambda k: "x", k=[1, 2], initial={"k": 5})
    with pytest.raises(ValueError, match=f"at most {MAX_RESULTS}"):
        explore(lambda a, b: "x", a=range(10), b=range(10))
    with pytest.raises(TypeError, match="must return a str"):
        explore(lambda k: 42, k=[1])


def test_the_compared_plain_text_lists_every_text_result_in_grid_order():
    """nbval compares a widget cell's text/plain, not its widget state: that text must carry the results."""

    def f(a, name):
        print("a", a, name)
        fig, ax = plt.subplots()
        ax.plot([0, a])
        ax.set_title(f"a = {a}")
        return [fig, f"sum = {a + len(name)}"]

    box = explore(f, a=[1.0, 2.0], name={"x": "X", "yy": "YY"})
    bundle = box._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle  # still a widget
    assert bundle["text/plain"] == "\n".join(
        [
            "a=1, name=x:",
            "a 1.0 X",
            "[figure: Figure: line chart 'a = 1.0'.]",
            "sum = 2.0",
            "a=1, name=yy:",
            "a 1.0 YY",
            "[figure: Figure: line chart 'a = 1.0'.]",
            "sum = 3.0",
            "a=2, name=x:",
            "a 2.0 X",
            "[figure: Figure: line chart 'a = 2.0'.]",
            "sum = 3.0",
            "a=2, name=yy:",
            "a 2.0 YY",
            "[figure: Figure: line chart 'a = 2.0'.]",
            "sum = 4.0",
        ]
    )
    # the text is what the stored pages show, leaf by leaf
    shown = [leaf.children[-1].value for leaf in _leaves(box.children[1])]
    # each figure is an <img> whose alt is its alternative text, what a screen reader announces
    alts = [leaf.children[-2].value.split('alt="')[1].split('"')[0] for leaf in _leaves(box.children[1])]
    assert [html.unescape(a) for a in alts] == [
        "Figure: line chart 'a = 1.0'.",
        "Figure: line chart 'a = 1.0'.",
        "Figure: line chart 'a = 2.0'.",
        "Figure: line chart 'a = 2.0'.",
    ]
    assert [s.split(">")[1].split("<")[0] for s in shown] == ["sum = 2.0", "sum = 3.0", "sum = 3.0", "sum = 4.0"]
