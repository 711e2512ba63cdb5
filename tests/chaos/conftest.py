"""Fixtures of the chaos tests: the shared local sandbox backend (skipped where it cannot run)."""

from __future__ import annotations

import pytest

from agentgym.sandbox import SandboxUnavailable, get_backend


@pytest.fixture(scope="session")
def local_backend():
    try:
        return get_backend("local")
    except SandboxUnavailable as exc:
        pytest.skip(f"local sandbox backend unavailable here: {exc}")
