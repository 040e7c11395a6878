"""Small helpers shared by the test modules."""

from __future__ import annotations

import ast

import torch


def rand(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A standard-normal tensor from its own seeded generator (independent of global RNG state)."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def toc_files(root=None) -> list[str]:
    """The files of ``_toc.yml`` in reading order (root page first), without suffix."""
    from pathlib import Path

    import yaml

    root = Path(root) if root is not None else Path(__file__).resolve().parents[1]
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        for ch in part.get("chapters", []):
            files.append(ch["file"])
            files.extend(s["file"] for s in ch.get("sections", []))
    return [f.removesuffix(".ipynb").removesuffix(".md") for f in files]


#: torch functions whose CPU kernel under the pin is MKL VML code containing rcpps/rsqrtps (vendor-specific bits).
VENDOR_DEPENDENT = {"sqrt", "cdist", "log2", "log10", "atan", "asin", "acos", "tan", "arctan", "arcsin", "arccos"}


def vendor_dependent_calls(source: str) -> list[str]:
    """``torch.sqrt(...)``, ``x.sqrt()``, ``torch.optim.Adam(...)`` and the like found in ``source``.

    Lines starting with ``%`` or ``!`` (notebook magics) are read as blank lines. The package
    routes these through ``numeric_env.portable_sqrt`` and ``numeric_env.portable_adam``.
    """
    source = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
    found: list[tuple[int, int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = ast.unparse(node.func)
            if node.func.attr in VENDOR_DEPENDENT and not name.startswith(("math.", "np.", "numeric_env.")):
                found.append((node.lineno, node.col_offset, f"line {node.lineno}: {name}(...)"))
            if name in ("torch.optim.Adam", "optim.Adam", "torch.optim.AdamW"):
                found.append((node.lineno, node.col_offset, f"line {node.lineno}: {name}(...)"))
    return [text for *_, text in sorted(found)]


def refused_without_the_verdict(check, *args, match: str, hidden: str = "supports") -> str:
    """Run an exercise ``check`` that must fail with ``match`` and whose message must not contain ``hidden``
    (the verdict the results support: a hint that named it would hand the reader the answer).
    Returns the message, for further assertions."""
    import pytest

    with pytest.raises(AssertionError, match=match) as err:
        check(*args)
    message = str(err.value)
    assert hidden not in message, message
    return message


def load_script(name: str):
    """The module ``scripts/<name>.py`` (the scripts folder is not a package), registered as ``name``."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def refused_without_the_answer(check, *args, answers, match: str | None = None) -> str:
    """Run an exercise ``check`` on a wrong answer: it must fail, and its message must not state ``answers``.

    ``answers`` are the right values (numbers, printed as a check might: 3 to 6 significant digits or 2 to 5
    decimals, for the value and its negative) or strings (a formula). Returns the message."""
    import pytest

    with pytest.raises(AssertionError, match=match) as err:
        check(*args)
    message = str(err.value)
    for answer in answers:
        if isinstance(answer, str):
            assert answer not in message, message
            continue
        shown = {f"{v:.{k}g}" for v in (answer, -answer) for k in range(3, 7)}
        shown |= {f"{v:.{k}f}" for v in (answer, -answer) for k in range(2, 6)}
        leaked = sorted(s for s in shown if s in message and len(s.strip("-0.")) >= 2)
        assert not leaked, f"the message states the answer {leaked}: {message}"
    return message


def rejected_under_python_o(module: str, calls: list[str]) -> None:
    """Under ``python -O`` (bare asserts removed), each of ``calls`` on ``from attnsurvey.exercises import <module>
    as ex`` must still raise ``AssertionError``: the checks raise explicitly. One interpreter runs them all."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import attnsurvey

    src = str(Path(attnsurvey.__file__).resolve().parents[1])
    lines = [f"from attnsurvey.exercises import {module} as ex", "import torch", "accepted = []"]
    for call in calls:
        lines += ["try:", f"    ex.{call}", f"    accepted.append({call!r})", "except AssertionError:", "    pass"]
    lines += ["if accepted:", "    raise SystemExit('accepted under -O: ' + '; '.join(accepted))"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-O", "-c", "\n".join(lines)], env=env, capture_output=True, text=True, timeout=300
    )
    assert (
        done.returncode == 0
    ), f"under python -O a wrong answer was accepted or the run crashed: {done.stderr[-2000:]}"


def assert_trusting_keeps_the_bits(layer: torch.nn.Module, x: torch.Tensor, nan_check: bool = True) -> None:
    """A token mixer with a ``finite_inputs`` flag computes, trusted, the bits of the core's clearing path.

    Runs ``layer`` on ``x`` (``requires_grad``) with the flag on and off and asserts equal outputs, input
    gradients and parameter gradients, bit for bit. With ``nan_check``, also shows the flag takes effect:
    a NaN in the last row of ``x`` reaches the first row's output only when trusted (causal layers).
    """
    runs = []
    for trusted in (True, False):
        layer.finite_inputs, x.grad = trusted, None
        layer.zero_grad()
        out = layer(x)
        out.square().sum().backward()
        grads = {k: p.grad.clone() for k, p in layer.named_parameters() if p.grad is not None}
        runs.append((out.detach(), x.grad.clone(), grads))
    (o1, gx1, g1), (o0, gx0, g0) = runs
    assert torch.equal(o1, o0) and torch.equal(gx1, gx0)
    assert g1.keys() == g0.keys() and all(torch.equal(g1[k], g0[k]) for k in g0)
    if not nan_check:
        return
    with torch.no_grad():
        x_nan = x.detach().clone()
        x_nan[:, -1] = float("nan")
        layer.finite_inputs = False
        assert layer(x_nan)[:, 0].isfinite().all()
        layer.finite_inputs = True
        assert layer(x_nan)[:, 0].isnan().any()
