"""Every public function and class documents itself in sections, as torch's functional API does.

A docstring opens with a summary line, then the sections a reader looks for (Google style, the
headings on their own line, e.g. ``Args:``):

* ``Args:`` when the callable takes parameters (for a class: those of its ``__init__``; a dataclass
  or named tuple may list its fields under ``Attributes:`` instead);
* ``Shape:`` when a tensor goes in or comes out (a parameter or the return annotated ``Tensor``;
  for an ``nn.Module``: its ``forward``), in the symbols of the module's shape legend;
* ``Returns:`` when a function returns something (its return annotation is not ``None``);
* ``Raises:`` when the function itself raises or calls a validation helper (a name starting with
  ``check``, ``_check``, ``require`` or ``as_tensor``) -- read from its source with :mod:`ast`.

The test checks that the sections exist, not what they say. What is scanned: every public module of
:mod:`attnsurvey` (names with a ``_`` part and the exercise checks of :mod:`attnsurvey.exercises`
skipped, as in ``test_docstrings.py``), every public function and class defined there (not
re-exported, not an alias).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch.nn as nn

import attnsurvey

VALIDATORS = re.compile(r"^(_?check|require|as_tensor)")


def _public_modules() -> Iterator[Any]:
    for info in pkgutil.walk_packages(attnsurvey.__path__, "attnsurvey."):
        parts = info.name.split(".")
        if any(p.startswith("_") for p in parts) or parts[1] == "exercises":
            continue
        yield importlib.import_module(info.name)


def public_objects() -> list[tuple[str, Any]]:
    found = []
    for module in _public_modules():
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            if (inspect.isfunction(obj) and obj.__name__ == name) or (inspect.isclass(obj) and obj.__name__ == name):
                found.append((f"{module.__name__}.{name}", obj))
    return sorted(found, key=lambda item: item[0])


def _mentions_tensor(annotation: object) -> bool:
    return "Tensor" in (annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation)))


def _params(fn: Callable[..., Any]) -> list[inspect.Parameter]:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    return [p for p in signature.parameters.values() if p.name not in ("self", "cls")]


def _raises(fn: Callable[..., Any]) -> bool:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return False
    body = tree.body[0]
    nodes = [n for stmt in getattr(body, "body", []) for n in ast.walk(stmt)]
    for node in nodes:
        if isinstance(node, ast.Raise):
            return True
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if VALIDATORS.match(name):
                return True
    return False


def required_sections(obj: Any) -> list[str]:
    """The headings ``obj``'s docstring must hold, by the rules of the module docstring."""
    if inspect.isclass(obj):
        init = obj.__dict__.get("__init__")
        params = _params(init) if init is not None else []
        forward = obj.__dict__.get("forward") if issubclass(obj, nn.Module) else None
        tensors = forward is not None and (
            any(_mentions_tensor(p.annotation) for p in _params(forward))
            or _mentions_tensor(inspect.signature(forward).return_annotation)
        )
        needed = ["Args:"] if params else []
        needed += ["Shape:"] if tensors else []
        needed += (
            ["Raises:"] if (init is not None and _raises(init)) or (forward is not None and _raises(forward)) else []
        )
        return needed
    params = _params(obj)
    returns = inspect.signature(obj).return_annotation
    needed = ["Args:"] if params else []
    if any(_mentions_tensor(p.annotation) for p in params) or _mentions_tensor(returns):
        needed.append("Shape:")
    if returns not in (None, "None", inspect.Signature.empty):
        needed.append("Returns:")
    if _raises(obj):
        needed.append("Raises:")
    return needed


def missing_sections(obj: Any) -> list[str]:
    doc = inspect.getdoc(obj) if inspect.isfunction(obj) else obj.__dict__.get("__doc__")
    headings = set(re.findall(r"^\s*([A-Z][a-z]+:)\s*$", inspect.cleandoc(doc or ""), flags=re.M))
    if inspect.isclass(obj) and "Attributes:" in headings:
        headings.add("Args:")  # the fields of a dataclass or named tuple are its arguments
    return [s for s in required_sections(obj) if s not in headings]


OBJECTS = public_objects()


def test_the_scan_finds_the_public_api():
    names = {name for name, _ in OBJECTS}
    assert "attnsurvey.attention.attend" in names and len(names) > 300


@pytest.mark.parametrize("name", [name for name, _ in OBJECTS])
def test_docstring_has_its_sections(name):
    obj = dict(OBJECTS)[name]
    missing = missing_sections(obj)
    assert not missing, f"{name}: docstring lacks {', '.join(missing)}"


def test_rules_catch_a_missing_section():
    def documented(x: int) -> int:
        """Twice x.

        Args:
            x: a number.

        Returns:
            ``2 * x``.
        """
        return 2 * x

    def undocumented(x: int) -> int:
        """Twice x, in prose only: takes x and returns 2 x."""
        if x < 0:
            raise ValueError("x < 0")
        return 2 * x

    assert missing_sections(documented) == []
    assert missing_sections(undocumented) == ["Args:", "Returns:", "Raises:"]
