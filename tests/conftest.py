"""Shared pytest fixtures, and the numeric pin for in-process tests."""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import settings

from attnsurvey import numeric_env

# Property tests draw the same examples on every run and machine, so a run's verdict never depends on chance
# (a failure seen once is seen again). HYPOTHESIS_PROFILE=explore draws fresh examples, for hunting.
settings.register_profile("reproducible", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "reproducible"))

# Tests that train run with the same in-process settings as the chapters.
numeric_env.apply_torch()


def pytest_report_header(config):
    found = numeric_env.problems()
    if not found:
        return "numeric environment: pinned (attnsurvey.numeric_env)"
    return "numeric environment: NOT pinned (use `make test-unit`): " + "; ".join(found)


@pytest.fixture
def one_thread():
    """Train tiny models on one thread (faster: no OpenMP hand-offs; reproducible); restored afterwards."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
