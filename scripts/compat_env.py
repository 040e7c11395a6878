"""A separate environment with another torch, for ``make test-compat TORCH=<version>``.

    python scripts/compat_env.py 2.15.0 _build/compat/torch-2.15.0

Creates the virtual environment (if absent) and installs, in this order:

1. ``torch==<version>`` alone, from the package index (on x86-64 Linux PyPI's torch is a CUDA
   build: some GB of ``nvidia-*`` wheels, unused here, the tests run on the CPU);
2. the rest of ``requirements.txt``, pinned as for the book, except torch and the packages that
   this torch pins exactly itself (``triton``, ``sympy``, ...): a reader's pip keeps what their
   torch asks for, so these come from torch's own requirements, not from the book's freeze;
3. the package itself (editable, no dependencies), and the ``attnsurvey`` Jupyter kernel.

pip's machine-wide cap on torch (``/etc/xdg/pip``'s ``constraint``) is lifted for these
installs (``PIP_CONSTRAINT`` empty), because the point is to try versions outside it. Nothing is
installed into the book's own ``.venv``. Uses uv (as ``scripts/install_env.py`` does) where it can
be installed into the new environment, else pip.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from install_env import UV, pip_sources  # noqa: E402


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement line (``Foo_bar==1`` -> ``foo-bar``)."""
    return re.sub(r"[-_.]+", "-", re.split(r"[\s<>=!~;\[]", requirement.strip(), maxsplit=1)[0]).lower()


def exact_pins(requires: list[str]) -> set[str]:
    """Names that a list of ``Requires-Dist`` entries pins with ``==`` (markers and extras ignored)."""
    return {_name(r) for r in requires if "==" in r.split(";")[0] and "extra ==" not in r}


def book_requirements(drop: set[str]) -> list[str]:
    """``requirements.txt``'s pinned lines without comments and without the names in ``drop``."""
    lines = (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    return [s for s in (line.split("#")[0].strip() for line in lines) if s and _name(s) not in drop]


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    print("+", " ".join(map(str, cmd)), flush=True)
    return subprocess.run(cmd, check=True, cwd=ROOT, **kw)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("torch", help="the torch version, e.g. 2.15.0")
    parser.add_argument("venv", type=Path, help="where to create the environment")
    args = parser.parse_args(argv)
    os.environ["PIP_CONSTRAINT"] = ""  # lift a machine-wide cap on torch (see the module docstring)
    python = args.venv / "bin" / "python"
    if not python.exists():
        venv.create(args.venv, with_pip=True)
    config = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    if subprocess.run([python, "-m", "pip", "install", "--quiet", UV], cwd=ROOT).returncode == 0:
        install = [python, "-m", "uv", "pip", "install", "--python", python, "--compile-bytecode"]
        install += ["--index-strategy", "unsafe-best-match", *pip_sources(config)]
    else:
        install = [python, "-m", "pip", "install", "--quiet"]
    _run([*install, f"torch=={args.torch}"])
    requires = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print('\\n'.join(m.requires('torch') or []))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    keep = exact_pins(requires)
    rest = args.venv / "requirements-book.txt"
    rest.write_text("\n".join(book_requirements({"torch"} | keep)) + "\n", encoding="utf-8")
    pinned = args.venv / "constraints-torch.txt"
    pinned.write_text(f"torch=={args.torch}\n", encoding="utf-8")
    print(f"compat_env: torch {args.torch} pins {sorted(keep) or 'nothing'} itself; those follow torch", flush=True)
    _run([*install, "-c", pinned, "-r", rest])
    _run([*install, "-c", pinned, "--no-deps", "-e", ROOT])
    _run([python, "-m", "attnsurvey.numeric_env", "install-kernel", "--prefix", args.venv])
    _run(
        [python, "-c", "import torch, attnsurvey; print('torch', torch.__version__, 'attnsurvey', attnsurvey.__file__)"]
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
