"""Helpers shared by the adapter tests: framework imports, a tiny local model, scripted turns.

The tests run in two places: in the main suite, where no trainer framework is installed (their
tests skip with the reason), and in the throwaway environments of ``.ci/adapters.sh``, which set
``AGENTGYM_ADAPTER_UNDER_TEST`` so that a framework that fails to import is a failure there.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import gymnasium as gym
import pytest

from agentgym.rollouts.scripted import assistant_turns, make_policy, run_episode
from agentgym.trainers.adapters.export import export_rows
from agentgym.trainers.adapters.spec import EpisodeSpec

CHATML_TEMPLATE = Path(__file__).with_name("chatml_tools.jinja")
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
REFUND = "agentgym/Refund-v0"


def require(module: str, framework: str) -> ModuleType:
    """Import ``module`` of ``framework``, or skip the calling test module with the reason.

    Under ``.ci/adapters.sh`` (``AGENTGYM_ADAPTER_UNDER_TEST=<framework>``) the import error is raised.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if os.environ.get("AGENTGYM_ADAPTER_UNDER_TEST") == framework:
            raise
        pytest.skip(f"{framework} is not installed here ({exc}); its tests run in `bash .ci/adapters.sh {framework}`", allow_module_level=True)


def _corpus() -> list[str]:
    """Text the tiny tokenizer learns merges from: Refund openings, tool schemas and oracle turns."""
    import json

    env = gym.make(REFUND, split="train")
    texts = [json.dumps(env.unwrapped.tools)]
    for row in export_rows("openrlhf", REFUND, limit=20):
        texts.extend(m["content"] for m in row["prompt"])
        texts.extend(oracle_turns(EpisodeSpec.from_json(row["label"])))
    env.close()
    return texts


def build_tiny_model(out_dir: Path, chat_template: str) -> Path:
    """Save a randomly initialised 2-layer Llama and a byte-level BPE tokenizer with ChatML tokens.

    Nothing is downloaded: the tokenizer is trained on agentgym's own text, so Refund prompts are
    a few thousand tokens and any text still encodes (byte-level alphabet).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast

    core = Tokenizer(models.BPE(unk_token=None))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator(_corpus(), trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = chat_template
    tokenizer.save_pretrained(out_dir)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=16384,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    import torch

    torch.manual_seed(0)  # the weights are random but should not differ between runs
    AutoModelForCausalLM.from_config(config).save_pretrained(out_dir)
    return out_dir


def oracle_record(spec: EpisodeSpec) -> dict[str, Any]:
    """The episode record of the oracle playing ``spec``'s episode (it solves every Refund task)."""
    env = spec.make()
    try:
        return run_episode(env, make_policy(env, "oracle", spec.seed or 0), seed=spec.seed, task_id=spec.task_id)
    finally:
        env.close()


def oracle_turns(spec: EpisodeSpec) -> list[str]:
    """The oracle's assistant turns (text) for ``spec``'s episode."""
    return [str(t) for t in assistant_turns(oracle_record(spec))]


def rendered_conversation(tokenizer: Any, spec: EpisodeSpec) -> str:
    """The chat template's rendering of the oracle's whole episode, tools included, ending at the
    last end-of-turn token: what a trainer's token sequence must decode to."""
    env = spec.make()
    tools = env.unwrapped.tools
    env.close()
    messages = oracle_record(spec)["messages"]
    last_turn = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    # The final tool result arrives after the episode ended; no trainer sequence shows it.
    text = tokenizer.apply_chat_template(messages[: last_turn + 1], tools=tools, tokenize=False)
    return text[: text.rindex("<|im_end|>") + len("<|im_end|>")]


class ScriptedEngine:
    """Stands in for a generation engine: returns the oracle's next turn, tokenised, per request.

    Each turn is the turn's tokens plus the end-of-turn token, the way an engine samples them.
    ``calls`` keeps every (prompt ids, returned ids) pair.
    """

    def __init__(self, tokenizer: Any, turns: list[str]) -> None:
        self.tokenizer = tokenizer
        eot = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.turns = [list(tokenizer(t, add_special_tokens=False)["input_ids"]) + [eot] for t in turns]
        self.calls: list[tuple[list[int], list[int]]] = []

    def next_turn(self, prompt_ids: list[int]) -> list[int]:
        ids = self.turns[len(self.calls)]
        self.calls.append((list(prompt_ids), ids))
        return list(ids)

    @property
    def sampled(self) -> list[int]:
        """All returned ids, in order."""
        return [t for _, ids in self.calls for t in ids]
