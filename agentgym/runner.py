"""Run many model-driven episodes at once and keep their trajectories token-exact.

:func:`run_rollouts` plays ``num_tasks × group_size`` episodes of one environment with a
:class:`~agentgym.models.GenerationBackend`. Every round it

1. asks the backend for one completion per active episode in a single batched ``generate`` call
   (the prompt is the episode's token sequence so far; each episode and turn has its own seed);
2. appends the sampled ids verbatim to the episode's :class:`~agentgym.models.TrajectoryBuilder`
   (loss mask 1, end-of-turn token included);
3. steps the environments with the decoded text in a thread pool;
4. retires the episodes that ended (``done``, ``max_turns``, ``token_budget``) and renders the new
   messages of the others through the chat template as masked token deltas.

Nothing is re-tokenised from decoded text: the trajectory is exactly the sequence the model was
prompted with and sampled. The runner times each phase (:class:`RolloutTiming`) so the share of
wall time spent in generation, in the environments and in rendering can be reported.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from agentgym.env import SPLITS
from agentgym.models import ChatRenderer, Generation, GenerationBackend, SamplingParams, Trajectory, TrajectoryBuilder
from agentgym.parsing import parse_action

__all__ = [
    "Episode",
    "ProgressFn",
    "RolloutConfig",
    "RolloutRunner",
    "RolloutTiming",
    "StopReason",
    "run_rollouts",
    "turn_seed",
]

StopReason = Literal["done", "max_turns", "token_budget"]
ProgressFn = Callable[[int, int], None]


@dataclass(frozen=True)
class RolloutConfig:
    """What to roll out and how to sample.

    Attributes:
        env_id: a registered environment id, e.g. ``"agentgym/Refund-v0"``.
        split: task split the environments draw from.
        task_ids: the tasks, one group each, in this order; default: ``num_tasks`` tasks in an order
            shuffled by ``seed`` (every task once before any repeats).
        num_tasks: number of groups when ``task_ids`` is not given.
        group_size: episodes per task (GRPO groups); members differ only in their sampling seeds.
        seed: base seed. Group ``g`` resets its environments with ``seed + g``; turn ``t`` of episode
            ``e`` samples with :func:`turn_seed` ``(seed, e, t)``.
        max_turns: assistant turns before the environment truncates the episode (None: its default).
        max_new_tokens: sampled tokens per assistant turn at most.
        max_total_tokens: token budget of a whole trajectory, prompt included. A turn samples at most
            what still fits (one token is kept free for a closing end-of-turn token); an episode whose
            next prompt leaves no room stops with ``"token_budget"`` and its trajectory ends after its
            last sampled turn, so it never exceeds the budget (unless the opening prompt alone does).
        temperature: sampling temperature; 0 decodes greedily.
        top_p: nucleus mass in (0, 1].
        env_kwargs: extra keyword arguments for ``gym.make`` (``split`` and ``max_turns`` have their
            own fields).
        env_workers: threads stepping environments in parallel.
        max_concurrent: episodes in flight at once (None: all of them). ``1`` plays the episodes one
            at a time with the same seeds, the baseline that batched generation is measured against.
        template_kwargs: extra chat-template variables (e.g. ``{"enable_thinking": False}``).
    """

    env_id: str
    split: str = "train"
    task_ids: Sequence[str] | None = None
    num_tasks: int = 8
    group_size: int = 1
    seed: int = 0
    max_turns: int | None = None
    max_new_tokens: int = 256
    max_total_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    env_workers: int = 8
    max_concurrent: int | None = None
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {self.split!r}")
        if self.task_ids is not None:
            if isinstance(self.task_ids, str) or not self.task_ids:
                raise ValueError("task_ids must be a non-empty sequence of task id strings")
            object.__setattr__(self, "task_ids", tuple(self.task_ids))
        for name in ("num_tasks", "group_size", "max_new_tokens", "env_workers"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be at least 1; got {getattr(self, name)}")
        if self.max_turns is not None and self.max_turns < 1:
            raise ValueError(f"max_turns must be at least 1; got {self.max_turns}")
        if self.max_total_tokens is not None and self.max_total_tokens < 2:
            raise ValueError(f"max_total_tokens must be at least 2; got {self.max_total_tokens}")
        if self.max_concurrent is not None and self.max_concurrent < 1:
            raise ValueError(f"max_concurrent must be at least 1; got {self.max_concurrent}")
        if self.seed < 0:
            raise ValueError(f"seed must be non-negative; got {self.seed}")
        clashing = sorted({"split", "max_turns"} & set(self.env_kwargs))
        if clashing:
            raise ValueError(f"pass {', '.join(clashing)} as RolloutConfig fields, not in env_kwargs")
        # Validates temperature and top_p with the backend's own rules.
        SamplingParams(temperature=self.temperature, top_p=self.top_p, max_new_tokens=self.max_new_tokens)

    @property
    def num_groups(self) -> int:
        """Number of task groups."""
        return len(self.task_ids) if self.task_ids is not None else self.num_tasks

    @property
    def num_episodes(self) -> int:
        """Total number of episodes: groups × group size."""
        return self.num_groups * self.group_size


@dataclass
class Episode:
    """One finished episode.

    Attributes:
        record: ``env.unwrapped.episode_record()`` plus ``policy`` (the backend's name), ``group``,
            ``member``, ``stop_reason`` and, when the task has one, ``difficulty``.
        trajectory: the token-exact sequence with its loss mask and sampling logprobs.
        group: index of the task group; episodes of a group share a task.
        reward: the episode's reward (``record["reward"]``; 0 when the token budget stopped it).
        stop_reason: ``"done"`` (the environment terminated), ``"max_turns"`` (it truncated) or
            ``"token_budget"``.
        turns: per assistant turn: ``turn``, ``seed``, ``prompt_ids``, ``sampled_ids``, ``logprobs``,
            ``finish_reason``, ``text``, ``tool_calls`` (``name``, ``arguments``, ``id``),
            ``parse_errors``, ``env_messages``, ``env_message_ids`` (the masked delta that follows the
            turn in the trajectory; empty when none does), ``reward``, ``terminated``, ``truncated``,
            ``info``.
        member: index within the group.
    """

    record: dict[str, Any]
    trajectory: Trajectory
    group: int
    reward: float
    stop_reason: StopReason
    turns: list[dict[str, Any]]
    member: int = 0

    def to_dict(self) -> dict[str, Any]:
        """One JSON-ready line: the episode record, the trajectory, and its flat token ids and loss mask."""
        return {
            **self.record,
            "trajectory": self.trajectory.to_dict(),
            "token_ids": list(self.trajectory.token_ids),
            "loss_mask": list(self.trajectory.loss_mask),
        }


@dataclass
class RolloutTiming:
    """Where the wall time of one :meth:`RolloutRunner.run` went.

    Attributes:
        wall_s: the whole run.
        generate_s: inside ``backend.generate``.
        env_s: resetting and stepping environments (the thread-pool phase, as wall time).
        render_s: chat-template rendering and tokenisation of prompts and environment deltas.
        rounds: ``generate`` calls.
        episodes: episodes played.
        sampled_tokens: tokens sampled by the model.
        prompt_tokens: prompt tokens sent to the backend, summed over calls.
    """

    wall_s: float = 0.0
    generate_s: float = 0.0
    env_s: float = 0.0
    render_s: float = 0.0
    rounds: int = 0
    episodes: int = 0
    sampled_tokens: int = 0
    prompt_tokens: int = 0

    @property
    def tokens_per_s(self) -> float:
        """Sampled tokens per second of wall time."""
        return self.sampled_tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def generate_share(self) -> float:
        """Fraction of wall time spent generating."""
        return self.generate_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def env_share(self) -> float:
        """Fraction of wall time spent in the environments."""
        return self.env_s / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> dict[str, float | int]:
        """The fields plus ``tokens_per_s``, ``generate_share`` and ``env_share``."""
        return {
            **asdict(self),
            "tokens_per_s": self.tokens_per_s,
            "generate_share": self.generate_share,
            "env_share": self.env_share,
        }


def turn_seed(seed: int, episode: int, turn: int) -> int:
    """Sampling seed of ``turn`` of ``episode``: independent streams per episode and turn, stable across runs."""
    return int(np.random.SeedSequence([seed, episode, turn]).generate_state(1)[0])


@dataclass(frozen=True)
class _Planned:
    index: int
    group: int
    member: int
    task_id: str
    env_seed: int


class _Live:
    """An episode in flight."""

    def __init__(self, plan: _Planned, env: gym.Env, builder: TrajectoryBuilder) -> None:
        self.plan = plan
        self.env = env
        self.builder = builder
        self.turns: list[dict[str, Any]] = []


def _make_env(config: RolloutConfig) -> gym.Env:
    # Importing agentgym.env (above) ran agentgym/__init__, which registered the environments.
    if config.env_id not in gym.registry:
        known = ", ".join(k for k in gym.registry if k.startswith("agentgym/"))
        raise ValueError(f"unknown environment {config.env_id!r}; known: {known}")
    extra = {} if config.max_turns is None else {"max_turns": config.max_turns}
    try:
        return gym.make(config.env_id, split=config.split, **config.env_kwargs, **extra)
    except TypeError as exc:  # a wrong env_kwargs key
        raise ValueError(f"cannot make {config.env_id}: {exc}") from None


def _plan(config: RolloutConfig, available: Sequence[str]) -> list[_Planned]:
    if config.task_ids is not None:
        unknown = sorted(set(config.task_ids) - set(available))
        if unknown:
            raise ValueError(f"unknown task ids for {config.env_id} ({config.split}): {', '.join(unknown[:5])}")
        tasks = list(config.task_ids)
    else:
        order = np.random.default_rng(config.seed).permutation(len(available))
        tasks = [available[int(order[g % len(available)])] for g in range(config.num_tasks)]
    return [
        _Planned(g * config.group_size + m, g, m, task_id, config.seed + g)
        for g, task_id in enumerate(tasks)
        for m in range(config.group_size)
    ]


class RolloutRunner:
    """Plays episodes with one backend; keeps the timing of its last run in :attr:`last_timing`.

    Args:
        backend: the policy.
    """

    def __init__(self, backend: GenerationBackend) -> None:
        self.backend = backend
        self.last_timing: RolloutTiming | None = None

    def run(self, config: RolloutConfig, *, progress: ProgressFn | None = None) -> list[Episode]:
        """Play ``config.num_episodes`` episodes; see :func:`run_rollouts`."""
        timing = RolloutTiming()
        started = time.perf_counter()
        first = _make_env(config)
        envs = [first]
        try:
            plan = _plan(config, first.unwrapped.task_ids)
            renderer = ChatRenderer(
                self.backend.tokenizer, tools=first.unwrapped.tools, template_kwargs=config.template_kwargs
            )
            slots = min(len(plan), config.max_concurrent or len(plan))
            envs.extend(_make_env(config) for _ in range(slots - 1))
            with ThreadPoolExecutor(max_workers=min(config.env_workers, slots)) as pool:
                episodes = _Run(self.backend, config, renderer, pool, timing, progress).play(plan, envs)
        finally:
            for env in envs:
                env.close()
        timing.wall_s = time.perf_counter() - started
        timing.episodes = len(episodes)
        self.last_timing = timing
        return episodes


class _Run:
    """The state of one :meth:`RolloutRunner.run`."""

    def __init__(
        self,
        backend: GenerationBackend,
        config: RolloutConfig,
        renderer: ChatRenderer,
        pool: ThreadPoolExecutor,
        timing: RolloutTiming,
        progress: ProgressFn | None,
    ) -> None:
        self.backend = backend
        self.config = config
        self.renderer = renderer
        self.pool = pool
        self.timing = timing
        self.progress = progress
        self.budget = config.max_total_tokens
        self.finished: list[Episode] = []

    def play(self, plan: Sequence[_Planned], envs: list[gym.Env]) -> list[Episode]:
        pending = deque(plan)
        free = list(envs)
        live: list[_Live] = []
        self._report()
        while pending or live:
            starting = [(pending.popleft(), free.pop()) for _ in range(min(len(free), len(pending)))]
            live.extend(e for e in self._start(starting) if not self._out_of_budget(e, e.builder.build()))
            if live:
                live = self._round(live)
            busy = {id(e.env) for e in live}
            free = [env for env in envs if id(env) not in busy]
            self._report()
        return sorted(self.finished, key=lambda e: (e.group, e.member))

    def _report(self) -> None:
        if self.progress is not None:
            self.progress(len(self.finished), self.config.num_episodes)

    def _start(self, starting: Sequence[tuple[_Planned, gym.Env]]) -> list[_Live]:
        def reset(item: tuple[_Planned, gym.Env]) -> list[dict[str, Any]]:
            plan, env = item
            observation, _ = env.reset(seed=plan.env_seed, options={"task_id": plan.task_id})
            return observation

        tick = time.perf_counter()
        observations = list(self.pool.map(reset, starting))
        tock = time.perf_counter()
        live = [_Live(plan, env, TrajectoryBuilder(self.renderer, obs)) for (plan, env), obs in zip(starting, observations, strict=True)]
        self.timing.env_s += tock - tick
        self.timing.render_s += time.perf_counter() - tock
        return live

    def _room(self, length: int) -> int:
        """Tokens the next turn may sample; one stays free for a closing end-of-turn token."""
        if self.budget is None:
            return self.config.max_new_tokens
        return min(self.config.max_new_tokens, self.budget - length - 1)

    def _out_of_budget(self, episode: _Live, trajectory: Trajectory) -> bool:
        """Retire ``episode`` with ``trajectory`` when its next prompt leaves no room to sample."""
        if self._room(len(episode.builder)) >= 1:
            return False
        self._finish(episode, trajectory, "token_budget")
        return True

    def _round(self, live: list[_Live]) -> list[_Live]:
        """One batched generation for every live episode, then the environment steps; returns those still live."""
        prompts = [e.builder.token_ids for e in live]
        params = [
            SamplingParams(
                temperature=self.config.temperature,
                top_p=self.config.top_p,
                max_new_tokens=self._room(len(prompt)),
                seed=turn_seed(self.config.seed, e.plan.index, len(e.turns)),
                stop_token_ids=(self.renderer.eot_token_id,),
            )
            for e, prompt in zip(live, prompts, strict=True)
        ]
        tick = time.perf_counter()
        generations = self.backend.generate(prompts, params)
        self.timing.generate_s += time.perf_counter() - tick
        self.timing.rounds += 1
        self.timing.prompt_tokens += sum(map(len, prompts))
        self.timing.sampled_tokens += sum(len(g.token_ids) for g in generations)

        tick = time.perf_counter()
        for episode, generation in zip(live, generations, strict=True):
            episode.builder.add_generation(generation)
        self.timing.render_s += time.perf_counter() - tick

        tick = time.perf_counter()
        steps = list(self.pool.map(lambda e, g: e.env.step(g.text), live, generations))
        self.timing.env_s += time.perf_counter() - tick

        tick = time.perf_counter()
        still: list[_Live] = []
        for episode, prompt, param, generation, step in zip(live, prompts, params, generations, steps, strict=True):
            if self._advance(episode, prompt, param, generation, step):
                still.append(episode)
        self.timing.render_s += time.perf_counter() - tick
        return still

    def _advance(
        self,
        episode: _Live,
        prompt: list[int],
        params: SamplingParams,
        generation: Generation,
        step: tuple[list[dict[str, Any]], float, bool, bool, dict[str, Any]],
    ) -> bool:
        """Record the turn and append the environment's reply; False when the episode ended."""
        observation, reward, terminated, truncated, info = step
        turn = len(episode.turns)
        parsed = parse_action(generation.text, id_prefix=f"call_{turn + 1}")  # the ids the environment gives
        record: dict[str, Any] = {
            "turn": turn,
            "seed": params.seed,
            "prompt_ids": tuple(prompt),
            "sampled_ids": generation.token_ids,
            "logprobs": generation.logprobs,
            "finish_reason": generation.finish_reason,
            "text": generation.text,
            "tool_calls": [{"name": c.name, "arguments": c.arguments, "id": c.id} for c in parsed.tool_calls],
            "parse_errors": list(parsed.errors),
            "env_messages": observation,
            "env_message_ids": (),
            "reward": float(reward),
            "terminated": bool(terminated),
            "truncated": bool(truncated),
            "info": info,
        }
        episode.turns.append(record)
        if terminated or truncated:
            self._finish(episode, episode.builder.build(), "done" if terminated else "max_turns")
            return False
        # Only an episode that may stop for its budget needs the sequence before the delta.
        before = episode.builder.build() if self.budget is not None else None
        episode.builder.add_messages(observation)
        if before is not None and self._out_of_budget(episode, before):
            return False
        record["env_message_ids"] = episode.builder.build().segments[-1].token_ids
        return True

    def _finish(self, episode: _Live, trajectory: Trajectory, stop_reason: StopReason) -> None:
        plan = episode.plan
        record = episode.env.unwrapped.episode_record()
        record.update(policy=self.backend.name, group=plan.group, member=plan.member, stop_reason=stop_reason)
        difficulty = (episode.env.unwrapped.task or {}).get("difficulty")
        if difficulty is not None:
            record["difficulty"] = difficulty
        self.finished.append(
            Episode(
                record=record,
                trajectory=trajectory,
                group=plan.group,
                reward=float(record["reward"]),
                stop_reason=stop_reason,
                turns=episode.turns,
                member=plan.member,
            )
        )


def run_rollouts(
    backend: GenerationBackend, config: RolloutConfig, *, progress: ProgressFn | None = None
) -> list[Episode]:
    """Play ``config.num_tasks × config.group_size`` episodes concurrently.

    One batched ``backend.generate`` call per round covers every active episode; the environments
    step in a thread pool. Sampling seeds come from :func:`turn_seed` ``(config.seed, episode, turn)``,
    so group members differ but reruns are identical. ``progress(finished, total)`` is called at the
    start and after every round. Episodes are returned ordered by (group, member). Use
    :class:`RolloutRunner` to also get the timing of the run.
    """
    return RolloutRunner(backend).run(config, progress=progress)
