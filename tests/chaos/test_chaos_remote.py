"""Chaos: ``agentgym serve`` restarts under connected clients. The episodes in flight end as
infrastructure errors (labelled, with the cause), and each client's next reset reconnects and
opens a new session: the next episodes succeed, with the same records as before the restart."""

from __future__ import annotations

import threading

import gymnasium as gym
import pytest
from fakes import OracleScript

from agentgym.remote import EnvServer, RemoteEnvError, SessionLost
from agentgym.rollouts.runner import RolloutConfig, RolloutRunner
from agentgym.rollouts.scripted import make_policy, run_episode

pytest.importorskip("websockets")

SERVED = "agentgym/SQL-v0"


def restart(server: EnvServer) -> EnvServer:
    """Stop ``server`` and start a new one on its port, as a supervisor restarting the process would."""
    port = int(server.url.rsplit(":", 1)[1])
    server.close()
    again = EnvServer(port=port)
    again.start()
    return again


def test_clients_reconnect_after_the_server_restarts():
    server = EnvServer()
    server.start()
    try:
        clients = [gym.make("agentgym/Remote-v0", url=server.url, env_id=SERVED, split="val") for _ in range(3)]
        local = gym.make(SERVED, split="val")
        policy = make_policy(local, "oracle", 0)
        expected = run_episode(local, policy, seed=4)
        for client in clients:
            client.reset(seed=4)  # an episode in flight on every client
        server = restart(server)
        for client in clients:
            with pytest.raises(SessionLost, match="closed"):
                client.step("hello")
            assert isinstance(SessionLost("x"), RemoteEnvError)
            record = run_episode(client, policy, seed=4)  # reconnects on reset
            assert record["messages"] == expected["messages"] and record["success"]
            assert client.unwrapped.reconnects == 1
            client.close()
        with pytest.raises(RemoteEnvError, match="closed"):  # closed by its caller: never reopened
            clients[0].unwrapped.call({"op": "tasks"})
    finally:
        server.close()


def test_model_episodes_cut_by_a_restart_are_labelled_and_the_next_run_succeeds(default_tokenizer):
    server = EnvServer()
    server.start()
    try:
        task_ids = gym.make(SERVED, split="val").unwrapped.task_ids[:2]
        script = OracleScript(SERVED, task_ids, default_tokenizer, split="val")
        env_kwargs = {"url": server.url, "env_id": SERVED}
        config = RolloutConfig("agentgym/Remote-v0", split="val", task_ids=task_ids, group_size=1, max_new_tokens=256, seed=0, env_kwargs=env_kwargs)

        class RestartsOnce:
            """The oracle, except that the server restarts before the first turn is answered."""

            name = "oracle-script"
            tokenizer = default_tokenizer
            restarted = threading.Event()

            def generate(self, prompts, params):
                from agentgym.models import Generation

                if not self.restarted.is_set():
                    self.restarted.set()
                    nonlocal server
                    server = restart(server)
                out = []
                for prompt, p in zip(prompts, params, strict=True):
                    ids = script.reply(prompt, p.max_new_tokens)
                    out.append(Generation(tuple(ids), (0.0,) * len(ids), default_tokenizer.decode(ids), "stop"))
                return out

        episodes = RolloutRunner(RestartsOnce()).run(config)
        assert [e.stop_reason for e in episodes] == ["infra_error"] * 2
        assert all("SessionLost" in e.record["error"] for e in episodes)
        retried = RolloutRunner(RestartsOnce()).run(config, infra_retries=1)
        assert [(e.stop_reason, e.record["success"]) for e in retried] == [("done", True)] * 2
    finally:
        server.close()
