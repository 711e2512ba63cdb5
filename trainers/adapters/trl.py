"""TRL (1.16) adapter: agentgym environments for ``GRPOTrainer`` (Unsloth's trainer is TRL's).

Two paths:

* :func:`environment_class`: a class for ``GRPOTrainer(environment_factory=...)``. TRL runs the
  tool-calling loop itself (with vLLM when enabled) and masks tool output. The class has a
  zero-argument constructor, ``reset(**row)`` that starts the row's episode (TRL pools instances
  and reuses them across batches; ``reset`` rebuilds all episode state), one typed, documented
  method per environment tool, and ``get_reward()``. TRL ends an episode at the first turn without
  a tool call, so an environment's reply to plain text (a simulated user) is never seen here.
* :class:`RolloutFunction`: a ``rollout_func`` that plays whole episodes, user turns included,
  with agentgym's token-exact trajectories, returning ``env_mask`` (1 exactly on sampled tokens)
  and the reward as ``env_reward`` for :func:`reward_from_env`. It samples with agentgym's
  transformers backend on the trainer's model (no vLLM).

Datasets: ``python -m agentgym.trainers.adapters.export trl ...`` (environment_factory) or
``... export trl-rollout ...`` (rollout_func). An example run (two GRPO steps, on CPU)::

    python -m agentgym.trainers.adapters.trl --env agentgym/Refund-v0 --model "$MODEL" --max-steps 2

TRL itself is imported only by :func:`main`; the classes here work with any TRL that calls them
the documented way.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import re
import sys
import typing
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, cast

import gymnasium as gym

from agentgym.env import EpisodeOver
from agentgym.models.loading import ModelLoadError
from agentgym.rollouts.chat import ToolMode
from agentgym.rollouts.episode import EpisodeOutcome, RolloutSettings, TokenEpisode, episode_outcome
from agentgym.seeding import derive_seed
from agentgym.tools import Tool, tools_of
from agentgym.trainers.adapters.export import Format, export_rows
from agentgym.trainers.adapters.pool import EnvPool
from agentgym.trainers.adapters.spec import EpisodeSpec, SpecError

__all__ = ["RolloutFunction", "TRLEnvironment", "build_parser", "build_trainer", "environment_class", "environment_factories", "main", "reward_from_env"]


# --------------------------------------------------------------------------- environment_factory


class TRLEnvironment:
    """Base of the generated environment classes (see :func:`environment_class`).

    TRL turns every public function of the class except ``reset`` and ``get_reward`` into a
    tool, so everything else here is private or a property.
    """

    env_id: ClassVar[str] = ""

    def __init__(self) -> None:
        self._env: gym.Env | None = None
        self._env_key: str | None = None
        self._calls = 0

    def reset(self, **row: Any) -> None:
        """Start the episode of a dataset row (exported in the ``trl`` format).

        Returns ``None``: the row's ``prompt`` already holds the opening messages, which are
        checked against the environment's so that a stale dataset fails loudly.
        """
        spec = EpisodeSpec.from_row(row)
        if spec.env_id != self.env_id:
            raise SpecError(f"this environment class plays {self.env_id!r}, but the row is for {spec.env_id!r}")
        if self._env is None or self._env_key != spec.make_key:
            if self._env is not None:
                self._env.close()
            self._env, self._env_key = spec.make(), spec.make_key
        opening, _ = spec.reset(self._env)
        self._calls = 0
        prompt = row.get("prompt")
        if prompt is not None and _role_content(prompt) != _role_content(opening):
            raise SpecError(
                f"the row's prompt differs from the opening of {spec.env_id} task {spec.task_id!r}: "
                "the dataset was exported from another version of the environment; export it again"
            )
        return None

    def get_reward(self) -> float:
        """The episode's reward (an episode TRL stopped early is scored on the state it reached)."""
        return self.outcome.reward

    @property
    def outcome(self) -> EpisodeOutcome:
        """Reward, success and error counts of the current episode."""
        return episode_outcome(self._require_env())

    def _require_env(self) -> gym.Env:
        if self._env is None:
            raise RuntimeError("reset(**row) must start an episode first")
        return self._env

    def _call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        """Run one tool call as one environment step and return what the model reads."""
        env = self._require_env()
        self._calls += 1
        call = {"id": f"call_{self._calls}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
        try:
            observation, *_ = env.step({"role": "assistant", "content": "", "tool_calls": [call]})
        except EpisodeOver:
            # TRL reports a raised exception to the model as {"error": ...} and counts it as a failed call.
            raise RuntimeError("the episode has ended; no further tool calls are executed") from None
        return "\n".join(m["content"] for m in observation)


def _role_content(messages: Any) -> list[tuple[Any, Any]]:
    return [(m.get("role"), m.get("content")) for m in messages] if isinstance(messages, list) else [("?", messages)]


def _tool_method(tool: Tool, owner: str) -> Any:
    """A method named after ``tool`` with its typed signature and a Google docstring built from its schema.

    TRL derives each tool's schema from the method (transformers ``get_json_schema``: type hints
    plus an ``Args:`` entry per parameter), so both are rebuilt from the agentgym tool.
    """
    signature = inspect.signature(tool.fn)
    hints = typing.get_type_hints(tool.fn)

    def method(self: TRLEnvironment, **arguments: Any) -> str:
        return self._call_tool(tool.name, arguments)

    properties = tool.parameters.get("properties", {})
    args = "\n".join(f"    {name}: {' '.join(str(spec.get('description') or name).split())}" for name, spec in properties.items())
    method.__name__ = tool.name
    method.__qualname__ = f"{owner}.{tool.name}"
    method.__doc__ = f"{tool.description or tool.name}\n\nArgs:\n{args}\n" if properties else f"{tool.description or tool.name}\n"
    method.__signature__ = signature.replace(return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = {k: v for k, v in hints.items() if k != "return"} | {"return": str}
    return method


@functools.cache
def environment_class(env_id: str) -> type[TRLEnvironment]:
    """The ``environment_factory`` class of a registered environment (one class per id, cached).

    TRL names the reward column after the class: ``rewards/<Name>/mean`` with ``Name`` derived
    from the id (``agentgym/Refund-v0`` gives ``Refund_v0``).
    """
    if env_id not in gym.registry:
        raise SpecError(f"unknown environment {env_id!r}")
    entry_point = gym.spec(env_id).entry_point
    # gym.register takes the entry point as "module:Class" (as agentgym registers its own) or as the class itself.
    env_cls = gym.envs.registration.load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
    if not isinstance(env_cls, type):
        raise SpecError(f"{env_id}: its entry point {entry_point!r} is not an environment class")
    name = re.sub(r"\W", "_", env_id.split("/")[-1])
    namespace: dict[str, Any] = {"env_id": env_id, "__module__": __name__, "__doc__": f"TRL environment for {env_id} (generated by agentgym)."}
    for tool in tools_of(env_cls):
        if tool.name in ("reset", "get_reward", "outcome") or tool.name.startswith("_"):
            raise ValueError(f"{env_id}: tool name {tool.name!r} clashes with the TRL environment interface")
        namespace[tool.name] = _tool_method(tool, name)
    return type(name, (TRLEnvironment,), namespace)


def environment_factories(env_ids: Sequence[str]) -> dict[str, type[TRLEnvironment]]:
    """``{env_id: class}`` for a multi-environment run (rows select one through their ``environment`` column)."""
    return {env_id: environment_class(env_id) for env_id in env_ids}


# ------------------------------------------------------------------------------- rollout_func


def reward_from_env(prompts: list[Any], completions: list[Any], env_reward: list[float], **kwargs: Any) -> list[float]:
    """Reward function for the ``rollout_func`` path: the environment's reward, passed through."""
    return [float(r) for r in env_reward]


class RolloutFunction:
    """``rollout_func`` for ``GRPOTrainer``: plays each prompt's episode to the end.

    TRL calls it with this process's prompts, already repeated ``num_generations`` times; each
    prompt is an episode spec (the ``trl-rollout`` export). The whole episode (prompt excluded) is
    the completion; ``GRPOConfig.max_completion_length`` is its token budget.

    Args:
        max_turn_tokens: cap on the tokens sampled in one assistant turn.
        tool_mode: how tools are shown to the model (see :class:`agentgym.rollouts.chat.ChatRenderer`).
        template_kwargs: extra chat-template variables, e.g. ``{"enable_thinking": False}``.
        seed: base seed of the per-turn sampling seeds (mixed with the step, rank, row and turn).
        pool: environments reused across calls (a private pool by default).
    """

    def __init__(
        self,
        *,
        max_turn_tokens: int = 512,
        tool_mode: ToolMode = "auto",
        template_kwargs: Mapping[str, Any] | None = None,
        seed: int = 0,
        pool: EnvPool | None = None,
    ) -> None:
        if max_turn_tokens < 1:
            raise ValueError(f"max_turn_tokens must be at least 1, got {max_turn_tokens}")
        self.max_turn_tokens = max_turn_tokens
        self.tool_mode = tool_mode
        self.template_kwargs = dict(template_kwargs or {})
        self.seed = seed
        self.pool = pool or EnvPool()

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        specs = [_spec_from_prompt(p) for p in prompts]
        tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
        settings = RolloutSettings(
            max_new_tokens=self.max_turn_tokens,
            temperature=float(trainer.args.temperature),
            top_p=float(trainer.args.top_p),
            template_kwargs=self.template_kwargs,
            tool_mode=self.tool_mode,
        )
        envs = [self.pool.acquire(spec) for spec in specs]
        try:
            episodes = []
            for env, spec in zip(envs, specs, strict=True):
                episode = TokenEpisode(env, spec.reset(env)[0], settings.renderer(tokenizer, env.unwrapped.tools), settings)
                episode.cap_response(int(trainer.args.max_completion_length))  # TRL budgets the completion
                episodes.append(episode)
            self._play(episodes, trainer, tokenizer)
            return _rollout_output(episodes)
        finally:
            for env, spec in zip(envs, specs, strict=True):
                self.pool.release(spec, env)

    def _play(self, episodes: list[TokenEpisode], trainer: Any, tokenizer: Any) -> None:
        from trl.models import unwrap_model_for_generation

        from agentgym.models.hf import HFBackend

        rank = int(trainer.accelerator.process_index)
        step = int(trainer.state.global_step)
        # TRL's own generation context: gathers ZeRO-3 shards and switches off gradient checkpointing.
        with unwrap_model_for_generation(
            trainer.model_wrapped,
            trainer.accelerator,
            gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
            gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
        ) as model:
            was_training = model.training
            model.eval()  # sampling must not see dropout
            try:
                # Continuous batching with key/value reuse: an episode's next turn is submitted as soon as
                # its environment replied, and only its new tokens are prefilled.
                backend = HFBackend(model, tokenizer)

                def submit(i: int) -> None:
                    episode = episodes[i]
                    seed = derive_seed(self.seed, step, rank, i, len(episode.turns), bits=32)
                    backend.submit(i, episode.token_ids, episode.sampling_params(seed))

                for i, episode in enumerate(episodes):
                    if episode.wants_generation:
                        submit(i)
                while backend.in_flight:
                    for key, generation in backend.advance():
                        i = cast(int, key)  # submit() queues each episode under its index
                        episodes[i].play_turn(generation.token_ids, generation.logprobs)
                        if episodes[i].wants_generation:
                            submit(i)
            finally:
                model.train(was_training)


def _spec_from_prompt(prompt: Any) -> EpisodeSpec:
    if not isinstance(prompt, str):
        raise SpecError(
            "rollout_func prompts must be agentgym episode specs (JSON strings); export the dataset with "
            "`python -m agentgym.trainers.adapters.export trl-rollout ...`"
        )
    return EpisodeSpec.from_json(prompt)


def _rollout_output(episodes: Sequence[TokenEpisode]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {key: [] for key in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "env_reward", "agentgym_success")}
    for episode in episodes:
        tokens = episode.split()
        outcome = episode.outcome()
        out["prompt_ids"].append(tokens.prompt_ids)
        out["completion_ids"].append(tokens.response_ids)
        out["logprobs"].append(tokens.response_logprobs)
        out["env_mask"].append(tokens.response_mask)
        out["env_reward"].append(outcome.reward)
        out["agentgym_success"].append(outcome.success)
    return out


# ---------------------------------------------------------------------------- example script


def build_parser() -> argparse.ArgumentParser:
    """The command line of :func:`main`."""
    parser = argparse.ArgumentParser(prog="python -m agentgym.trainers.adapters.trl", description="Train GRPO on an agentgym environment with TRL.")
    parser.add_argument("--env", required=True, help="environment id, e.g. agentgym/Refund-v0")
    parser.add_argument("--model", default=None, help="model: smollm2-135m-instruct (default), a checkpoint dir, a .gguf file or a hub id")
    parser.add_argument(
        "--mode",
        choices=("rollout", "environment"),
        default="rollout",
        help="rollout: agentgym plays whole episodes (any chat template); environment: TRL's tool loop (needs a template TRL can parse, e.g. Qwen)",
    )
    parser.add_argument("--split", default="train")
    parser.add_argument("--limit", type=int, default=None, help="tasks to train on (default: the whole split)")
    parser.add_argument("--max-steps", type=int, default=100)
    parser.add_argument("--num-generations", type=int, default=8, help="group size G")
    parser.add_argument("--batch-size", type=int, default=8, help="per-device batch of completions (a multiple of G)")
    parser.add_argument("--max-completion-length", type=int, default=2048, help="token budget of a whole episode after the prompt")
    parser.add_argument("--max-turn-tokens", type=int, default=512, help="rollout mode: tokens per assistant turn")
    parser.add_argument("--max-tool-calls", type=int, default=20, help="environment mode: tool-calling iterations")
    parser.add_argument("--loss-type", default="dapo", help="TRL loss_type: dapo (token-mean), grpo, dr_grpo, bnpo, ...")
    parser.add_argument("--learning-rate", type=float, default=1e-6)
    parser.add_argument("--template-kwargs", default="{}", help="JSON chat-template variables, e.g. '{\"enable_thinking\": false}'")
    parser.add_argument("--output-dir", default="runs/trl")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cpu", action="store_true", help="train on CPU (fp32)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Train GRPO on an agentgym environment with TRL (the example the docs show)."""
    args = build_parser().parse_args(argv)
    try:
        template_kwargs = json.loads(args.template_kwargs)
        if not isinstance(template_kwargs, dict):
            raise ValueError("--template-kwargs must be a JSON object")
        trainer = build_trainer(args, template_kwargs)
    except (ValueError, OSError, ImportError, ModelLoadError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    trainer.train()
    print(f"trained {trainer.state.global_step} steps; last log: {json.dumps(trainer.state.log_history[-1], sort_keys=True)}")
    return 0


def build_trainer(args: argparse.Namespace, template_kwargs: dict[str, Any]) -> Any:
    """The ``GRPOTrainer`` of :func:`main`'s arguments."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from agentgym.models.loading import resolve_model_path

    model = resolve_model_path(args.model)
    tokenizer = AutoTokenizer.from_pretrained(model)
    fmt: Format = "trl" if args.mode == "environment" else "trl-rollout"
    dataset = Dataset.from_list(export_rows(fmt, args.env, split=args.split, limit=args.limit, seed=args.seed))
    config = GRPOConfig(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        num_generations=args.num_generations,
        per_device_train_batch_size=args.batch_size,
        max_completion_length=args.max_completion_length,
        max_tool_calling_iterations=args.max_tool_calls,
        loss_type=args.loss_type,
        learning_rate=args.learning_rate,
        chat_template_kwargs=template_kwargs,
        seed=args.seed,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=args.cpu,
        bf16=not args.cpu,
    )
    if args.mode == "environment":
        return GRPOTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer, environment_factory=environment_class(args.env))
    rollout = RolloutFunction(max_turn_tokens=args.max_turn_tokens, template_kwargs=template_kwargs, seed=args.seed)
    return GRPOTrainer(model=model, reward_funcs=reward_from_env, args=config, train_dataset=dataset, processing_class=tokenizer, rollout_func=rollout)


if __name__ == "__main__":
    sys.exit(main())
