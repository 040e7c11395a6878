"""Install the pinned environment into the virtual environment that runs this script (``make env``).

    .venv/bin/python scripts/install_env.py            # uv where it can be had, else pip
    INSTALLER=pip .venv/bin/python scripts/install_env.py

Installs ``requirements.txt`` under ``constraints.txt`` (which pins torch), then
the package itself (editable, no dependencies), without byte-compiling: of the
environment's 15,844 Python files, importing torch, the package, Sphinx, pytest,
nbval, playwright, transformers and hypothesis compiles 1,778, and compiling all
of them up front made ``make env`` in a fresh clone take 72 s instead of 8 s (2
cores at load 3.5), time that nothing else can use. The Makefile lets Python
write each module's bytecode when it is first imported instead (see
``unexport PYTHONDONTWRITEBYTECODE`` there).

uv (pinned in :data:`UV`, installed from the package index by the venv's pip)
does the same install as pip but resolves and unpacks in
parallel: on the 2-core CI machine, both byte-compiling, it took 47 s where pip
took 138 s for ``requirements.txt`` (same machine, same load). uv does not read
pip's configuration, so it is handed the package sources pip would use
(``index-url``, ``extra-index-url``, ``find-links`` from ``pip config list``,
``PIP_*`` variables included: on CI that is where the CPU-only torch wheel is)
and pip's way of choosing among several indexes (the best version on any of
them: uv's ``unsafe-best-match``). The installed versions are the same as
pip's (``pip freeze`` compared). Where uv cannot be installed (no index
reachable) or its install fails, pip does the install as before.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UV = "uv==0.13.9"
REQUIREMENTS = ["-c", "constraints.txt", "-r", "requirements.txt"]
PROJECT = ["-c", "constraints.txt", "--no-deps", "-e", "."]
#: pip configuration keys that say where packages come from, and the uv option for each.
SOURCES = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links"}


def _run(cmd: list[str]) -> bool:
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT).returncode == 0


def pip_sources(config_list: str) -> list[str]:
    """uv options for the package sources in ``pip config list`` output (environment before files,
    the ``install`` section before ``global``, as pip reads them)."""
    values: dict[str, str] = {}
    for line in config_list.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip().strip("'\"")
    options: list[str] = []
    for name, flag in SOURCES.items():
        value = next((values[k] for k in (f":env:.{name}", f"install.{name}", f"global.{name}") if k in values), "")
        for item in value.split():
            options += [flag, item]
    return options


def install_with_uv() -> bool:
    python = sys.executable
    if not _run([python, "-m", "pip", "install", "--quiet", UV]):
        print("install_env: uv could not be installed; using pip", flush=True)
        return False
    config = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    uv = [python, "-m", "uv", "pip", "install", "--python", python]
    uv += ["--index-strategy", "unsafe-best-match", *pip_sources(config)]
    return _run(uv + REQUIREMENTS) and _run(uv + PROJECT)


def install_with_pip() -> bool:
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile"]
    return _run(pip + REQUIREMENTS) and _run(pip + PROJECT)


def main() -> int:
    if sys.prefix == sys.base_prefix:
        print("install_env: run this with the virtual environment's python (make env does)", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    how = "uv"
    if os.environ.get("INSTALLER", "uv") == "pip" or not install_with_uv():
        how = "pip"
        if not install_with_pip():
            return 1
    print(f"install_env: installed with {how} in {time.perf_counter() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
