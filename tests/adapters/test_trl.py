"""TRL adapter against TRL 1.16's real GRPOTrainer on CPU (run by `bash .ci/adapters.sh trl`).

Both paths train two steps on Refund-v0 with a tiny random model built locally: the
``environment_factory`` class (TRL runs the tool loop) and the ``rollout_func`` path, the latter
through the exact command the docs show.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from adapter_support import REFUND, build_tiny_model, require
from docs_commands import run_doc_block

require("trl", "trl")

from datasets import Dataset  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402
from trl.chat_template_utils import qwen3_chat_template  # noqa: E402

from agentgym.trainers.adapters.export import export_rows  # noqa: E402
from agentgym.trainers.adapters.trl import build_parser, environment_class  # noqa: E402

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


@pytest.fixture(scope="module")
def qwen_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with TRL's Qwen3 template, whose tool calls TRL knows how to parse."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen3"), qwen3_chat_template)


def test_environment_factory_trains_two_steps(qwen_model_dir: Path, tmp_path: Path) -> None:
    rows = export_rows("trl", REFUND, limit=2)
    made: list[Any] = []

    class Refund(environment_class(REFUND)):  # records its instances; TRL builds and pools them
        def __init__(self) -> None:
            super().__init__()
            made.append(self)

    tokenizer = AutoTokenizer.from_pretrained(qwen_model_dir)
    config = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=64,
        max_steps=2,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        chat_template_kwargs={"enable_thinking": False},
        max_tool_calling_iterations=2,
        seed=0,
    )
    trainer = GRPOTrainer(model=str(qwen_model_dir), args=config, train_dataset=Dataset.from_list(rows), processing_class=tokenizer, environment_factory=Refund)

    # A random model never writes a tool call: the first generation of each step is the oracle's
    # first call in the Qwen3 format, so TRL's loop has to run the environment's tool.
    call = '<tool_call>\n{"name": "ask_customer", "arguments": {"question": "email"}}\n</tool_call><|im_end|>'
    generate = trainer._generate_single_turn
    step_of_last_forced = {"step": -1}

    def forced(prompt_ids: list[list[int]], *args: Any, **kwargs: Any) -> Any:
        if step_of_last_forced["step"] != trainer.state.global_step:
            step_of_last_forced["step"] = trainer.state.global_step
            ids = tokenizer(call, add_special_tokens=False)["input_ids"]
            return [list(ids) for _ in prompt_ids], None
        return generate(prompt_ids, *args, **kwargs)

    trainer._generate_single_turn = forced
    trainer.train()

    assert trainer.state.global_step == 2
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logs) == 2 and all("rewards/Refund/mean" in entry for entry in logs)
    assert all(entry["tools/call_frequency"] > 0 and entry["tools/failure_frequency"] == 0 for entry in logs)
    # The calls reached the environments: each episode's record shows the customer's answer.
    answered = [m for env in made if env._env is not None for m in env._env.unwrapped.episode_record()["messages"] if m["role"] == "tool"]
    assert answered and all(m["content"].startswith("Customer: My email is") for m in answered)


def test_rollout_func_trains_two_steps_with_the_docs_command(tiny_model_dir: Path, tmp_path: Path) -> None:
    run_doc_block("trl-cpu", tmp_path, env={"MODEL": str(tiny_model_dir), "TRL_EXPERIMENTAL_SILENCE": "1"})
    assert (tmp_path / "runs" / "trl-cpu").is_dir()


def test_rollout_func_output_is_what_grpo_trains_on(tiny_model_dir: Path, tmp_path: Path) -> None:
    rows = export_rows("trl-rollout", REFUND, limit=1)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    captured: dict[str, Any] = {}

    from agentgym.trainers.adapters.trl import RolloutFunction, reward_from_env

    rollout = RolloutFunction(max_turn_tokens=16, seed=3)

    def spy(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        captured["prompts"] = list(prompts)
        captured["output"] = rollout(prompts, trainer)
        return captured["output"]

    config = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=96,
        max_steps=1,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=str(tiny_model_dir),
        reward_funcs=reward_from_env,
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        rollout_func=spy,
    )
    trainer.train()
    output = captured["output"]
    assert captured["prompts"] == [rows[0]["prompt"]] * 2  # TRL repeats each prompt num_generations times
    for completion, mask, logprobs in zip(output["completion_ids"], output["env_mask"], output["logprobs"], strict=True):
        assert len(completion) == len(mask) == len(logprobs) <= 96
        assert 1 in mask and 0 in mask  # several turns: sampled tokens and environment replies
        assert all(lp == 0.0 if m == 0 else lp <= 0.0 for lp, m in zip(logprobs, mask, strict=True))
    assert output["env_reward"] == [0.0, 0.0]  # a random model does not solve a refund


def test_docs_accelerate_recipes_parse(tmp_path: Path) -> None:
    parser = build_parser()
    for block in ("trl-single-node", "trl-multi-node"):
        calls = run_doc_block(block, tmp_path / block)
        (argv,) = [c for c in calls if c[0] == "accelerate"]
        module_at = argv.index("-m")
        assert argv[module_at + 1] == "agentgym.trainers.adapters.trl"
        args = parser.parse_args(argv[module_at + 2 :])
        assert args.env == REFUND and args.mode == "environment"
        environment_class(args.env)
