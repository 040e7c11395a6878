"""Shared pytest fixtures."""
from __future__ import annotations

import pytest
import torch


@pytest.fixture
def one_thread():
    """Train tiny models on one thread (faster: no OpenMP hand-offs; reproducible); restored afterwards."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
