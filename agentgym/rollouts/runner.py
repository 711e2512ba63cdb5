"""Run many model-driven episodes at once and keep their trajectories token-exact.

:func:`run_rollouts` plays ``num_tasks × group_size`` episodes of one environment with a policy
backend. Each episode is a :class:`~agentgym.rollouts.episode.TokenEpisode` (the one episode driver every
caller shares); the runner feeds them to the backend as a stream:

1. every episode that wants a turn submits its token sequence so far (each episode and turn has
   its own seed); the backend batches them continuously, reusing cached keys and values where it
   can (:class:`~agentgym.models.hf.HFBackend`);
2. as turns finish, their sampled ids go verbatim into the episode (loss mask 1, end-of-turn
   token included) and the environments step on the decoded text in a thread pool;
3. episodes that ended (``done``, ``max_turns``, ``token_budget``) retire and free their
   environment for the next planned episode; the others render the environment's reply as a
   masked token delta and submit their next turn.

Nothing is re-tokenised from decoded text: the trajectory is exactly the sequence the model was
prompted with and sampled. By default the runner waits for the environment steps of the turns that
finished together before it asks the backend for more, so the batches (and so the floating-point
rounding) depend only on the seeds: reruns are identical. ``overlap_env=True`` lets generation go
on while environments step, which pays off when steps are slow (code execution) at the price of
that reproducibility. The runner times each phase (:class:`RolloutTiming`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym
import numpy as np

from agentgym.env import agent_env, check_task_ids
from agentgym.envs.registration import make_env
from agentgym.models import Generation, GenerationBackend
from agentgym.models.backend import as_streaming
from agentgym.records import ChatMessage, EpisodeRecord, ModelEpisodeRecord, TrajectoryRecord, TurnRecord
from agentgym.rollouts.chat import ChatRenderer
from agentgym.rollouts.episode import StopReason, TokenEpisode, turn_seed
from agentgym.rollouts.settings import RolloutConfig
from agentgym.rollouts.trajectory import Trajectory
from agentgym.seeding import derive_seed
from agentgym.tools import InfraError

if TYPE_CHECKING:
    from agentgym.env import MadeEnv

__all__ = [
    "Episode",
    "EpisodeFn",
    "ProgressFn",
    "RolloutConfig",
    "RolloutProgress",
    "RolloutRunner",
    "RolloutTiming",
    "StopReason",
    "run_rollouts",
    "turn_seed",
]


@dataclass(frozen=True)
class RolloutProgress:
    """How far a run is, reported after every generation round (episodes finish together, so a
    count of finished episodes alone would stand still for most of a run).

    Attributes:
        finished: episodes finished (episodes skipped as already done count).
        total: episodes of the run.
        turns: assistant turns played so far, in finished and live episodes.
        sampled_tokens: tokens sampled so far in this run.
        work: ``finished`` plus, for each live episode, the share of its turn limit it has played
            (below 1): an estimate in episodes that moves with every turn.
    """

    finished: int
    total: int
    turns: int
    sampled_tokens: int
    work: float


ProgressFn = Callable[[RolloutProgress], None]
EpisodeFn = Callable[["Episode"], None]


@dataclass
class Episode:
    """One finished episode.

    Attributes:
        record: ``env.unwrapped.episode_record()`` plus ``policy`` (the backend's name), ``group``,
            ``member``, ``stop_reason``, ``error`` when the episode failed, and, when the task has
            them, ``difficulty`` and ``template`` (:class:`~agentgym.records.ModelEpisodeRecord`).
        trajectory: the token-exact sequence with its loss mask and sampling logprobs.
        group: index of the task group; episodes of a group share a task.
        reward: the episode's reward (``record["reward"]``; 0 when the token budget stopped it).
        stop_reason: ``"done"`` (the environment terminated), ``"max_turns"`` (it truncated),
            ``"token_budget"``, ``"error"`` (the environment raised on a turn or its reply could
            not be tokenized; ``record["error"]`` says what, and the reward is 0), or
            ``"infra_error"`` (likewise, for a failure of the machinery behind the environment, an
            :class:`~agentgym.tools.InfraError`: the reward 0 is not the model's; see
            :attr:`infra_error`).
        turns: per assistant turn: ``turn``, ``seed``, ``prompt_ids``, ``sampled_ids``, ``logprobs``,
            ``finish_reason``, ``text``, ``tool_calls`` (``name``, ``arguments``, ``id``),
            ``parse_errors``, ``env_messages``, ``env_message_ids`` (the masked delta that follows the
            turn in the trajectory; empty when none does), ``reward``, ``terminated``, ``truncated``,
            ``info`` (:class:`~agentgym.records.TurnRecord`).
        member: index within the group.
    """

    record: ModelEpisodeRecord
    trajectory: Trajectory
    group: int
    reward: float
    stop_reason: StopReason
    turns: list[TurnRecord]
    member: int = 0

    @property
    def infra_error(self) -> bool:
        """Whether the machinery failed under this episode: its reward says nothing of the model."""
        return self.stop_reason == "infra_error"

    def to_dict(self) -> TrajectoryRecord:
        """One JSON-ready line: the episode record, the trajectory, and its flat token ids and loss mask
        (:class:`~agentgym.records.TrajectoryRecord`, less the ``tokenizer`` that ``agentgym eval`` adds)."""
        return {
            **self.record,
            "trajectory": self.trajectory.to_dict(),
            "token_ids": list(self.trajectory.token_ids),
            "loss_mask": list(self.trajectory.loss_mask),
        }

    @classmethod
    def from_dict(cls, line: Mapping[str, Any]) -> Episode:
        """The episode of a line :meth:`to_dict` wrote (``agentgym eval --out``; its ``tokenizer`` is
        dropped). ``turns`` is empty: the line does not keep them."""
        record = cast("ModelEpisodeRecord", {k: v for k, v in line.items() if k not in ("trajectory", "token_ids", "loss_mask", "tokenizer")})
        return cls(
            record=record,
            trajectory=Trajectory.from_dict(line["trajectory"]),
            group=int(record["group"]),
            reward=float(record["reward"]),
            stop_reason=record["stop_reason"],
            turns=[],
            member=int(record["member"]),
        )


@dataclass
class RolloutTiming:
    """Where the wall time of one :meth:`RolloutRunner.run` went.

    Attributes:
        wall_s: the whole run.
        generate_s: waiting for the backend (``submit`` and ``advance``).
        prefill_s: of that, running prompt tokens through the model (local backend only).
        decode_s: of that, sampling new tokens (local backend only).
        env_s: resetting and stepping environments, as wall time the runner waited for them.
        render_s: chat-template rendering and tokenisation of prompts and environment deltas.
        rounds: ``advance`` calls.
        episodes: episodes played.
        sampled_tokens: tokens sampled by the model.
        prompt_tokens: prompt tokens sent to the backend, summed over requests.
        reused_tokens: of those, tokens whose keys and values the backend reused from its cache.
    """

    wall_s: float = 0.0
    generate_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    env_s: float = 0.0
    render_s: float = 0.0
    rounds: int = 0
    episodes: int = 0
    sampled_tokens: int = 0
    prompt_tokens: int = 0
    reused_tokens: int = 0

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
        return {**asdict(self), "tokens_per_s": self.tokens_per_s, "generate_share": self.generate_share, "env_share": self.env_share}


@dataclass(frozen=True)
class _Planned:
    index: int
    group: int
    member: int
    task_id: str
    env_seed: int


@dataclass(eq=False)
class _Live:
    """An episode in flight."""

    plan: _Planned
    episode: TokenEpisode


def _make_env(config: RolloutConfig) -> MadeEnv:
    extra = {} if config.max_turns is None else {"max_turns": config.max_turns}
    return make_env(config.env_id, split=config.split, **config.env_kwargs, **extra)


def _plan(config: RolloutConfig, available: Sequence[str]) -> list[_Planned]:
    if config.task_ids is not None:
        tasks = check_task_ids(config.task_ids, available, source=f"{config.env_id} ({config.split})")
    else:
        order = np.random.default_rng(config.seed).permutation(len(available))
        tasks = [available[int(order[g % len(available)])] for g in range(config.num_tasks)]

    def env_seed(group: int, member: int) -> int:
        if config.distinct_env_seeds:
            return derive_seed(config.seed, group, member)
        return config.seed + group

    return [_Planned(g * config.group_size + m, g, m, task_id, env_seed(g, m)) for g, task_id in enumerate(tasks) for m in range(config.group_size)]


class RolloutRunner:
    """Plays episodes with one backend; keeps the timing of its last run in :attr:`last_timing`.

    Args:
        backend: the policy (any :class:`~agentgym.models.GenerationBackend`; one that batches
            continuously is driven as a stream).
    """

    def __init__(self, backend: GenerationBackend) -> None:
        self.backend = backend
        self.last_timing: RolloutTiming | None = None

    def run(
        self,
        config: RolloutConfig,
        *,
        progress: ProgressFn | None = None,
        on_episode: EpisodeFn | None = None,
        skip: Collection[tuple[int, int]] = (),
        infra_retries: int = 0,
    ) -> list[Episode]:
        """Play ``config.num_episodes`` episodes; see :func:`run_rollouts`.

        ``on_episode`` is called with each episode as it finishes (so a caller can write it at once);
        the episodes whose ``(group, member)`` is in ``skip`` are not played (they were finished by
        an earlier, interrupted run) and are left out of the result; the others keep their seeds.
        ``infra_retries``: times an episode the machinery failed under (``stop_reason ==
        "infra_error"``) is played again, with the same task and seeds; the last try is returned
        (and given to ``on_episode``), its record counting the replays in ``infra_retries``.
        """
        if infra_retries < 0:
            raise ValueError(f"infra_retries must be at least 0; got {infra_retries}")
        timing = RolloutTiming()
        started = time.perf_counter()
        # A run starts from an empty key/value cache, so what an earlier run left there cannot change
        # the floating-point path (reruns stay identical to the last bit).
        clear_cache = getattr(self.backend, "clear_cache", None)
        if callable(clear_cache):
            clear_cache()
        engine = getattr(self.backend, "engine", None)
        stats_before = dict(asdict(engine.stats)) if engine is not None else None
        first = _make_env(config)
        envs = [first]
        try:
            plan = [p for p in _plan(config, first.unwrapped.task_ids) if (p.group, p.member) not in skip]
            renderer = config.renderer(self.backend.tokenizer, first.unwrapped.tools)
            slots = max(1, min(len(plan), config.max_concurrent or len(plan)))
            envs.extend(_make_env(config) for _ in range(slots - 1))
            with ThreadPoolExecutor(max_workers=min(config.env_workers, slots)) as pool:
                # An episode that will be played again reaches on_episode only in its last try.
                deliver = None if on_episode is None else _unless_retried(on_episode, infra_retries)
                run = _Run(self.backend, config, renderer, pool, timing, progress, deliver, skipped=config.num_episodes - len(plan))
                episodes = run.play(plan, envs)
                for _ in range(infra_retries):
                    failed = {(e.group, e.member): e for e in episodes if e.infra_error}
                    if not failed:
                        break
                    again = _Run(self.backend, config, renderer, pool, timing, None, deliver, skipped=0).play(
                        [p for p in plan if (p.group, p.member) in failed], envs
                    )
                    for episode in again:
                        episode.record["infra_retries"] = failed[episode.group, episode.member].record.get("infra_retries", 0) + 1
                    replayed = {(e.group, e.member): e for e in again}
                    episodes = [replayed.get((e.group, e.member), e) for e in episodes]
                if on_episode is not None and infra_retries:
                    for episode in episodes:
                        if episode.infra_error:
                            on_episode(episode)
        finally:
            for env in envs:
                env.close()
        if engine is not None and stats_before is not None and getattr(self.backend, "reuse_cache", True):
            after = asdict(engine.stats)
            timing.prefill_s = after["prefill_s"] - stats_before["prefill_s"]
            timing.decode_s = after["decode_s"] - stats_before["decode_s"]
            timing.reused_tokens = after["reused_tokens"] - stats_before["reused_tokens"]
        timing.wall_s = time.perf_counter() - started
        timing.episodes = len(episodes)
        self.last_timing = timing
        return episodes


def _unless_retried(on_episode: EpisodeFn, infra_retries: int) -> EpisodeFn:
    """``on_episode`` for every episode but those the machinery failed under while retries remain."""

    def deliver(episode: Episode) -> None:
        if not (infra_retries and episode.infra_error):
            on_episode(episode)

    return deliver


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
        on_episode: EpisodeFn | None,
        skipped: int,
    ) -> None:
        self.backend = backend
        self.stream = as_streaming(backend)
        forget = getattr(backend, "forget", None)  # backends with a key/value cache may drop what is over
        self.forget: Callable[[Hashable], None] | None = forget if callable(forget) else None
        self.config = config
        self.renderer = renderer
        self.pool = pool
        self.timing = timing
        self.progress = progress
        self.on_episode = on_episode
        self.skipped = skipped
        self.turns_played = 0
        self.finished: list[Episode] = []
        self.live: dict[Hashable, _Live] = {}

    def play(self, plan: Sequence[_Planned], envs: Sequence[gym.Env]) -> list[Episode]:
        pending = deque(plan)
        free = list(envs)
        stepping: dict[Future[Any], _Live] = {}
        self._report()
        while pending or self.live:
            starting = [(pending.popleft(), free.pop()) for _ in range(min(len(free), len(pending)))]
            for live in self._start(starting):
                self._next_turn(live, free)
            if self.stream.in_flight:
                tick = time.perf_counter()
                finished = self.stream.advance()
                self.timing.generate_s += time.perf_counter() - tick
                self.timing.rounds += 1
                for key, generation in finished:
                    live = self.live[key]
                    stepping[self.pool.submit(live.episode.step_env, self._add_generation(live, generation))] = live
            if stepping:
                tick = time.perf_counter()
                if not self.config.overlap_env:
                    done, _ = wait(stepping)  # all of them: the next batch must not depend on timing
                elif self.stream.in_flight:
                    done = {f for f in stepping if f.done()}  # generation goes on meanwhile
                else:
                    done, _ = wait(stepping, return_when=FIRST_COMPLETED)
                self.timing.env_s += time.perf_counter() - tick
                tick = time.perf_counter()
                for future in [f for f in stepping if f in done]:  # in submission order
                    live = stepping.pop(future)
                    observation = future.result()
                    if observation is not None:
                        live.episode.add_observation(observation)
                    self._next_turn(live, free)
                self.timing.render_s += time.perf_counter() - tick
            self._report()
        return sorted(self.finished, key=lambda e: (e.group, e.member))

    def _report(self) -> None:
        if self.progress is None:
            return
        finished = self.skipped + len(self.finished)
        # A live episode counts the share of its turn limit it has played, short of a whole one.
        playing = sum(min(len(live.episode.turns) / max(agent_env(live.episode.env).max_turns, 1), 0.99) for live in self.live.values())
        self.progress(RolloutProgress(finished, self.config.num_episodes, self.turns_played, self.timing.sampled_tokens, finished + playing))

    def _start(self, starting: Sequence[tuple[_Planned, gym.Env]]) -> list[_Live]:
        def reset(item: tuple[_Planned, gym.Env]) -> list[ChatMessage]:
            plan, env = item
            observation, _ = env.reset(seed=plan.env_seed, options={"task_id": plan.task_id})
            return observation

        tick = time.perf_counter()
        observations = list(self.pool.map(reset, starting))
        tock = time.perf_counter()
        started = [
            _Live(plan, TokenEpisode(env, observation, self.renderer, self.config)) for (plan, env), observation in zip(starting, observations, strict=True)
        ]
        self.timing.env_s += tock - tick
        self.timing.render_s += time.perf_counter() - tock
        return started

    def _next_turn(self, live: _Live, free: list[gym.Env]) -> None:
        """Submit the episode's next turn, or retire it when it is over."""
        key = live.plan.index
        episode = live.episode
        if episode.over:
            self.live.pop(key, None)
            if self.forget is not None:  # its cached conversation will not be continued
                self.forget(key)
            self._finish(live)
            free.append(episode.env)
            return
        self.live[key] = live
        params = episode.sampling_params(turn_seed(self.config.seed, key, len(episode.turns)))
        prompt = [*episode.token_ids, *episode.opening_ids]  # an explored turn's given opening is sampled from
        self.timing.prompt_tokens += len(prompt)
        self.stream.submit(key, prompt, params)

    def _add_generation(self, live: _Live, generation: Generation) -> str:
        """Append the sampled turn to its episode; the text the environment will read."""
        tick = time.perf_counter()
        self.timing.sampled_tokens += len(generation.token_ids)
        self.turns_played += 1
        opening = live.episode.opening_ids  # given tokens: probability 1 under the sampling that chose them
        content = live.episode.add_generation((*opening, *generation.token_ids), (0.0,) * len(opening) + tuple(generation.logprobs))
        self.timing.render_s += time.perf_counter() - tick
        return content

    def _finish(self, live: _Live) -> None:
        plan, episode = live.plan, live.episode
        assert episode.stop_reason is not None
        stop_reason, error = episode.stop_reason, episode.error
        try:
            base = agent_env(episode.env).episode_record()
        except Exception as exc:  # noqa: BLE001 - the environment is out of reach (a remote one died): record what we saw
            # An episode already ended by its machinery stays an infra error.
            stop_reason = "infra_error" if isinstance(exc, InfraError) or stop_reason == "infra_error" else "error"
            error = error or f"the environment's record could not be read: {type(exc).__name__}: {exc}"
            base = self._lost_record(plan, episode)
        record: ModelEpisodeRecord = {**base, "policy": self.backend.name, "group": plan.group, "member": plan.member, "stop_reason": stop_reason}
        if error is not None:  # the episode failed on its own: a failed episode, the batch goes on
            record.update({"reward": 0.0, "reward_components": {}, "reward_reason": error, "success": False, "error": error})
        task = agent_env(episode.env).task or {}
        # For breakdowns, when the task has them.
        if task.get("difficulty") is not None:
            record["difficulty"] = task["difficulty"]
        if task.get("template") is not None:
            record["template"] = task["template"]
        finished = Episode(
            record=record,
            trajectory=episode.trajectory(),
            group=plan.group,
            reward=float(record["reward"]),
            stop_reason=stop_reason,
            turns=episode.turns,
            member=plan.member,
        )
        self.finished.append(finished)
        if self.on_episode is not None:
            self.on_episode(finished)

    def _lost_record(self, plan: _Planned, episode: TokenEpisode) -> EpisodeRecord:
        """An episode record from the driver's side alone, in the environment's record format."""
        config = self.config
        return {
            "env_id": config.env_id,
            "env_version": None,
            "env_kwargs": {},
            "task_id": plan.task_id,
            "split": config.split,
            "seed": plan.env_seed,
            "messages": episode.messages(),
            "steps": [],
            "reward": 0.0,
            "reward_components": {},
            "reward_reason": "",
            "success": False,
            "turns": len(episode.turns),
            "terminated": False,
            "truncated": True,
        }


def run_rollouts(backend: GenerationBackend, config: RolloutConfig, *, progress: ProgressFn | None = None) -> list[Episode]:
    """Play ``config.num_tasks × config.group_size`` episodes concurrently.

    The backend generates every episode's turns as a stream (see the module docstring); the
    environments step in a thread pool. Sampling seeds come from :func:`turn_seed`
    ``(config.seed, episode, turn)``, so group members differ but reruns are identical.
    ``progress`` gets a :class:`RolloutProgress` at the start and after every round. Episodes are
    returned ordered by (group, member). Use :class:`RolloutRunner` to also get the timing of the run.
    """
    return RolloutRunner(backend).run(config, progress=progress)
