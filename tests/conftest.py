"""Shared fixtures: the registered environment ids."""

import gymnasium as gym
import pytest

import agentgym
from agentgym.envs import ENVIRONMENTS


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "env_id" in metafunc.fixturenames:
        metafunc.parametrize("env_id", sorted(ENVIRONMENTS))


@pytest.fixture
def make_env():
    """gym.make that closes what it made at the end of the test."""
    made = []

    def make(env_id: str, **kwargs):
        env = gym.make(env_id, **kwargs)
        made.append(env)
        return env

    yield make
    for env in made:
        env.close()


assert agentgym.ENVIRONMENTS is ENVIRONMENTS
