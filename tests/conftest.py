"""Shared pytest fixtures, and the numeric pin for in-process tests.

A test run outside the pinned numeric environment (``attnsurvey.numeric_env``) refuses to start: its trained
results could differ from the stored outputs and the tests that compare with them would fail, or pass, for
the wrong reason. ``make test`` / ``make test-unit`` run pytest pinned, as does
``.venv/bin/python -m attnsurvey.numeric_env exec -- .venv/bin/python -m pytest ...``. Someone who knowingly
wants an unpinned run (say, to see what a native CPU changes) sets ``ATTNSURVEY_ALLOW_UNPINNED=1``; the
report header then says "NOT pinned" and lists the differences.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

import pytest
import torch
from hypothesis import settings

from attnsurvey import numeric_env
from attnsurvey.training import seed_everything

# Property tests draw the same examples on every run and machine, so a run's verdict never depends on chance
# (a failure seen once is seen again). HYPOTHESIS_PROFILE=explore draws fresh examples, for hunting. Neither
# profile has a deadline (hypothesis's default fails an example slower than 200 ms): no verdict depends on timing.
settings.register_profile("reproducible", derandomize=True, print_blob=True, deadline=None)
settings.register_profile("explore", derandomize=False, print_blob=True, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "reproducible"))

# Tests that train run with the same in-process settings as the chapters.
numeric_env.apply_torch()


#: Set to ``1`` to run the tests outside the pinned numeric environment on purpose.
ALLOW_UNPINNED = "ATTNSURVEY_ALLOW_UNPINNED"


def refuse_unpinned() -> None:
    """Raise ``pytest.UsageError`` naming :func:`numeric_env.problems` and the pinned commands, unless the
    process is pinned or ``ATTNSURVEY_ALLOW_UNPINNED=1`` says an unpinned run is meant."""
    found = numeric_env.problems()
    if found and os.environ.get(ALLOW_UNPINNED) != "1":
        raise pytest.UsageError(
            "the tests run only in the pinned numeric environment, and this process is not pinned: "
            + "; ".join(found)
            + ". Run them with `make test` (or `make test-unit`), or wrap pytest in the pin: "
            "`.venv/bin/python -m attnsurvey.numeric_env exec -- .venv/bin/python -m pytest ...`. "
            f"To run unpinned on purpose (results that train may differ from the stored outputs), set {ALLOW_UNPINNED}=1."
        )


def pytest_configure(config):
    if not config.option.help:
        refuse_unpinned()


def pytest_report_header(config):
    found = numeric_env.problems()
    if not found:
        return "numeric environment: pinned (attnsurvey.numeric_env)"
    return f"numeric environment: NOT pinned ({ALLOW_UNPINNED}=1): " + "; ".join(found)


@pytest.fixture(autouse=True)
def _same_global_random_state():
    """Every test starts from ``seed_everything(0)``: what it draws without a generator does not depend on
    which tests ran before it in its worker (xdist hands files to whichever worker is free), so a verdict
    seen once is seen again."""
    seed_everything(0)


@pytest.fixture
def one_thread():
    """Train tiny models on one thread (faster: no OpenMP hand-offs; reproducible); restored afterwards."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


#: Test files that take long (seconds on the 2-core CI machine; used only to order the work,
#: see pytest_collection_modifyitems): a browser on every page, the PDF, autograding, the benchmark
#: scripts in quick mode, CONTRIBUTING's worked examples (mypy from make lint's cache; by the time this file's
#: turn comes, make -j2 lint test has finished lint's mypy), two chapters in a plain kernel, the edge-case sweep
#: (unlisted, it sorted after every notebook and could run alone at the end of the session).
SLOW_TEST_FILES = {
    "tests/browser/test_pages.py": 300.0,
    "tests/test_pdf.py": 105.0,
    "tests/browser/test_slides.py": 35.0,
    "tests/test_grading.py": 105.0,
    "tests/test_contributing.py": 40.0,
    "tests/test_benchmarks.py": 55.0,
    "tests/test_any_kernel.py": 70.0,
    "tests/test_edge_case_sweep.py": 50.0,
}
KERNEL_START_S = 3.0


def stored_execution_seconds(notebook: Path) -> float:
    """Seconds a notebook's cells took when it was last executed (nbclient's ``execution`` metadata)."""
    total = 0.0
    for cell in json.loads(notebook.read_text(encoding="utf-8")).get("cells", []):
        t = cell.get("metadata", {}).get("execution", {})
        if "iopub.execute_input" in t and "shell.execute_reply" in t:
            start, end = (datetime.fromisoformat(t[k]) for k in ("iopub.execute_input", "shell.execute_reply"))
            total += (end - start).total_seconds()
    return total


def _file_cost(nodeid: str, path: Path) -> float:
    if path.suffix == ".ipynb":
        return KERNEL_START_S + stored_execution_seconds(path)
    return SLOW_TEST_FILES.get(nodeid.split("::")[0], 0.0)


#: The test that runs chapters under nbval in a plain kernel (tests/test_any_kernel.py), and its chapters.
PLAIN_KERNEL_TEST = "tests/test_any_kernel.py::test_chapters_in_a_plain_kernel_reproduce_the_stored_outputs"
PLAIN_KERNEL_CHAPTERS = {"chapters/ch02_general_attention_model.ipynb", "chapters/ch06_4_trained_transformer.ipynb"}


def shared_with_the_plain_kernel_run(items) -> list:
    """The nbval cells that the plain-kernel test runs too, when that test is in the session.

    That test executes its chapters under nbval with the same sanitizer and compares every code cell with
    its stored output, from a shell that asks for other numerics (a stricter run of the same check); the
    project's kernel is exercised by every other notebook. So in a session that holds it, the chapters'
    own nbval cells are not run a second time (``make test-notebooks`` alone still runs them)."""
    if not any(item.nodeid == PLAIN_KERNEL_TEST for item in items):
        return []
    return [item for item in items if item.nodeid.split("::")[0] in PLAIN_KERNEL_CHAPTERS]


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected: the plain-kernel test must really run
def pytest_collection_modifyitems(config, items):
    """Longest files first (notebooks by their stored execution times), so that the two xdist
    workers of ``make test`` (``--dist loadfile --no-loadscope-reorder``: one file to one worker,
    in this order) finish together instead of one running the slowest chapter alone at the end.
    The sort is stable: a file's tests keep their order and stay together. Chapters that the
    plain-kernel test runs anyway are deselected (:func:`shared_with_the_plain_kernel_run`)."""
    shared = shared_with_the_plain_kernel_run(items)
    if shared:
        config.hook.pytest_deselected(items=shared)
        items[:] = [item for item in items if item not in shared]
    cost: dict[Path, float] = {}
    for item in items:
        if item.path not in cost:
            cost[item.path] = _file_cost(item.nodeid, item.path)
    items.sort(key=lambda item: -cost[item.path])
