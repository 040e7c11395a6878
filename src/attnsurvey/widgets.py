"""Explore widgets that respond in Jupyter *and* in the static, offline HTML book.

A plain ``ipywidgets.interact`` needs a running kernel: in the built book its
slider moves but nothing happens. :func:`explore` instead runs the real
function once for every value on a small grid when the cell executes, keeps
each result in a child of a ``Stack`` widget, and links the control's index
to the stack's selected child with ``jslink``. The link is part of the widget
state that the notebook stores, so the browser switches the shown result
without a kernel; in Jupyter the same widget works the same way. Every result
shown was computed by the real function at that grid value (re-run the cell
with another grid to explore other values).

With several parameters the stacks nest: the first control picks a child of
the outer stack, the second a child of each inner stack, and so on, so the
number of precomputed results is the product of the grid sizes. Keep grids
small (tens of results, not thousands): every result is stored in the page.

The function returns what to show: a string (shown as preformatted text), a
matplotlib ``Figure`` (shown as a PNG and closed, with its alternative text,
:func:`attnsurvey.plotting.describe_figure`, as the image's ``alt``), or a list/tuple of those.
Anything it prints is shown above its return value.
"""

from __future__ import annotations

import base64
import contextlib
import html
import io
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ipywidgets as widgets

from .plotting import describe_figure, figure_png

#: Largest number of precomputed results :func:`explore` accepts.
MAX_RESULTS = 64


def _render_one(item: Any) -> tuple[widgets.Widget, str]:
    """The widget that shows ``item`` and its plain-text form (a figure: its alternative text)."""
    from matplotlib.figure import Figure

    if isinstance(item, Figure):
        # an <img> with its alternative text (what a screen reader announces); an Image widget cannot carry
        # one: its tooltip stops the static page's widget manager from drawing it
        alt = describe_figure(item)
        png = base64.b64encode(figure_png(item, dpi=80)).decode("ascii")
        img = f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{png}" style="max-width:100%">'
        return widgets.HTML(img), f"[figure: {alt}]"
    if isinstance(item, str):
        return widgets.HTML(f"<pre style='margin:0;line-height:1.3'>{html.escape(item)}</pre>"), item
    raise TypeError(
        f"an explore function must return a str, a matplotlib Figure or a list of them, got {type(item).__name__}"
    )


