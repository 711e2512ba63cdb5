"""verl adapter against the real verl 0.9 agent-loop machinery (run by `bash .ci/adapters.sh verl`).

A scripted engine stands in for vLLM: verl's ``AgentLoopWorker`` loads the agent loop from the
adapter's registration YAML, reads rows exported by the adapter through verl's ``RLHFDataset``,
and post-processes the episodes into its training batch.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from adapter_support import REFUND, ScriptedEngine, oracle_turns, rendered_conversation, require
from docs_commands import run_doc_block

require("verl.experimental.agent_loop", "verl")

import verl  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from agentgym.trainers.adapters.export import export_rows, write_rows  # noqa: E402
from agentgym.trainers.adapters.spec import EpisodeSpec  # noqa: E402
from agentgym.trainers.adapters.verl import AGENT_LOOP_CONFIG, compute_score  # noqa: E402

CONFIG_DIR = Path(verl.__file__).parent / "trainer" / "config"


class ScriptedServer:
    """verl's LLM client, played by scripted engines: each request id is pinned to the engine
    whose episode prompt it sends first (prompts are rendered independently, with the template)."""

    def __init__(self, engines_by_prompt: dict[tuple[int, ...], ScriptedEngine]) -> None:
        self.by_prompt = engines_by_prompt
        self.by_request: dict[str, ScriptedEngine] = {}
        self.max_tokens: list[int] = []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any) -> TokenOutput:
        if request_id not in self.by_request:
            self.by_request[request_id] = self.by_prompt.pop(tuple(prompt_ids))
        self.max_tokens.append(sampling_params["max_tokens"])
        ids = self.by_request[request_id].next_turn(prompt_ids)[: sampling_params["max_tokens"]]
        return TokenOutput(token_ids=ids, log_probs=[-0.25] * len(ids))


def _config(model_dir: Path, data_file: Path, response_length: int) -> Any:
    config = OmegaConf.load(CONFIG_DIR / "_generated_ppo_trainer.yaml")
    config.actor_rollout_ref.model.path = str(model_dir)
    config.actor_rollout_ref.rollout.name = "vllm"
    config.actor_rollout_ref.rollout.prompt_length = 4096
    config.actor_rollout_ref.rollout.response_length = response_length
    config.actor_rollout_ref.rollout.calculate_log_probs = True
    config.actor_rollout_ref.rollout.agent.agent_loop_config_path = str(AGENT_LOOP_CONFIG)
    config.data.max_prompt_length = 4096
    config.data.train_files = str(data_file)
    return config


def _run_worker(tiny_model_dir: Path, tiny_tokenizer: Any, tmp_path: Path, *, limit: int, response_length: int):
    rows = export_rows("verl", REFUND, split="val", limit=limit)
    data_file = write_rows(rows, tmp_path / "val.parquet")
    engines: dict[tuple[int, ...], ScriptedEngine] = {}
    for row in rows:
        spec = EpisodeSpec.from_json(row["extra_info"]["agentgym_spec"])
        env = spec.make()
        opening, _ = spec.reset(env)
        prompt = tiny_tokenizer.apply_chat_template(opening, tools=env.unwrapped.tools, add_generation_prompt=True, tokenize=True, return_dict=False)
        engines[tuple(prompt)] = ScriptedEngine(tiny_tokenizer, oracle_turns(spec))
        env.close()
    scripted = list(engines.values())
    server = ScriptedServer(engines)
    config = _config(tiny_model_dir, data_file, response_length)

    async def run() -> DataProto:
        # verl's agent loops capture the running event loop when built, so the worker is built inside it.
        worker = AgentLoopWorker(config, server)
        dataset = RLHFDataset(data_files=[str(data_file)], tokenizer=tiny_tokenizer, config=config.data, processor=None)
        batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(len(dataset))]))
        return await worker.generate_sequences(batch)

    output = asyncio.run(run())
    engine_of = {id(engine): engine for engine in server.by_request.values()}
    assert len(engine_of) == len(scripted), "every episode must have been played under one request id"
    return rows, output, server


def test_agent_loop_worker_plays_episodes_with_exact_masks(tiny_model_dir: Path, tiny_tokenizer: Any, tmp_path: Path) -> None:
    rows, output, server = _run_worker(tiny_model_dir, tiny_tokenizer, tmp_path, limit=2, response_length=2048)
    batch, extra = output.batch, output.non_tensor_batch
    assert batch["rm_scores"].sum(-1).tolist() == [1.0, 1.0]  # the oracle's turns solve both tasks
    assert extra["agentgym_success"].tolist() == [1.0, 1.0]
    prompt_width = batch["prompts"].shape[1]
    for i in range(len(rows)):
        valid = batch["attention_mask"][i, prompt_width:].bool()
        response = batch["responses"][i][valid].tolist()
        mask = batch["response_mask"][i][valid].tolist()
        sampled = [t for t, m in zip(response, mask, strict=True) if m == 1]
        # The prompt decides which scripted engine served this sample.
        prompt = batch["prompts"][i][batch["attention_mask"][i, :prompt_width].bool()].tolist()
        engine = next(e for e in server.by_request.values() if e.calls[0][0] == prompt)
        assert sampled == engine.sampled, "response_mask must be 1 exactly on the engine's tokens"
        # Every other token is environment text: the sequence is the template's rendering of the episode.
        spec = EpisodeSpec.from_json(rows[i]["extra_info"]["agentgym_spec"])
        assert tiny_tokenizer.decode(prompt + response, skip_special_tokens=False) == rendered_conversation(tiny_tokenizer, spec)
        rewards = batch["rm_scores"][i][valid]
        assert rewards[-1].item() == 1.0 and rewards[:-1].abs().sum().item() == 0.0
        logprobs = batch["rollout_log_probs"][i][valid].tolist()
        assert [lp for lp, m in zip(logprobs, mask, strict=True) if m == 1] == [-0.25] * len(sampled)
        assert all(lp == 0.0 for lp, m in zip(logprobs, mask, strict=True) if m == 0)


def test_budget_cuts_the_episode_and_scores_the_state_reached(tiny_model_dir: Path, tiny_tokenizer: Any, tmp_path: Path) -> None:
    _, output, server = _run_worker(tiny_model_dir, tiny_tokenizer, tmp_path, limit=1, response_length=200)
    batch = output.batch
    assert batch["responses"].shape[1] == 200
    valid = batch["attention_mask"][0, batch["prompts"].shape[1] :].bool()
    assert int(valid.sum()) <= 200
    assert batch["rm_scores"][0].sum().item() == 0.0  # unfinished Refund episodes fail their completion gate
    assert output.non_tensor_batch["agentgym_truncated"].tolist() == [1.0]
    # Every generation was bounded by the budget that was left.
    assert all(0 < m <= 200 for m in server.max_tokens)
    engine = next(iter(server.by_request.values()))
    mask = batch["response_mask"][0][valid].tolist()
    response = batch["responses"][0][valid].tolist()
    sampled = [t for t, m in zip(response, mask, strict=True) if m == 1]
    assert sampled == engine.sampled[: len(sampled)] and sampled


def test_compute_score_reads_the_agent_loop_reward() -> None:
    info = {"reward_extra_info": {"agentgym_reward": 0.75, "agentgym_success": 0.0}}
    assert compute_score("agentgym/Refund-v0", "text", "{}", info) == {"score": 0.75, "agentgym_reward": 0.75, "agentgym_success": 0.0}
    with pytest.raises(ValueError, match="agent_name=agentgym"):
        compute_score("agentgym/Refund-v0", "text", "{}", {"index": 3})


def test_docs_recipes_compose_with_verls_config(tmp_path: Path) -> None:
    from hydra import compose, initialize_config_dir

    for block in ("verl-single-node", "verl-multi-node"):
        calls = run_doc_block(block, tmp_path / block)
        (overrides,) = [c[3:] for c in calls if c[:3] == ["python3", "-m", "verl.trainer.main_ppo"]]
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
            config = compose(config_name="ppo_trainer", overrides=overrides)
        assert config.algorithm.adv_estimator == "grpo"
        assert config.actor_rollout_ref.rollout.agent.agent_loop_config_path == str(AGENT_LOOP_CONFIG)
        assert config.actor_rollout_ref.rollout.n > 1
        for key in ("train_files", "val_files"):
            assert (tmp_path / block / config.data[key]).is_file(), f"the recipe's export must write {config.data[key]}"
