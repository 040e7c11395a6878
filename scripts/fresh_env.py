"""Run notebooks as a reader on a hosted notebook would: in an environment made by their install cell alone.

    python scripts/fresh_env.py chapters/ch06_tiled_attention.ipynb book/conformance.ipynb
    python scripts/fresh_env.py --dir /tmp/attnsurvey-fresh --keep NOTEBOOK ...

For each notebook (``make test-fresh-env`` names the two that need more than the package: the Triton
chapter and the conformance appendix):

1. a new virtual environment under ``--dir`` with nothing but a Jupyter kernel (``ipykernel``, at the
   version of ``requirements.txt``), as a hosted notebook starts;
2. the notebook's install cell (its first code cell) run there, in the notebook's folder, by that
   environment's python: it pip-installs its pins and the package from this clone (``-e ..``);
3. the notebook under nbval (``make test``'s sanitizer), in a kernel of that environment started from a
   shell without the pinned numeric variables: every cell must print what is stored. The install cell
   now finds what it looks for and does nothing.

pip's machine-wide configuration (``/etc/xdg/pip``, ``PIP_*``) applies as for any pip on this machine;
downloads (torch's wheel where no local copy exists, transformers, triton) make this slow: it is not part
of ``.ci/run``. Prints the seconds each step took; exit status 1 if a notebook fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PINNED_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONHASHSEED")


def install_cell(notebook: Path) -> str:
    """The source of the notebook's first code cell (its install cell)."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return "".join(next(c for c in cells if c["cell_type"] == "code")["source"])


def pinned(name: str) -> str:
    """``name==version`` as requirements.txt pins it."""
    text = (ROOT / "requirements.txt").read_text(encoding="utf-8")
    m = re.search(rf"^{re.escape(name)}==(\S+)", text, flags=re.M | re.I)
    if not m:
        raise LookupError(f"{name} is not pinned in requirements.txt")
    return f"{name}=={m[1]}"


def reader_environment() -> dict[str, str]:
    """This process's environment without the pinned numeric variables and without this clone's venv."""
    try:
        from attnsurvey import numeric_env

        drop = set(numeric_env.PINNED_ENV)
    except ImportError:
        drop = set(PINNED_VARIABLES)
    return {k: v for k, v in os.environ.items() if k not in drop and k not in ("VIRTUAL_ENV", "PYTHONPATH")}


def run_one(notebook: Path, where: Path) -> bool:
    env_dir = where / notebook.stem
    shutil.rmtree(env_dir, ignore_errors=True)
    t0 = time.perf_counter()
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    environ = reader_environment()
    subprocess.run([python, "-m", "pip", "install", "--quiet", pinned("ipykernel")], check=True, env=environ)
    kernel = f"fresh-{notebook.stem}".replace("_", "-")
    subprocess.run(
        [python, "-m", "ipykernel", "install", "--prefix", env_dir, "--name", kernel], check=True, env=environ
    )
    t1 = time.perf_counter()
    done = subprocess.run([python, "-c", install_cell(notebook)], cwd=notebook.parent, env=environ)
    t2 = time.perf_counter()
    print(
        f"{notebook.name}: {t1 - t0:6.1f} s  kernel-only environment\n{' ' * len(notebook.name)}  "
        f"{t2 - t1:6.1f} s  install cell (exit {done.returncode})",
        flush=True,
    )
    if done.returncode != 0:
        return False
    installed = subprocess.run([python, "-m", "pip", "freeze"], capture_output=True, text=True, env=environ).stdout
    (env_dir / "freeze.txt").write_text(installed)
    nbval = [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q", "--nbval"]
    nbval += ["--nbval-kernel-name", kernel, "--nbval-sanitize-with", "tests/nbval_sanitize.cfg", str(notebook)]
    jupyter_path = os.pathsep.join(filter(None, [str(env_dir / "share" / "jupyter"), environ.get("JUPYTER_PATH")]))
    run = subprocess.run(nbval, cwd=ROOT, env=environ | {"JUPYTER_PATH": jupyter_path})
    print(f"{notebook.name}: {time.perf_counter() - t2:6.1f} s  nbval in the fresh kernel (exit {run.returncode})")
    return run.returncode == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/attnsurvey-fresh"), help="where the environments go")
    parser.add_argument("--keep", action="store_true", help="keep the environments (default: removed if all pass)")
    args = parser.parse_args(argv)
    results = {nb: run_one(nb.resolve(), args.dir) for nb in args.notebooks}
    for nb, ok in results.items():
        print(f"{'passed' if ok else 'FAILED'}  {nb}")
    if all(results.values()) and not args.keep:
        shutil.rmtree(args.dir, ignore_errors=True)
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
