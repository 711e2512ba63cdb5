"""OpenRLHF (0.11) adapter: the ``agent_func`` module for ``--train.agent_func_path``.

OpenRLHF loads this file (or one written by ``--write``), takes its ``AgentExecutor`` and runs
its real ``MultiTurnAgentExecutor`` loop: one :class:`AgentInstance` per sample, generation with
vLLM token-in/token-out, and a loss mask that is 1 only on the generated ranges. The instance
plays the agentgym episode named by the sample's label (the spec written by
``python -m agentgym.trainers.adapters.export openrlhf``):

* ``reset`` returns the episode's prompt rendered with the policy's chat template, tools
  included (OpenRLHF's own templating passes no tools, so the dataset prompt is replaced);
* ``step`` reads the generated turn, steps the environment and returns its reply already
  chat-formatted: the exact text after the end-of-turn token up to the next generation prompt;
* the reward is a tensor on the final step (0 before), and the episode ends itself when the
  ``max_len`` budget would not allow another turn, so OpenRLHF never stops it unscored.

    --train.agent_func_path "$(python -m agentgym.trainers.adapters openrlhf-agent-func)"

The executor is parameterised per model (chat-template variables, tool display) by writing a
small agent_func file: ``python -m agentgym.trainers.adapters openrlhf-agent-func --write
agent_func.py --template-kwargs '{"enable_thinking": false}'``; the environment comes from each
label.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, cast

import torch
from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

from agentgym.rollouts.chat import ToolMode
from agentgym.rollouts.episode import RolloutSettings, TokenEpisode
from agentgym.trainers.adapters.pool import EnvPool, shared_pool
from agentgym.trainers.adapters.spec import EpisodeSpec

if TYPE_CHECKING:
    from agentgym.env import MadeEnv

__all__ = ["AgentExecutor", "AgentInstance", "make_agent_executor"]


class AgentInstance(AgentInstanceBase):
    """One sample's agentgym episode (OpenRLHF builds one instance per sample, without arguments).

    The executor class made by :func:`make_agent_executor` binds the class attributes.
    """

    tokenizer: ClassVar[Any] = None
    tool_mode: ClassVar[ToolMode] = "auto"
    template_kwargs: ClassVar[Mapping[str, Any]] = {}
    pool: ClassVar[EnvPool] = shared_pool()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._episode: TokenEpisode | None = None
        self._spec: EpisodeSpec | None = None

    async def reset(self, states: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """Start the label's episode; the observation is its prompt, tools included."""
        if self.tokenizer is None:
            raise RuntimeError("AgentInstance has no tokenizer: use the AgentExecutor of this module (or make_agent_executor())")
        spec = EpisodeSpec.from_json(states["label"])
        env = await asyncio.to_thread(self.pool.acquire, spec)
        opening, _ = await asyncio.to_thread(spec.reset, env)
        self._spec = spec
        # OpenRLHF's executor budgets the episode itself (max_len); step() ends it before that runs out.
        settings = RolloutSettings(tool_mode=self.tool_mode, template_kwargs=self.template_kwargs)
        self._episode = TokenEpisode(env, opening, settings.renderer(self.tokenizer, env.unwrapped.tools), settings)
        return {"observation": self._text(self._episode.token_ids)}

    async def step(self, states: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """Step the environment on the generated turn; reward, feedback and ``done`` for the executor."""
        episode = self._episode
        if episode is None or self._spec is None:
            raise RuntimeError("step() before reset()")
        sampling_params = states["sampling_params"]
        action_ids = self._action_ids(states["action_text"])
        # The executor set max_tokens to the whole remaining budget before this generation.
        remaining = int(sampling_params.max_tokens) - len(action_ids)
        content = episode.add_generation(action_ids)
        observation = await asyncio.to_thread(episode.step_env, content)
        feedback = ""
        if observation is not None:
            if remaining <= 0:
                episode.stop()
            else:
                episode.add_observation(observation)
                delta = episode.last_env_delta()
                if remaining - len(delta) > 0:
                    feedback = self._text(delta)
                else:  # no room for another turn: end here, scored, without a reply nobody answers
                    episode.stop()
        done = not episode.wants_generation
        outcome = await asyncio.to_thread(episode.outcome)
        if done:
            self.pool.release(self._spec, cast("MadeEnv", episode.env))  # the environment reset() acquired from the pool
        reward = torch.tensor(outcome.reward if done else 0.0)
        return {
            "rewards": reward,
            "scores": reward,
            "environment_feedback": feedback,
            "done": done,
            "sampling_params": sampling_params,
            "extra_logs": outcome.metrics(),
        }

    def _action_ids(self, action_text: str) -> list[int]:
        """The generated turn's ids, re-encoded from the text the executor passes.

        vLLM leaves the stop token out of the text (but not out of the executor's token ids), so
        the end-of-turn token is restored when the text lacks it.
        """
        assert self._episode is not None
        renderer = self._episode.renderer
        ids = renderer.encode(action_text)
        if not ids or ids[-1] != renderer.eot_token_id:
            ids.append(renderer.eot_token_id)
        return ids

    def _text(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def make_agent_executor(
    *, tool_mode: ToolMode = "auto", template_kwargs: Mapping[str, Any] | None = None, pool: EnvPool | None = None
) -> type[MultiTurnAgentExecutor]:
    """An ``AgentExecutor`` class (no-argument constructor) whose instances render with these options.

    Args:
        tool_mode: how tools are shown to the model (see :class:`agentgym.rollouts.chat.ChatRenderer`).
        template_kwargs: chat-template variables, e.g. ``{"enable_thinking": False}``.
        pool: environments reused across samples of the rollout process (the shared pool by default).
    """
    options = {"tool_mode": tool_mode, "template_kwargs": dict(template_kwargs or {}), "pool": pool or shared_pool()}

    class AgentExecutor(MultiTurnAgentExecutor):
        """OpenRLHF's multi-turn executor, with the instances bound to the rollout's tokenizer."""

        def __init__(self) -> None:
            super().__init__(AgentInstance)
            self._bound: dict[int, type[AgentInstance]] = {}

        async def execute(self, prompt, label, sampling_params, max_length: int, hf_tokenizer, llm_engine, images=None):
            # OpenRLHF builds instances without arguments; the tokenizer only reaches execute().
            key = id(hf_tokenizer)
            if key not in self._bound:
                self._bound[key] = type("AgentInstance", (AgentInstance,), {"tokenizer": hf_tokenizer, **options})
            self.agent_instance_cls = self._bound[key]
            return await super().execute(prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, images)

    return AgentExecutor


AgentExecutor = make_agent_executor()
