"""Plotting helpers: the attention heat map every chapter uses, and PNG display.

Figures are shown as PNG (never SVG) so that nbval, which compares SVG text,
does not compare them; the book still shows them. Each figure carries an
alternative text that says what it shows (:func:`describe_figure`, or one set by
its author with :func:`set_alt`): :func:`show` stores it as the image's
plain-text form (which nbval does compare) and in the output's metadata, from
where ``scripts/execute_notebooks.py`` copies it to the cell's
``mystnb.image.alt``, the ``alt`` attribute of the image in the built book.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from torch import Tensor


def _to_numpy(x: Any) -> np.ndarray:
    if isinstance(x, Tensor):
        return x.detach().cpu().float().numpy()
    return np.asarray(x, dtype=float)


def attention_heatmap(
    weights: Tensor | np.ndarray | Sequence[Any],
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    titles: Sequence[str] | None = None,
    xlabel: str = "keys / feature vectors",
    ylabel: str = "queries",
    vmin: float = 0.0,
    vmax: float | None = None,
    cmap: str = "viridis",
    figsize: tuple[float, float] | None = None,
    suptitle: str | None = None,
    colorbar_label: str = "attention weight",
) -> Figure:
    """Heat maps of attention weights (queries x keys) with ONE shared colour bar.

    Panels share a colour scale (``vmax`` defaults to the largest weight), so they
    are comparable.

    Args:
        weights: ``(n_q, n_f)`` or a stack ``(m, n_q, n_f)`` drawn side by side
            (a tensor, an array or nested lists).
        x_labels: one label per key (``n_f``).
        y_labels: one label per query (``n_q``).
        titles: one title per panel (``m``).
        xlabel: the x-axis label.
        ylabel: the y-axis label.
        vmin: the lower end of the colour scale.
        vmax: the upper end (default: the largest weight).
        cmap: a matplotlib colour map name.
        figsize: the figure size in inches (default: from the number of panels).
        suptitle: a title above all panels.
        colorbar_label: what the colours show when the matrix is not a weight
            (scores, counts, a code).

    Shape:
        weights: ``(n_q, n_f)`` or ``(m, n_q, n_f)``.

    Returns:
        The matplotlib figure.

    Raises:
        ValueError: ``weights`` is not 2-D or 3-D.
    """
    w = _to_numpy(weights)
    if w.ndim == 2:
        w = w[None]
    if w.ndim != 3:
        raise ValueError(f"weights must be (n_q, n_f) or (m, n_q, n_f), got shape {w.shape}")
    m, n_q, n_f = w.shape
    vmax = float(w.max()) if vmax is None else vmax
    figsize = figsize or (min(3.2 * m + 1.0, 14.0), max(2.2, min(0.3 * n_q + 1.2, 6.0)))
    fig, axes = plt.subplots(1, m, figsize=figsize, squeeze=False, constrained_layout=True)
    for i, ax in enumerate(axes[0]):
        im = ax.imshow(w[i], vmin=vmin, vmax=vmax, cmap=cmap, aspect="auto")
        # Ticks sit on the cells: every label when labels are given, otherwise integer
        # positions at a round step chosen from the panel's size, so numbers never overlap.
        if x_labels is not None:
            ax.set_xticks(range(n_f), list(x_labels), rotation=90 if n_f > 8 else 0, fontsize=8)
        else:
            ax.xaxis.set_major_locator(MaxNLocator(nbins="auto", integer=True))
        if i > 0:
            ax.set_yticks([])
        elif y_labels is not None:
            ax.set_yticks(range(n_q), list(y_labels), fontsize=8)
        else:
            ax.yaxis.set_major_locator(MaxNLocator(nbins="auto", integer=True))
        ax.set_xlabel(xlabel)
        if i == 0:
            ax.set_ylabel(ylabel)
        if titles is not None:
            ax.set_title(titles[i], fontsize=10)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.9, label=colorbar_label)
    if suptitle:
        fig.suptitle(suptitle)
    return fig


#: The attribute of a figure that holds an alternative text set by :func:`set_alt`.
_ALT = "attnsurvey_alt"


def set_alt(fig: Figure, text: str) -> Figure:
    """Give ``fig`` the alternative text ``text`` (what the figure shows, in words), which
    :func:`describe_figure` then returns instead of the description it would derive.

    Args:
        fig: a matplotlib figure.
        text: one or two sentences; not empty.

    Returns:
        ``fig``, so that a figure function can end with ``return set_alt(fig, "...")``.

    Raises:
        ValueError: ``text`` is empty.
    """
    if not text.strip():
        raise ValueError("the alternative text of a figure must not be empty")
    setattr(fig, _ALT, text.strip())
    return fig


#: TeX commands read aloud in an alternative text (the rest lose their backslash).
_TEX_WORDS = {
    r"\sum": "sum of",
    r"\propto": "proportional to",
    r"\dots": "...",
    r"\ldots": "...",
    r"\cdot": "times",
    r"\times": "times",
    r"\in": "in",
    r"\to": "to",
    r"\le": "<=",
    r"\ge": ">=",
}


def _plain(text: str) -> str:
    """A label in plain words: math markers and font commands dropped, line breaks joined."""
    import re

    for command, word in _TEX_WORDS.items():
        text = re.sub(re.escape(command) + r"(?![A-Za-z])", f" {word} ", text)
    text = re.sub(r"\\(?:mathrm|mathbf|boldsymbol|text|operatorname|mathcal)\s*", "", text)
    text = re.sub(r"\\hat\s*\{?([A-Za-z])\}?", r"\1-hat", text)
    text = text.replace("$", "").replace("{", "").replace("}", "").replace("\\", "")
    return " ".join(text.split())


def _texts(items: Sequence[Any]) -> list[str]:
    return [t for t in (_plain(item.get_text()) for item in items) if t]


def _panel(ax: Axes) -> str | None:
    """One panel in words: its kind, title, axes and series (``None`` for a colour bar or an empty panel)."""
    if ax.get_label() == "<colorbar>" or not ax.get_visible():
        return None
    from matplotlib.collections import PathCollection
    from matplotlib.container import BarContainer

    if ax.images:
        kind = "heat map"
    elif any(isinstance(c, BarContainer) for c in ax.containers):
        kind = "bar chart"
    elif any(np.size(line.get_xdata()) > 1 for line in ax.lines):
        kind = "line chart"
    elif any(isinstance(c, PathCollection) for c in ax.collections):
        kind = "scatter plot"
    elif ax.texts or ax.patches:
        kind = "diagram"
    else:
        return None
    words = kind
    title = _plain(ax.get_title())
    if title:
        words += f" '{title}'"
    x, y = _plain(ax.get_xlabel()), _plain(ax.get_ylabel())
    if kind == "heat map" and (x or y):
        words += "".join(f", {axis}: {label}" for axis, label in (("rows", y), ("columns", x)) if label)
    elif x and y:
        words += f" of {y} against {x}"
    elif x or y:
        words += f", axis: {x or y}"
    legend = ax.get_legend()
    if legend is not None:
        entries = _texts(legend.get_texts())
        if entries:
            words += f"; series: {', '.join(entries)}"
    if kind == "diagram":
        labels = list(dict.fromkeys(_texts(ax.texts)))
        if labels:
            words += f" with the labels {'; '.join(labels[:12])}" + ("; ..." if len(labels) > 12 else "")
    return words


def describe_figure(fig: Figure) -> str:
    """What ``fig`` shows, in words: its alternative text.

    The text set by :func:`set_alt` if there is one; otherwise derived from the figure: its
    title, then each panel's kind (heat map, bar chart, line chart, scatter plot, diagram), title,
    axis labels and legend entries (a diagram: its text labels).

    Args:
        fig: a matplotlib figure.

    Returns:
        One line of text, never empty.
    """
    given = getattr(fig, _ALT, None)
    if given:
        return str(given)
    panels = [p for p in (_panel(ax) for ax in fig.axes) if p]
    suptitle = _plain(fig.get_suptitle())
    head = f"Figure '{suptitle}'" if suptitle else "Figure"
    if not panels:
        return head + "."
    if len(panels) == 1:
        return f"{head}: {panels[0]}."
    return f"{head} with {len(panels)} panels: " + "; ".join(f"({i + 1}) {p}" for i, p in enumerate(panels)) + "."


def figure_png(fig: Figure, dpi: int = 90) -> bytes:
    """``fig`` as PNG bytes (tight bounding box); the figure is closed.

    Args:
        fig: a matplotlib figure.
        dpi: the resolution.

    Returns:
        The PNG file's bytes.
    """
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def show(fig: Figure) -> None:
    """Display ``fig`` as a PNG image in a notebook, with its alternative text, and close it.

    The output holds the PNG, the alternative text (:func:`describe_figure`) as its plain-text
    form, and the same text as the image's ``alt`` metadata.

    Args:
        fig: a matplotlib figure.
    """
    import base64

    from IPython.display import display

    alt = describe_figure(fig)
    png = base64.b64encode(figure_png(fig)).decode("ascii")
    display({"image/png": png, "text/plain": alt}, raw=True, metadata={"image/png": {"alt": alt}})


def trend_plot(
    x: Sequence[float],
    series: Mapping[str, Sequence[Sequence[float]]],
    *,
    by_seed: bool = False,
    band: bool = False,
    ax: Axes | None = None,
    xlabel: str = "",
    ylabel: str = "",
    title: str | None = None,
    logx: bool = False,
    ylim: tuple[float, float] | None = None,
    hline: tuple[float, str] | None = None,
    shade: tuple[float, float] | None = None,
    shade_label: str | None = None,
    figsize: tuple[float, float] = (5.0, 3.2),
) -> Figure:
    """A trend over seeds: for every series, the mean at each ``x`` with ± 1 sd error bars (or a band).

    The spread is the sample standard deviation (``ddof=1``, as
    :func:`attnsurvey.stats.mean_sd` prints it); an ``x`` where any value is NaN
    (the method has no value there) is left as a gap. With several series the error
    bars are offset sideways a little so that they do not hide each other.

    Args:
        x: the x values.
        series: ``series[name]`` holds one row per ``x`` value with the seeds' values
            there (rows may differ in length); with ``by_seed=True``, one row per
            seed with a value per ``x``.
        by_seed: read ``series`` by seed (see above).
        band: draw a shaded mean ± sd band instead of error bars (for curves with many points).
        ax: the axes to draw into (default: a new figure).
        xlabel: the x-axis label.
        ylabel: the y-axis label.
        title: the axes title.
        logx: a logarithmic x axis.
        ylim: the y range.
        hline: a labelled dashed reference level ``(y, label)`` (chance, a computed bound).
        shade: an ``x`` interval to shade (the training lengths).
        shade_label: the legend label of the shaded interval.
        figsize: the size of a new figure, in inches.

    Returns:
        The figure drawn into.

    Raises:
        ValueError: a series without one row per ``x`` value (or, by seed, one value
            per ``x`` in every row), an ``x`` with fewer than two values, or an
            ``ax`` that belongs to a subfigure.
    """
    xs = np.asarray(x, dtype=float)
    if ax is None:
        _, ax = plt.subplots(figsize=figsize, constrained_layout=True)
    fig = ax.get_figure()
    if not isinstance(fig, Figure):
        raise ValueError("ax must belong to a figure (not a subfigure)")
    if shade is not None:
        ax.axvspan(*shade, color="#eeeeee", zorder=0, label=shade_label)
    for k, (name, rows) in enumerate(series.items()):
        if by_seed:
            if any(len(r) != len(xs) for r in rows):
                raise ValueError(f"series {name!r}: every seed needs one value per x value ({len(xs)})")
            rows = [list(col) for col in zip(*rows)]
        if len(rows) != len(xs):
            raise ValueError(f"series {name!r} needs one row of seed values per x value ({len(xs)}), got {len(rows)}")
        if any(len(r) < 2 for r in rows):
            raise ValueError(f"series {name!r}: mean ± sd needs at least 2 values (seeds) per x value")
        vals = [np.asarray(r, dtype=float) for r in rows]
        mean = np.array([v.mean() for v in vals])
        sd = np.array([v.std(ddof=1) for v in vals])
        if band:
            (line,) = ax.plot(xs, mean, marker="o", ms=3, label=name)
            ax.fill_between(xs, mean - sd, mean + sd, color=line.get_color(), alpha=0.2, lw=0)
            continue
        step = (k - (len(series) - 1) / 2) * 0.03
        shifted = xs * 2**step if logx else xs + step * (float(np.ptp(xs)) if len(xs) > 1 else 1.0)
        ax.errorbar(shifted, mean, yerr=sd, fmt="o-", ms=4, capsize=3, label=name)
    if hline is not None:
        ax.axhline(hline[0], color="grey", ls="--", lw=1, label=hline[1])
    if logx:
        ax.set_xscale("log", base=2)
        ax.minorticks_off()
    ax.set_xticks(xs, [f"{v:g}" for v in xs])  # the measured x values, not the scale's round numbers
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    return fig


#: Fill colours of the block diagrams: features, queries, attention, outputs, inputs.
FEATURE_FILL, QUERY_FILL, ATTENTION_FILL, OUTPUT_FILL, IO_FILL = "#dbe9f6", "#fde0c5", "#f9d6d5", "#d5f0dc", "#eeeeee"


def diagram_axes(
    w: float, h: float, xlim: tuple[float, float], ylim: tuple[float, float], title: str
) -> tuple[Figure, Axes]:
    """A ``w`` x ``h`` inch figure with bare axes spanning ``xlim`` x ``ylim``, for block diagrams.

    Args:
        w: the width in inches.
        h: the height in inches.
        xlim: the x range of the axes.
        ylim: the y range of the axes.
        title: the axes title.

    Returns:
        ``(figure, axes)``.
    """
    fig, ax = plt.subplots(figsize=(w, h))
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.axis("off")
    ax.set_title(title, fontsize=10)
    return fig, ax


def draw_box(
    ax: Axes, xy: tuple[float, float], text: str, w: float = 1.6, h: float = 0.6, color: str = "#dbe9f6", fs: int = 9
) -> None:
    """Draw a rounded box centred at ``xy`` with ``text`` (for diagrams).

    Args:
        ax: the axes to draw into.
        xy: the centre, in data coordinates.
        text: the label inside the box.
        w: the width, in data units.
        h: the height, in data units.
        color: the fill colour.
        fs: the font size.
    """
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(FancyBboxPatch((xy[0] - w / 2, xy[1] - h / 2), w, h, boxstyle="round,pad=0.04", fc=color, ec="#333"))
    ax.text(*xy, text, ha="center", va="center", fontsize=fs)


def draw_arrow(
    ax: Axes,
    a: tuple[float, float],
    b: tuple[float, float],
    text: str | None = None,
    color: str = "#444",
    rad: float = 0.0,
    lw: float = 1.1,
    alpha: float = 1.0,
) -> None:
    """Draw an arrow from ``a`` to ``b``, optionally labelled at its middle (for diagrams).

    Args:
        ax: the axes to draw into.
        a: the start, in data coordinates.
        b: the end, in data coordinates.
        text: a label at the middle of the arrow.
        color: the arrow's colour.
        rad: the curvature (0 = straight).
        lw: the line width.
        alpha: the opacity.
    """
    from matplotlib.patches import FancyArrowPatch

    ax.add_patch(
        FancyArrowPatch(
            a,
            b,
            arrowstyle="-|>",
            mutation_scale=10,
            color=color,
            lw=lw,
            alpha=alpha,
            connectionstyle=f"arc3,rad={rad}",
        )
    )
    if text:
        ax.text((a[0] + b[0]) / 2, (a[1] + b[1]) / 2 + 0.12, text, ha="center", fontsize=8, color="#333")
