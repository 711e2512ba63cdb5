"""Ray environment pools on a local Ray runtime (the machine's CPUs): the same episodes as
in-process, back-pressure when every actor is full, and a killed actor failing only its own
episodes while the pool replaces it."""

from __future__ import annotations

import threading
import time

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import agentgym  # noqa: F401 - registers the environments
from agentgym.remote.client import RemoteEnvError
from agentgym.rollouts.io import to_json_line
from agentgym.rollouts.scripted import make_policy, replay, run_episode

ray = pytest.importorskip("ray")
from agentgym.remote.ray_pool import RayEnvPool  # noqa: E402

RAY = "agentgym/Ray-v0"


def kill(handle) -> None:
    """Kill an actor and wait until it is dead (``ray.kill`` only asks)."""
    ray.kill(handle, no_restart=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            ray.get(handle.ping.remote(), timeout=10)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    raise AssertionError("the actor outlived ray.kill")


@pytest.fixture(scope="module")
def pool():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    running = RayEnvPool(size=2, num_cpus=0.5, sessions_per_actor=8, name="test")
    yield running
    running.close()
    ray.shutdown()


def test_the_client_passes_gymnasiums_checker(pool):
    env = gym.make(RAY, env_id="agentgym/Refund-v0", pool="test")
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


@pytest.mark.parametrize("served", ["agentgym/CodeExec-v0", "agentgym/MockAPI-v0"])
def test_episodes_are_byte_identical_to_in_process(pool, served):
    local = gym.make(served, split="val")
    records = [run_episode(local, make_policy(local, name, 1), seed=1, task_id=t) for t in local.unwrapped.task_ids[:3] for name in ("oracle", "random")]
    local.close()
    env = gym.make(RAY, env_id=served, pool=pool, split="val")
    for record in records:
        assert to_json_line(replay(env, record)) == to_json_line(record)
    env.close()


def test_a_killed_actor_fails_its_episode_and_the_pool_replaces_it(pool):
    local = gym.make("agentgym/SQL-v0", split="val")
    record = run_episode(local, make_policy(local, "oracle", 0), seed=0, task_id=local.unwrapped.task_ids[0])
    env = gym.make(RAY, env_id="agentgym/SQL-v0", pool=pool, split="val")
    env.reset(seed=0)
    replaced = pool.replaced
    kill(env.unwrapped._actor.handle)
    with pytest.raises(RemoteEnvError, match="died"):
        env.unwrapped.step("hello")
    assert pool.replaced == replaced + 1 and pool.size == 2
    assert len(ray.get([a.handle.ping.remote() for a in pool._actors], timeout=60)) == 2  # every actor answers
    assert to_json_line(replay(env, record)) == to_json_line(record)  # the next episode runs on a live actor
    env.close()


def test_the_pool_tells_which_actor_holds_each_environment(pool):
    before = {s.actor_id: s for s in pool.stats()}
    assert set(before) == {a.handle._actor_id.hex() for a in pool._actors}
    envs = [gym.make(RAY, env_id="agentgym/SQL-v0", pool=pool) for _ in range(3)]
    holders = [env.unwrapped.actor_id for env in envs]
    assert holders == [env.unwrapped._actor.handle._actor_id.hex() for env in envs]
    after = {s.actor_id: s for s in pool.stats()}
    for actor_id, stats in after.items():
        made = holders.count(actor_id)
        assert stats.sessions == before[actor_id].sessions + made and stats.sessions_total == before[actor_id].sessions_total + made
        assert stats.pid > 0 and stats.node_id
    for env in envs:
        env.close()
    assert sum(s.sessions for s in pool.stats()) == sum(s.sessions for s in before.values())


def test_back_pressure_when_every_actor_is_full(pool):
    tight = RayEnvPool(size=1, num_cpus=0.25, sessions_per_actor=1, name="tight")
    try:
        first = gym.make(RAY, env_id="agentgym/SQL-v0", pool="tight")
        with pytest.raises(RemoteEnvError, match="none freed"):
            gym.make(RAY, env_id="agentgym/SQL-v0", pool="tight", timeout_s=0.3)
        made = []
        waiter = threading.Thread(target=lambda: made.append(gym.make(RAY, env_id="agentgym/SQL-v0", pool="tight", timeout_s=60)))
        waiter.start()
        time.sleep(0.5)
        assert not made  # waiting for room
        first.close()
        waiter.join(60)
        assert made and made[0].reset(seed=0)[0]
        made[0].close()
    finally:
        tight.close()


def test_the_rollout_runner_uses_a_pool_and_survives_a_dead_actor(pool, default_tokenizer):
    from fakes import OracleScript
    from test_runner import Recording

    from agentgym.rollouts.runner import RolloutConfig, run_rollouts

    env_id = "agentgym/SQL-v0"
    task_ids = gym.make(env_id, split="test").unwrapped.task_ids[:2]
    script = OracleScript(env_id, task_ids, default_tokenizer)

    class NoModel:
        tokenizer, name = default_tokenizer, "script"

    local = RolloutConfig(env_id, split="test", task_ids=task_ids, group_size=2, seed=5, max_turns=3, max_new_tokens=256)
    far = RolloutConfig(
        RAY,
        split="test",
        task_ids=task_ids,
        group_size=2,
        seed=5,
        max_turns=3,
        max_new_tokens=256,
        env_kwargs={"env_id": env_id, "pool": "test"},
        env_workers=1,
    )
    near = run_rollouts(Recording(NoModel(), script, scripted_turns=3), local)
    away = run_rollouts(Recording(NoModel(), script, scripted_turns=3), far)
    assert [e.trajectory.token_ids for e in away] == [e.trajectory.token_ids for e in near]
    assert [to_json_line(e.record) for e in away] == [to_json_line(e.record) for e in near]

    class KillsAnActor(Recording):
        killed = False

        def generate(self, prompts, params):
            if not self.killed:  # after every episode has started: one actor dies under its sessions
                type(self).killed = True
                kill(pool._actors[0].handle)
            return super().generate(prompts, params)

    episodes = run_rollouts(KillsAnActor(NoModel(), script, scripted_turns=3), far)
    # The dead actor's episodes are the machinery's failure, not the model's: labelled infra errors.
    failed = [e for e in episodes if e.stop_reason == "infra_error"]
    assert len(episodes) == 4 and 1 <= len(failed) < 4
    assert all("Ray actor" in e.record["reward_reason"] or "actor died" in e.record["reward_reason"] for e in failed), [
        e.record["reward_reason"] for e in failed
    ]
    assert all(e.reward > 0 for e in episodes if e.stop_reason != "infra_error")
