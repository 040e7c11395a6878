"""Tables that notebooks display: an HTML ``<table>`` in the book and in Jupyter, readable text elsewhere.

A cell of a :class:`Table` is written in a small inline markup:

* ``$...$`` is inline math (LaTeX), typeset by MathJax: in HTML it becomes
  ``<span class="math notranslate nohighlight">\\(...\\)</span>``, the form
  Sphinx gives inline math, which the book's MathJax typesets even inside a
  notebook output;
* ``` ``...`` ``` (single backticks) is code; dotted names and test ids get
  break points (``<wbr>``) after ``.``, ``/``, ``::`` and ``_`` so that a
  narrow column wraps them instead of growing;
* a newline starts a new line in the cell (``<br>``).

Everything else is text and is HTML-escaped. The plain-text form
(``repr``, what a terminal or a text-only front end shows) lists one record
per row, using the separate ``plain`` cells.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass

#: ``$math$`` or `` `code` ``, the two inline forms of a cell.
_INLINE = re.compile(r"\$([^$]+)\$|`([^`]+)`")
_BREAK_AFTER = re.compile(r"(::|[./_])")


def _code_html(code: str) -> str:
    """``<code>`` with a break point after each ``.``, ``/``, ``::`` and ``_``."""
    parts = _BREAK_AFTER.split(code)
    out = []
    for i, part in enumerate(parts):
        out.append(html.escape(part))
        if i % 2 == 1:  # a separator: allow a line break after it
            out.append("<wbr>")
    return "<code>" + "".join(out) + "</code>"


def inline_html(cell: str) -> str:
    """One cell's markup as HTML: escaped text, ``$...$`` as MathJax inline math, `` `...` `` as code.

    Args:
        cell: the cell's text in this module's inline markup.

    Returns:
        The HTML of the cell.

    Raises:
        ValueError: an unmatched ``$`` or backtick (a formula or code span left open
            would swallow the rest of the cell).
    """
    lines = []
    for line in cell.split("\n"):
        pieces, pos = [], 0
        for m in _INLINE.finditer(line):
            pieces.append(html.escape(line[pos : m.start()]))
            if m.group(1) is not None:
                pieces.append(f'<span class="math notranslate nohighlight">\\({html.escape(m.group(1))}\\)</span>')
            else:
                pieces.append(_code_html(m.group(2)))
            pos = m.end()
        rest = line[pos:]
        if "$" in rest or "`" in rest:
            raise ValueError(f"unmatched $ or backtick in table cell {cell!r}")
        pieces.append(html.escape(rest))
        lines.append("".join(pieces))
    return "<br>".join(lines)


@dataclass(frozen=True)
class Table:
    """A table with an HTML form (``_repr_html_``) and a plain-text form (``repr``).

    Each ``<td>`` carries its column name as ``data-label``, for a narrow screen
    that shows rows as cards.

    Attributes:
        header: the column names (``n_c`` of them).
        rows: one tuple of ``n_c`` cells per row, in the inline markup of this module.
        plain: the same rows as plain text (defaults to ``rows`` with the markup left in).
        widths: each column's share of the table's width, in percent (a
            ``<colgroup>``; none by default).
        css_class: the class of the ``<table>`` (the book's stylesheet styles
            ``attnsurvey-table``).

    Raises:
        ValueError: a row or a plain row without ``n_c`` cells, ``plain`` without
            one row per row, or ``widths`` without ``n_c`` entries.
    """

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    plain: tuple[tuple[str, ...], ...] | None = None
    widths: tuple[int, ...] | None = None
    css_class: str = "attnsurvey-table"

    def __post_init__(self) -> None:
        n_c = len(self.header)
        for name, rows in (("rows", self.rows), ("plain", self.plain or ())):
            for row in rows:
                if len(row) != n_c:
                    raise ValueError(f"a row of {name} has {len(row)} cells, the header n_c = {n_c}: {row!r}")
        if self.plain is not None and len(self.plain) != len(self.rows):
            raise ValueError(f"plain has {len(self.plain)} rows, rows has {len(self.rows)}")
        if self.widths is not None and len(self.widths) != n_c:
            raise ValueError(f"widths has {len(self.widths)} entries, the header n_c = {n_c}")

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.header)
        labels = [html.escape(h, quote=True) for h in self.header]
        body = "".join(
            "<tr>" + "".join(f'<td data-label="{lab}">{inline_html(c)}</td>' for lab, c in zip(labels, row)) + "</tr>\n"
            for row in self.rows
        )
        cols = ""
        if self.widths is not None:
            cols = "<colgroup>" + "".join(f'<col style="width: {w}%">' for w in self.widths) + "</colgroup>\n"
        fixed = " attnsurvey-table-fixed" if self.widths is not None else ""
        # The wrapper scrolls the table sideways inside its own box when the page is too narrow.
        return (
            f'<div class="{self.css_class}-wrapper" style="overflow-x: auto; max-width: 100%">\n'
            f'<table class="{self.css_class}{fixed}">\n{cols}<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody>\n</table>\n</div>'
        )

    def __repr__(self) -> str:
        """One record per row: the first cell, then ``column: value`` lines (multi-line values indented)."""
        rows = self.plain if self.plain is not None else self.rows
        width = max(len(h) for h in self.header[1:]) if len(self.header) > 1 else 0
        records = []
        for row in rows:
            lines = [row[0].replace("\n", " ")]
            for name, value in zip(self.header[1:], row[1:]):
                values = value.split("\n") if value else ["-"]
                lines.append(f"  {name + ':':<{width + 1}} {values[0]}")
                lines += [f"  {'':<{width + 1}} {v}" for v in values[1:]]
            records.append("\n".join(lines))
        return "\n".join(records)


def table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    plain: Sequence[Sequence[str]] | None = None,
    widths: Sequence[int] | None = None,
) -> Table:
    """A :class:`Table` from lists.

    Args:
        header: the column names.
        rows: the rows, one sequence of cells each, in the inline markup of this module.
        plain: the rows as plain text (default: ``rows``).
        widths: each column's share of the width, in percent.

    Returns:
        The :class:`Table` (see there for the cell markup and what it raises).
    """
    return Table(
        tuple(header),
        tuple(tuple(r) for r in rows),
        None if plain is None else tuple(tuple(r) for r in plain),
        None if widths is None else tuple(widths),
    )
