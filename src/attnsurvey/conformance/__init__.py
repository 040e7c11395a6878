"""Conformance checks: the survey's equations, as this package implements them, against real libraries.

A *check* computes one equation twice: once with the package's own reference
code (the specification side: :func:`attnsurvey.attention.attend`, the
multi-head stack, :func:`attnsurvey.beyond.positions.apply_rope`, the sparse
maps, ...) and once with a third-party implementation reached through a small
*adapter*. The adapter maps the target's inputs, weights and outputs onto the
equation's symbols (layouts, mask polarity, weight shapes) and nothing else.

The verdict of a check is one of

* ``conforms``: the two sides agree to :data:`TOLERANCE` (the largest absolute
  error is reported);
* ``differs``: they do not; when the check names a :class:`Convention` (a choice
  the library makes differently, e.g. T5's unscaled scores) and the difference
  vanishes once that convention is mapped, the difference is *explained*;
  otherwise it is unexplained, the sign of a wrong adapter or a real bug;
* ``not applicable``: the target has no implementation of the equation (or the
  library is not installed).

Targets are ``torch``, ``transformers``, ``x_transformers`` and ``entmax``, one
adapter module each (:data:`TARGETS`); the libraries are imported only when a
target's checks run, so importing :mod:`attnsurvey` never imports them.

Command line::

    python -m attnsurvey.conformance torch transformers x_transformers entmax
    python -m attnsurvey.conformance entmax --json
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..catalog import catalogued
from ..display_table import Table, table

CHAPTER = "book/conformance.ipynb"

#: The largest absolute error (float64 computations) that still counts as agreement.
TOLERANCE = 1e-6
#: Errors at or below this (float64 rounding) are all shown as "< 1e-12" (:func:`format_error`).
ROUNDING_FLOOR = 1e-12

#: Target name -> the module holding its checks (each defines ``checks() -> list[Check]``).
TARGETS: dict[str, str] = {
    "torch": "attnsurvey.conformance.torch_target",
    "transformers": "attnsurvey.conformance.transformers_target",
    "x_transformers": "attnsurvey.conformance.x_transformers_target",
    "entmax": "attnsurvey.conformance.entmax_target",
}

#: Equation key -> the row label of the conformance table, in table order.
EQUATIONS: dict[str, str] = {
    "eq25": "Eqs. (24)-(25): softmax weights and context (scaled dot-product scores, with the book's masks)",
    "fully-masked": "Fully-masked row: zero weights, zero context",
    "causal": "Causal mask: query $i$ sees keys $j \\le i$",
    "eq38-40": "Eq. (38)-(40): multi-head attention",
    "gqa": "Grouped K/V heads ($h_{kv} < h$)",
    "eq37": "Eq. (37): post-norm residual, Normalize(f + c)",
    "pre-norm": "Pre-norm residual, f + c(Normalize(f)) (a variant of Eq. (37), not in the survey)",
    "rope": "RoPE: rotary positions",
    "alibi": "ALiBi: linear distance bias",
    "relative-bias": "Relative position bias added to the scores",
    "mla": "Multi-head latent attention (MLA, DeepSeek-V2): keys and values from one latent, a decoupled RoPE key",
    "mla-absorbed": "MLA, absorbed form: $W_{UK}$ folded into the queries, $W_{UV}$ into $W_O$",
    "mla-cache": "MLA decoding: a cache of the latent $c$ and the RoPE key $k^R$",
    "gated-delta": "Gated delta rule (Gated DeltaNet, Qwen3-Next): "
    "$S_t = \\alpha_t (I - \\beta_t k_t k_t^T) S_{t-1} + \\beta_t k_t v_t^T$, $o_t = S_t^T q_t$, no softmax",
    "delta-cache": "Gated delta rule decoding: a cache of the state $S$ and the short convolution's last inputs",
    "memory-kv": "Learned memory key/values",
    "sink": "Attention sink: a learned logit in the softmax's denominator (gpt-oss)",
    "window": "Sliding-window causal mask: query $i$ sees keys $i - w < j \\le i$",
    "local-global": "Local and global layers (Gemma 3): a window and a RoPE base per layer type",
    "sparsemax": "Sparsemax alignment",
    "entmax15": "1.5-entmax alignment",
    "alpha-entmax": "$\\alpha$-entmax alignment (bisection)",
    "fy-loss": "Fenchel-Young losses of the sparse maps",
}

STATUSES = ("conforms", "differs", "not applicable")

Pair = tuple[Tensor, Tensor]


@dataclass(frozen=True)
class Convention:
    """A named choice a library makes differently from the book, and how to map it.

    Args:
        name: a short name shown in the table (``"T5: unscaled scores"``).
        explanation: one or two sentences on what the library does and what the book does.
        mapped: a function returning ``(book, library)`` outputs with the convention mapped
            (the book run under the library's convention, or the library's output mapped
            onto the book's); the difference must vanish there.
    """

    name: str
    explanation: str
    mapped: Callable[[], Pair]


@dataclass(frozen=True)
class Check:
    """One equation computed by the book and by a library through an adapter.

    Args:
        target: the target name (a key of :data:`TARGETS`).
        equation: the equation key (a key of :data:`EQUATIONS`).
        api: the library entry point checked, e.g. ``"F.scaled_dot_product_attention"``.
        run: a function returning ``(book, library)``: the specification side and the
            library side (through its adapter), tensors of the same shape.
        convention: the convention that explains a difference, if the library is known
            to differ; None when it should conform.
    """

    target: str
    equation: str
    api: str
    run: Callable[[], Pair]
    convention: Convention | None = None


@dataclass(frozen=True)
class Result:
    """The verdict of one :class:`Check`.

    Args:
        target: the target name.
        equation: the equation key.
        api: the library entry point.
        status: one of :data:`STATUSES`.
        max_error: the largest absolute difference between the two sides (``inf`` where
            one side is NaN or infinite and the other is not); None when not applicable.
        convention: the name of the convention that explains the difference (None when
            the check conforms, or the difference is unexplained).
        mapped_error: the largest absolute difference once the convention is mapped.
        explanation: the convention's explanation, or the reason it is not applicable.
    """

    target: str
    equation: str
    api: str
    status: str
    max_error: float | None
    convention: str | None = None
    mapped_error: float | None = None
    explanation: str = ""

    @property
    def explained(self) -> bool:
        """Whether the verdict needs no further explanation.

        Returns:
            True unless the two sides differ and no mapped convention makes the difference vanish.
        """
        return self.status != "differs" or self.convention is not None

    def as_dict(self) -> dict[str, Any]:
        """The result as a JSON-ready dict (errors as floats, ``inf`` as the string ``"inf"``).

        Returns:
            A dict with the fields of :class:`Result` and ``explained``.
        """

        def num(x: float | None) -> float | str | None:
            return "inf" if x is not None and math.isinf(x) else x

        return {
            "target": self.target,
            "equation": self.equation,
            "api": self.api,
            "status": self.status,
            "max_error": num(self.max_error),
            "convention": self.convention,
            "mapped_error": num(self.mapped_error),
            "explained": self.explained,
            "explanation": self.explanation,
        }


def max_error(book: Tensor, library: Tensor) -> float:
    """The largest absolute difference of two outputs; ``inf`` where exactly one side is not finite.

    Args:
        book: the specification side's output.
        library: the library side's output (cast to ``book``'s dtype).

    Shape:
        book and library: the same shape (any).

    Returns:
        A float: 0 for equal tensors, ``inf`` if one holds NaN/Inf where the other does not.

    Raises:
        TypeError: if either side is not a tensor.
        ValueError: if the shapes differ (an adapter that maps the layout wrongly).
    """
    if not isinstance(book, Tensor) or not isinstance(library, Tensor):
        raise TypeError(f"both sides must be tensors, got {type(book).__name__} and {type(library).__name__}")
    if book.shape != library.shape:
        raise ValueError(
            f"the book's output has shape {tuple(book.shape)} but the adapter returned {tuple(library.shape)}"
        )
    b, lib = book.detach().double(), library.detach().double()
    if b.numel() == 0:
        return 0.0
    same_nonfinite = ~torch.isfinite(b) & ~torch.isfinite(lib) & ((b == lib) | (b.isnan() & lib.isnan()))
    diff = (b - lib).abs()
    diff = torch.where(same_nonfinite, torch.zeros((), dtype=diff.dtype), diff)
    diff = torch.nan_to_num(diff, nan=math.inf)
    return float(diff.max())


def evaluate(check: Check, tolerance: float = TOLERANCE) -> Result:
    """Run one check and give its verdict.

    Args:
        check: the check to run.
        tolerance: the largest absolute error that counts as agreement.

    Returns:
        A :class:`Result`: ``conforms`` within the tolerance; otherwise ``differs``, with the
        check's convention named only if the difference vanishes once it is mapped.

    Raises:
        ValueError: if an adapter returns an output of the wrong shape.
    """
    book, library = check.run()
    err = max_error(book, library)
    if err <= tolerance:
        return Result(check.target, check.equation, check.api, "conforms", err)
    if check.convention is None:
        return Result(check.target, check.equation, check.api, "differs", err, explanation="unexplained")
    mapped = max_error(*check.convention.mapped())
    if mapped > tolerance:
        return Result(
            check.target,
            check.equation,
            check.api,
            "differs",
            err,
            mapped_error=mapped,
            explanation=f"unexplained: mapping {check.convention.name!r} leaves {mapped:.2g}",
        )
    return Result(
        check.target,
        check.equation,
        check.api,
        "differs",
        err,
        check.convention.name,
        mapped,
        check.convention.explanation,
    )


def library(name: str) -> Any:
    """Import a third-party module when a check runs (never at package import).

    The module comes back untyped (``Any``): the adapters use a few of its names, and
    the type checker need not read a whole library for them.

    Args:
        name: the dotted module name, e.g. ``"transformers.models.bert.modeling_bert"``.

    Returns:
        The module.

    Raises:
        ModuleNotFoundError: if the library is not installed.
    """
    return importlib.import_module(name)


def checks_of(target: str) -> list[Check]:
    """The checks of one target (imports its library).

    Args:
        target: a key of :data:`TARGETS`.

    Returns:
        The target's :class:`Check` list.

    Raises:
        ValueError: for an unknown target (the message lists the known ones).
        ModuleNotFoundError: if the target's library is not installed.
    """
    if target not in TARGETS:
        raise ValueError(f"unknown conformance target {target!r}; known targets: {', '.join(TARGETS)}")
    module = importlib.import_module(TARGETS[target])
    checks: list[Check] = module.checks()
    return checks


@catalogued(
    "extra:conformance",
    title="Conformance of real libraries to the survey's equations (torch, transformers, x-transformers, entmax)",
)
def run(targets: Iterable[str] = tuple(TARGETS), tolerance: float = TOLERANCE) -> list[Result]:
    """Run the checks of the given targets; a target whose library is missing gives ``not applicable``.

    Args:
        targets: names of :data:`TARGETS` (default all four).
        tolerance: the largest absolute error that counts as agreement.

    Returns:
        One :class:`Result` per check, targets in the order given.

    Raises:
        ValueError: for an unknown target.
    """
    results: list[Result] = []
    for target in targets:
        try:
            checks = checks_of(target)
        except ModuleNotFoundError as missing:
            results.append(
                Result(target, "*", target, "not applicable", None, explanation=f"not installed: {missing.name}")
            )
            continue
        results.extend(evaluate(c, tolerance) for c in checks)
    return results


def format_error(err: float | None, tolerance: float = TOLERANCE) -> str:
    """An error as the table shows it: a power-of-ten bound within the tolerance, two digits beyond it.

    Args:
        err: the error (None: not computed).
        tolerance: the agreement tolerance.

    Returns:
        ``"0"``, ``"< 1e-12"`` (at most ``ROUNDING_FLOOR``: float64 rounding) or ``"<= 1e-06"``
        (within the tolerance, above float64 rounding: a library that computes some steps in
        float32), ``"0.53"``, ``"inf"`` or ``"-"``. An agreement is shown as one of two bounds,
        not to its digits, so that the last bit of a machine's arithmetic does not change the
        text (an error near 1e-16 or 1e-7 can fall on either side of a power of ten).
    """
    if err is None:
        return "-"
    if math.isinf(err):
        return "inf"
    if err == 0:
        return "0"
    if err <= ROUNDING_FLOOR:
        return f"< {ROUNDING_FLOOR:.0e}"
    if err <= tolerance:
        return f"<= {tolerance:.0e}"
    return f"{err:.2g}"


def _cell(result: Result) -> str:
    if result.status == "conforms":
        return f"`{result.api}`: conforms (error {format_error(result.max_error)})"
    if result.status == "not applicable":
        return f"`{result.api}`: not applicable"
    if result.convention is None:
        return f"`{result.api}`: DIFFERS by {format_error(result.max_error)}, {result.explanation}"
    return (
        f"`{result.api}`: differs by {format_error(result.max_error)}: {result.convention} "
        f"(mapped: {format_error(result.mapped_error)})"
    )


def conformance_table(results: Sequence[Result], targets: Sequence[str] | None = None) -> Table:
    """The equations-by-target table of a run (:func:`attnsurvey.display_table.table`).

    Args:
        results: the results of :func:`run`.
        targets: the columns (default: the targets present in ``results``, in order).

    Returns:
        A :class:`~attnsurvey.display_table.Table`: one row per equation of :data:`EQUATIONS`
        that some target checks, one column per target; a cell lists the entry points checked
        with their verdicts, or says ``not applicable``.
    """
    if targets is None:
        targets = list(dict.fromkeys(r.target for r in results))
    rows = []
    for key, label in EQUATIONS.items():
        cells = []
        for target in targets:
            found = [r for r in results if r.target == target and r.equation == key]
            cells.append("\n".join(_cell(r) for r in found) if found else "not applicable")
        if any(c != "not applicable" for c in cells):
            rows.append([label, *cells])
    missing = [r for r in results if r.equation == "*"]
    for r in missing:
        rows.append([f"(`{r.target}` {r.explanation})", *["not applicable"] * len(targets)])
    return table(["equation", *targets], rows)


def report(results: Sequence[Result]) -> str:
    """A plain-text report of a run: one line per check, then the explanation of each difference.

    Args:
        results: the results of :func:`run`.

    Returns:
        The report (no trailing newline).
    """
    lines = []
    for r in results:
        lines.append(f"{r.target:15s} {r.equation:13s} {r.api:44s} {r.status:15s} {format_error(r.max_error)}")
    differences = [r for r in results if r.status == "differs"]
    if differences:
        lines.append("")
        lines.append("differences:")
        for r in differences:
            if r.convention is None:
                lines.append(f"- {r.target} {r.api}: UNEXPLAINED ({r.explanation})")
            else:
                lines.append(
                    f"- {r.target} {r.api}: {r.convention}; mapped error {format_error(r.mapped_error)}. {r.explanation}"
                )
    return "\n".join(lines)


__all__ = [
    "EQUATIONS",
    "STATUSES",
    "TARGETS",
    "TOLERANCE",
    "Check",
    "Convention",
    "Result",
    "checks_of",
    "conformance_table",
    "evaluate",
    "format_error",
    "library",
    "max_error",
    "report",
    "run",
]
