"""Fixtures of the trainer tests: one torch thread (the tiny random model is in tests/conftest.py,
the toy environment in letters_env.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(scope="session", autouse=True)
def one_thread() -> Iterator[None]:
    """The cores are shared; torch's worker threads slow down badly when oversubscribed."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
