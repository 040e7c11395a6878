"""Shared pytest fixtures, and the numeric pin for in-process tests."""

from __future__ import annotations

import pytest
import torch

from attnsurvey import numeric_env

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
