"""OpenRLHF adapter against OpenRLHF 0.11's real multi-turn executor (run by `bash .ci/adapters.sh openrlhf`).

A scripted engine stands in for vLLM (token ids in; token ids, text without the stop token and
logprobs out, like vLLM's RequestOutput); the agent_func file is loaded the way OpenRLHF loads it,
and the prompt and label come from an exported row through OpenRLHF's own dataset preprocessing.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import datetime
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from adapter_support import REFUND, ScriptedEngine, oracle_turns, rendered_conversation, require
from docs_commands import run_doc_block

require("openrlhf.utils.agent", "openrlhf")

from openrlhf.datasets.prompts_dataset import preprocess_data  # noqa: E402
from openrlhf.utils.agent import AgentExecutorBase, MultiTurnAgentExecutor  # noqa: E402

from agentgym.trainers.adapters.export import export_rows  # noqa: E402
from agentgym.trainers.adapters.pool import EnvPool  # noqa: E402
from agentgym.trainers.adapters.spec import EpisodeSpec  # noqa: E402


class FakeVLLM:
    """The part of vLLM's engine the executor calls, serving one scripted episode."""

    def __init__(self, engine: ScriptedEngine) -> None:
        self.engine = engine
        self.eot = engine.tokenizer.convert_tokens_to_ids("<|im_end|>")

    async def generate(self, prompt_ids: list[int], sampling_params: Any, multi_modal_data: Any = None) -> SimpleNamespace:
        ids = self.engine.next_turn(prompt_ids)[: sampling_params.max_tokens]
        stopped = ids[-1] == self.eot
        # vLLM keeps the stop token in token_ids but leaves it out of the text.
        text = self.engine.tokenizer.decode(ids[:-1] if stopped else ids, skip_special_tokens=False)
        logprobs = [{t: SimpleNamespace(logprob=-0.5)} for t in ids] if sampling_params.logprobs is not None else None
        return SimpleNamespace(outputs=[SimpleNamespace(token_ids=ids, text=text, finish_reason="stop" if stopped else "length", logprobs=logprobs)])


