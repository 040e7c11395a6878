"""A chapter run in a plain kernel, from a shell that sets other numerics, reproduces the book's stored outputs.

Every chapter's first code cell calls ``numeric_env.pin()`` before torch loads, so the pin travels with the
notebook: here two chapters (one that trains) run under nbval in ipykernel's own ``python3`` kernel (not the
project's ``attnsurvey`` kernel), started from an environment that asks for AVX2 kernels, MKL's AVX2 path,
two threads and another string-hash seed, and must print exactly what is stored, with the sanitizer config of
``make test``. The nbval run is a separate pytest process, because this one runs pinned; the repository's
``conftest.py`` gives its kernels private sockets (see ``numeric_env.kernel_sockets``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpecManager

from attnsurvey import numeric_env

ROOT = Path(__file__).resolve().parents[1]
#: ipykernel's own kernel: no environment of its own, no pin applied before the first cell.
PLAIN_KERNEL = "python3"
#: Two chapters that train. Chapter 6.4's trained Transformers are sensitive to the CPU kernels: run with the
#: AVX2 kernels this shell asks for (threads and deterministic mode still pinned), 4 of its 17 code cells
#: print other numbers (greedy exact match 0.43 ± 0.09 instead of 0.38 ± 0.11), so this test fails if the
#: pin does not take. Chapter 2 adds figures, widgets and a five-seed comparison.
CHAPTERS = ["chapters/ch02_general_attention_model.ipynb", "chapters/ch06_4_trained_transformer.ipynb"]
#: What a reader's shell might hold; MPLBACKEND is left unset, so ipykernel picks its inline backend.
READER_SHELL = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "OMP_NUM_THREADS": "2", "PYTHONHASHSEED": "7"}


def reader_environment() -> dict[str, str]:
    """This process's environment without the pin, with :data:`READER_SHELL`'s settings."""
    env = {k: v for k, v in os.environ.items() if k not in numeric_env.PINNED_ENV}
    return env | READER_SHELL


def test_the_plain_kernel_has_no_pin_of_its_own():
    """The premise: the kernel this test uses neither carries the pinned variables nor applies torch settings."""
    spec = KernelSpecManager().get_kernel_spec(PLAIN_KERNEL)
    assert not set(spec.env) & set(numeric_env.PINNED_ENV)
    assert not any("numeric_env" in arg for arg in spec.argv)
    assert all(reader_environment()[k] != numeric_env.PINNED_ENV[k] for k in READER_SHELL)


def test_chapters_in_a_plain_kernel_reproduce_the_stored_outputs():
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:xdist",
        "-q",
        "--nbval",
        "--nbval-kernel-name",
        PLAIN_KERNEL,
        "--nbval-sanitize-with",
        "tests/nbval_sanitize.cfg",
        *CHAPTERS,
    ]
    run = subprocess.run(cmd, cwd=ROOT, env=reader_environment(), capture_output=True, text=True, timeout=900)
    report = run.stdout[-6000:] + run.stderr[-2000:]
    assert run.returncode == 0, report
    cells = sum(c.cell_type == "code" for path in CHAPTERS for c in nbformat.read(ROOT / path, as_version=4).cells)
    assert re.search(rf"\b{cells} passed", run.stdout), report  # nbval: one test per code cell, each compared


def test_the_main_run_leaves_these_chapters_to_this_test():
    """tests/conftest.py deselects these chapters' own nbval cells where this test runs (same check, stricter
    shell): it must name this very test and these very chapters, or a chapter would go unchecked or run twice."""
    from tests import conftest

    assert conftest.PLAIN_KERNEL_CHAPTERS == set(CHAPTERS)
    test, _, name = conftest.PLAIN_KERNEL_TEST.partition("::")
    assert (
        test == "tests/test_any_kernel.py"
        and name == test_chapters_in_a_plain_kernel_reproduce_the_stored_outputs.__name__
    )
