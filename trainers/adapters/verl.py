"""verl (0.9) adapter: an agent loop that plays one agentgym episode per sample.

verl builds a new agent-loop object for every sample (``hydra.utils.instantiate`` of the
registered config), so :class:`AgentGymAgentLoop` owns its episode: it rebuilds the episode from
the row's ``extra_info`` (written by ``python -m agentgym.trainers.adapters.export verl``),
generates through verl's server manager token-in/token-out, steps the environment, and returns
the response tokens with ``response_mask`` 1 exactly on sampled tokens and ``reward_score`` set,
so verl needs no reward function. verl's own tool machinery (``BaseTool`` lives for one call;
nested argument schemas are dropped) is not used: the environment runs the tools.

Registration: ``actor_rollout_ref.rollout.agent.agent_loop_config_path`` = the path printed by
``python -m agentgym.trainers.adapters verl-agent-loop`` (the YAML next to this module), and the
rows' ``agent_name`` column (``agentgym``) selects the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput
from verl.utils.profiler import simple_timer

from agentgym.rollouts.chat import ToolMode
from agentgym.rollouts.episode import RolloutSettings, TokenEpisode
from agentgym.trainers.adapters.pool import EnvPool, shared_pool
from agentgym.trainers.adapters.spec import SPEC_KEY, EpisodeSpec

__all__ = ["AGENT_LOOP_CONFIG", "AgentGymAgentLoop", "compute_score"]

AGENT_LOOP_CONFIG = Path(__file__).resolve().with_name("verl_agent_loop.yaml")
"""The agent-loop registration YAML (``rollout.agent.agent_loop_config_path``)."""


class AgentGymAgentLoop(AgentLoopBase):
    """verl agent loop for agentgym environments (registered as ``agentgym``).

    Keyword arguments beyond verl's come from the registration YAML:

    Args:
        tool_mode: how tools are shown to the model (see :class:`agentgym.rollouts.chat.ChatRenderer`).
        template_kwargs: chat-template variables; defaults to ``data.apply_chat_template_kwargs``.
        pool: environments reused across samples of this worker process (the shared pool by default).
    """

    def __init__(
        self, *args: Any, tool_mode: ToolMode = "auto", template_kwargs: Mapping[str, Any] | None = None, pool: EnvPool | None = None, **kwargs: Any
    ) -> None:
        kwargs.pop("tools", None)  # verl's tool list: agentgym tools live in the environment
        super().__init__(*args, **kwargs)
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)
        self.tool_mode = tool_mode
        self.template_kwargs = dict(template_kwargs if template_kwargs is not None else self.apply_chat_template_kwargs)
        self.pool = pool or shared_pool()

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """Play the episode of one dataset row and return it in verl's format."""
        spec = EpisodeSpec.from_row(kwargs)
        metrics: dict[str, Any] = {}
        env = await asyncio.to_thread(self.pool.acquire, spec)
        try:
            opening, _ = await asyncio.to_thread(spec.reset, env)
            # verl budgets the response: every turn may use what is left of it.
            settings = RolloutSettings(max_new_tokens=self.response_length, tool_mode=self.tool_mode, template_kwargs=self.template_kwargs)
            episode = TokenEpisode(env, opening, settings.renderer(self.tokenizer, env.unwrapped.tools), settings)
            episode.cap_response(self.response_length)
            if episode.prompt_length > self.prompt_length:
                raise ValueError(
                    f"{spec.env_id} task {spec.task_id!r}: the prompt has {episode.prompt_length} tokens with the tool "
                    f"descriptions, more than rollout.prompt_length={self.prompt_length}; raise data.max_prompt_length"
                )
            logprobs_reported = True
            # One id for the whole episode (sticky routing, prefix cache); verl's per-sample
            # priority makes it unique and reproducible under full determinism, as in its own loops.
            request_id = f"det-{int(kwargs.get('priority', 0))}" if self.rollout_config.get("full_determinism", False) else uuid4().hex
            while episode.wants_generation:
                with simple_timer("generate_sequences", metrics):
                    output = await self.server_manager.generate(
                        request_id=request_id, prompt_ids=episode.token_ids, sampling_params={**sampling_params, "max_tokens": episode.room()}
                    )
                logprobs_reported &= output.log_probs is not None
                content = episode.add_generation(output.token_ids, output.log_probs)
                with simple_timer("tool_calls", metrics):
                    observation = await asyncio.to_thread(episode.step_env, content)
                if observation is not None:
                    episode.add_observation(observation)
            tokens = episode.split()
            num_turns = sum(1 for m in episode.trajectory().messages if m["role"] != "system")
            outcome = await asyncio.to_thread(episode.outcome)
        finally:
            self.pool.release(spec, env)

        return AgentLoopOutput(
            prompt_ids=tokens.prompt_ids,
            response_ids=tokens.response_ids,
            response_mask=tokens.response_mask,
            response_logprobs=tokens.response_logprobs if logprobs_reported else None,
            reward_score=outcome.reward,
            num_turns=num_turns,
            metrics=metrics,
            # turn_scores/tool_rewards keep the columns ToolAgentLoop produces; reward_extra_info
            # becomes per-sample columns in verl's batch (logged per data source in validation).
            extra_fields={"turn_scores": [], "tool_rewards": [], "reward_extra_info": outcome.metrics()},
        )


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    """Fallback ``reward.custom_reward_function``: the reward the agent loop already computed.

    verl skips reward functions for samples whose agent loop set ``reward_score``; this function
    covers configurations that call one anyway. The reward cannot be recomputed from the decoded
    text (it depends on the environment's state), so rows that did not go through
    :class:`AgentGymAgentLoop` are an error.
    """
    info = extra_info or {}
    nested = info.get("reward_extra_info")
    metrics = nested if isinstance(nested, dict) else info
    if "agentgym_reward" not in metrics:
        raise ValueError(
            f"no agentgym reward for this {data_source} sample: select the agentgym agent loop "
            f"(dataset column agent_name=agentgym, exported with `python -m agentgym.trainers.adapters.export verl`; spec key {SPEC_KEY!r})"
        )
    return {"score": float(metrics["agentgym_reward"]), **{k: float(v) for k, v in metrics.items() if k.startswith("agentgym_")}}