def _results(fn: Callable[..., Any], kwargs: Mapping[str, Any]) -> list[Any]:
    """What ``fn(**kwargs)`` prints (one string, if anything) followed by what it returns."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = fn(**kwargs)
    items: list[Any] = []
    if out.getvalue():
        items.append(out.getvalue().rstrip("\n"))
    if isinstance(result, (list, tuple)):
        items.extend(result)
    elif result is not None:
        items.append(result)
    return items


class Explorer(widgets.VBox):
    """The widget :func:`explore` returns: a ``VBox`` whose plain-text form is every text result it holds.

    A notebook stores a widget's results in its widget state, which nbval does
    not compare; the plain-text form of the cell's output is compared. So that
    form lists, for every grid point in order, the values chosen and the text
    shown there (a figure as ``[figure: <its alternative text>]``): a changed result fails the chapter's
    output check like any printed number.

    Args:
        children: the controls and the results box.
        text: the plain-text form.
    """

    def __init__(self, children: Sequence[widgets.Widget], text: str) -> None:
        super().__init__(list(children))
        self.text = text

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        data: dict[str, Any] = super()._repr_mimebundle_(**kwargs)
        data["text/plain"] = self.text
        return data


def _labels(values: Sequence[Any] | Mapping[str, Any]) -> tuple[list[str], list[Any]]:
    if isinstance(values, Mapping):
        return [str(k) for k in values], list(values.values())
    vals = list(values)
    return [f"{v:g}" if isinstance(v, float) else str(v) for v in vals], vals


def _control(name: str, labels: list[str], initial: int, kind: str) -> widgets.Widget:
    options = list(zip(labels, range(len(labels))))
    style = {"description_width": "initial"}
    if kind == "slider":
        return widgets.SelectionSlider(
            options=options, index=initial, description=name, style=style, continuous_update=True
        )
    if kind == "dropdown":
        return widgets.Dropdown(options=options, index=initial, description=name, style=style)
    raise ValueError(f"control kind must be 'slider' or 'dropdown', got {kind!r}")


def explore(
    fn: Callable[..., Any],
    *,
    initial: Mapping[str, Any] | None = None,
    controls: Mapping[str, str] | None = None,
    **grid: Sequence[Any] | Mapping[str, Any],
) -> Explorer:
    """Precompute ``fn`` over a grid and return controls linked to the results in the browser.

    Args:
        fn: the function to explore; called once per grid point with one keyword
            per parameter; returns text, a number or a matplotlib figure.
        initial: the value shown first per parameter (default: the first).
        controls: ``"slider"`` (default for numbers) or ``"dropdown"`` per parameter.
        **grid: one keyword per parameter of ``fn``: a sequence of values, or a
            ``{label: value}`` mapping for a dropdown with readable labels.

    Returns:
        An :class:`Explorer` (a ``VBox``: controls above the results; its plain-text
        form lists every text result, for the notebook's output check); display it
        as a cell's value.

    Raises:
        ValueError: an empty grid, an unknown initial value, or more than
            :data:`MAX_RESULTS` results.
        TypeError: ``fn`` returns something it cannot show.
    """
    if not grid:
        raise ValueError("explore needs at least one parameter grid, e.g. explore(fn, d_k=[4, 16, 64])")
    names = list(grid)
    labelled = {n: _labels(grid[n]) for n in names}
    for n, (labels, _) in labelled.items():
        if not labels:
            raise ValueError(f"the grid of {n!r} is empty")
    total = math.prod(len(labels) for labels, _ in labelled.values())
    if total > MAX_RESULTS:
        raise ValueError(f"{total} results to precompute; at most {MAX_RESULTS} (use a coarser grid)")
    initial = dict(initial or {})
    kinds = dict(controls or {})
    ctrls: dict[str, widgets.Widget] = {}
    for n, (labels, values) in labelled.items():
        start = 0
        if n in initial:
            if initial[n] not in values:
                raise ValueError(f"initial value {initial[n]!r} of {n!r} is not on its grid {values}")
            start = values.index(initial[n])
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        kind = kinds.get(n, "slider" if numeric else "dropdown")
        ctrls[n] = _control(n, labels, start, kind)

    text: list[str] = []

    def build(depth: int, chosen: dict[str, Any], shown: tuple[str, ...]) -> widgets.Widget:
        if depth == len(names):
            items = _results(fn, chosen)
            text.append(", ".join(shown) + ":")
            rendered = [_render_one(i) for i in items]
            text.extend(t for _, t in rendered)  # each string as it is, each figure as its alternative text
            return widgets.VBox([w for w, _ in rendered])
        n = names[depth]
        labels, values = labelled[n]
        children = [build(depth + 1, {**chosen, n: v}, (*shown, f"{n}={lab}")) for lab, v in zip(labels, values)]
        stack = widgets.Stack(children, selected_index=ctrls[n].index)
        widgets.jslink((ctrls[n], "index"), (stack, "selected_index"))
        return stack

    results = build(0, {}, ())
    return Explorer([widgets.HBox(list(ctrls.values())), results], "\n".join(text))


def grid_size(**grid: Sequence[Any]) -> int:
    """The number of results :func:`explore` would precompute for ``grid``.

    Args:
        **grid: the grid, as for :func:`explore`.

    Returns:
        The product of the number of values per parameter.
    """
    return math.prod(len(list(v)) for v in grid.values())


__all__ = ["MAX_RESULTS", "Explorer", "explore", "grid_size"]