def load_agent_func(path: str | Path) -> ModuleType:
    """Load an agent_func file as OpenRLHF does (a file path, executed as module ``agent_module``)."""
    spec = importlib.util.spec_from_file_location("agent_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert issubclass(module.AgentExecutor, AgentExecutorBase)
    return module


def adapter_agent_func() -> str:
    """The path the docs pass as --train.agent_func_path."""
    out = subprocess.run([sys.executable, "-m", "agentgym.trainers.adapters", "openrlhf-agent-func"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def run_episode(executor: MultiTurnAgentExecutor, tokenizer: Any, max_length: int) -> tuple[dict[str, Any], ScriptedEngine, EpisodeSpec]:
    row = export_rows("openrlhf", REFUND, split="val", limit=1)[0]
    prompt, label = preprocess_data(row, input_key="prompt", label_key="label", apply_chat_template=tokenizer.apply_chat_template)
    spec = EpisodeSpec.from_json(label)
    engine = ScriptedEngine(tokenizer, oracle_turns(spec))
    sampling_params = SimpleNamespace(max_tokens=None, logprobs=1)  # the fields the executor reads of vLLM's SamplingParams
    result = asyncio.run(executor.execute(prompt, label, sampling_params, max_length, tokenizer, FakeVLLM(engine)))
    return result, engine, spec


def action_mask(result: dict[str, Any]) -> list[int]:
    """The mask OpenRLHF's sample generator builds from the action ranges (before its one-token shift)."""
    mask = [0] * len(result["observation_tokens"])
    for start, end in result["action_ranges"]:
        mask[start:end] = [1] * (end - start)
    return mask


def test_executor_plays_one_episode(tiny_tokenizer: Any) -> None:
    module = load_agent_func(adapter_agent_func())
    result, engine, spec = run_episode(module.AgentExecutor(), tiny_tokenizer, max_length=16384)
    tokens = result["observation_tokens"]
    mask = action_mask(result)
    assert [t for t, m in zip(tokens, mask, strict=True) if m] == engine.sampled, "the trained tokens are exactly the engine's"
    assert tiny_tokenizer.decode(tokens, skip_special_tokens=False) == rendered_conversation(tiny_tokenizer, spec)
    assert result["reward"] == 1.0 and float(result["scores"]) == 1.0
    assert result["extra_logs"]["agentgym_success"] == 1.0 and result["extra_logs"]["agentgym_truncated"] == 0.0
    assert not result["truncated"]
    logprobs = result["rollout_log_probs"]
    assert len(logprobs) == len(tokens)
    assert all(lp == (-0.5 if m else 0.0) for lp, m in zip(logprobs, mask, strict=True))


def test_budget_ends_the_episode_with_a_score(tiny_tokenizer: Any) -> None:
    from agentgym.trainers.adapters.openrlhf import make_agent_executor

    pool = EnvPool()
    executor = make_agent_executor(pool=pool)()
    full, _, spec = run_episode(executor, tiny_tokenizer, max_length=16384)
    assert pool.idle(spec) == 1, "a finished episode gives its environment back"
    pool.acquire(spec)  # empty the pool, so that the next release shows
    budget = full["action_ranges"][0][0] + 150  # the prompt and 150 more tokens
    result, engine, _ = run_episode(executor, tiny_tokenizer, max_length=budget)
    assert len(result["observation_tokens"]) <= budget and len(engine.calls) < len(engine.turns)
    assert result["reward"] == 0.0 and result["extra_logs"]["agentgym_truncated"] == 1.0
    assert pool.idle(spec) == 1, "the adapter ended the episode (done=True), not the executor's budget check"


def test_written_agent_func_carries_the_options(tmp_path: Path) -> None:
    path = tmp_path / "agent_func.py"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "agentgym.trainers.adapters",
            "openrlhf-agent-func",
            "--write",
            str(path),
            "--template-kwargs",
            '{"enable_thinking": false}',
            "--tool-mode",
            "system_prompt",
        ],
        check=True,
        capture_output=True,
    )
    module = load_agent_func(path)
    executor = module.AgentExecutor()
    assert isinstance(executor, MultiTurnAgentExecutor)
    bound = asyncio.run(_bound_instance_class(executor))
    assert bound.template_kwargs == {"enable_thinking": False} and bound.tool_mode == "system_prompt"


async def _bound_instance_class(executor: MultiTurnAgentExecutor) -> type:
    tokenizer = object()

    class NoEngine:
        async def generate(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("unreachable")

    try:  # reset() fails on the bogus label, after the executor bound its instance class
        await executor.execute("p", "not json", SimpleNamespace(max_tokens=None, logprobs=None), 10, tokenizer, NoEngine())
    except ValueError:
        pass
    return executor.agent_instance_cls


def train_ppo_ray_parser() -> argparse.ArgumentParser:
    """OpenRLHF's real argument parser, rebuilt from the statements of train_ppo_ray's ``__main__``
    block (importing the module needs ray, vLLM and DeepSpeed)."""
    path = importlib.util.find_spec("openrlhf.cli.train_ppo_ray").origin
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    main = next(n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test))
    statements = []
    for statement in main.body:
        if "parse_args" in ast.unparse(statement):
            break
        statements.append(statement)
    namespace: dict[str, Any] = {"argparse": argparse, "os": os, "datetime": datetime.datetime}
    exec(compile(ast.Module(body=statements, type_ignores=[]), path, "exec"), namespace)  # noqa: S102 - OpenRLHF's own parser code
    return namespace["parser"]


def test_docs_recipes_use_openrlhfs_real_flags(tmp_path: Path) -> None:
    parser = train_ppo_ray_parser()
    for block in ("openrlhf-single-node", "openrlhf-multi-node"):
        workdir = tmp_path / block
        calls = run_doc_block(block, workdir)
        (argv,) = [c[3:] for c in calls if c[:3] == ["python3", "-m", "openrlhf.cli.train_ppo_ray"]]
        args = vars(parser.parse_args(argv))  # exits on an unknown flag or a bad value
        assert args["algo.advantage.estimator"] == "group_norm" and args["rollout.n_samples_per_prompt"] > 1
        assert args["data.input_key"] == "prompt" and args["data.label_key"] == "label" and args["data.apply_chat_template"]
        load_agent_func(workdir / args["train.agent_func_path"])
        assert (workdir / args["data.prompt_dataset"]).is_file()
        assert any(c[:2] == ["ray", "start"] for c in calls) and any(c[:3] == ["ray", "job", "submit"] for c in calls)
