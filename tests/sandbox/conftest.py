"""Fixtures of the sandbox tests: the local backend (skipped where it cannot run) and a check,
after the last sandbox test, that nothing a sandbox started or wrote survived on the host."""

import pytest

from agentgym.sandbox import Limits, Sandbox, SandboxUnavailable, get_backend
from agentgym.sandbox.local import leftovers
from agentgym.sandbox.sandbox import _close_shared

# Small limits keep the attack tests fast; every test that needs more says so.
FAST = Limits(wall_time_s=2.0, cpu_time_s=2, memory_bytes=256 << 20, max_output_bytes=4096)


@pytest.fixture(scope="session")
def local_backend():
    try:
        return get_backend("local")
    except SandboxUnavailable as exc:
        pytest.skip(f"local sandbox backend unavailable here: {exc}")


@pytest.fixture
def fast():
    """The fast limits, for tests that build their own sandboxes."""
    return FAST


@pytest.fixture
def sandbox(local_backend):
    """A fresh workspace on the local backend with the fast limits."""
    with Sandbox(local_backend, FAST) as box:
        yield box


@pytest.fixture(scope="session", autouse=True)
def nothing_left_behind():
    """After the session: closing the backends leaves no sandbox process or file on the host."""
    before = set(leftovers())  # another session's sandboxes, if any, are not ours to judge
    yield
    _close_shared()
    assert set(leftovers()) <= before, "sandbox processes or files outlived their backend"
