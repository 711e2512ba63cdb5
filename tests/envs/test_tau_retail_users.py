"""TauRetail-v0's LLM customer (``user="llm"``): its prompt, sampling, end, cache and failures.

No model generates here: :class:`ScriptedBackend` answers with given texts through the bundled
model's real tokenizer, so prompts are rendered exactly as with the real model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import agentgym  # noqa: F401 - registers the environments
from agentgym.envs.tau_retail import llm_user
from agentgym.envs.tau_retail.llm_user import FALLBACK, GREETING, ResponseCache
from agentgym.models import DEFAULT_MODEL, Generation, SamplingParams
from agentgym.parsing import format_tool_call
from agentgym.rollouts.io import to_json_line

ENV_ID = "agentgym/TauRetail-v0"
TASK_ID = "retail-dev-0"


class ScriptedBackend:
    """A generation backend whose completions are given texts; an exception in the list is raised
    instead. Every call's decoded prompt and sampling parameters are kept in ``calls``."""

    def __init__(self, tokenizer: Any, replies: Sequence[str | Exception] = (), *, name: str = "fake:customer", default: str = "Okay.") -> None:
        self.tokenizer = tokenizer
        self.name = name
        self.replies = list(replies)
        self.default = default
        self.calls: list[tuple[str, SamplingParams]] = []

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        [prompt] = prompts
        self.calls.append((self.tokenizer.decode(list(prompt)), params))
        reply = self.replies.pop(0) if self.replies else self.default
        if isinstance(reply, Exception):
            raise reply
        return [Generation((), (), reply, "stop")]


def _make(backend: ScriptedBackend, **kwargs: Any) -> gym.Env:
    return gym.make(ENV_ID, split="val", user="llm", user_backend=backend, **kwargs)


def _task(env: gym.Env) -> dict[str, Any]:
    return next(t for t in env.unwrapped.tasks if t["task_id"] == TASK_ID)


def test_the_prompt_holds_the_instruction_and_the_rules_and_replies_are_sampled_as_asked(default_tokenizer) -> None:
    backend = ScriptedBackend(default_tokenizer, ["Hi, I want to cancel an order.", "It is olivia.ito5204@example.com."])
    env = _make(backend, user_temperature=0.7, user_seed=5)
    observation, info = env.reset(seed=0, options={"task_id": TASK_ID})
    assert observation[1] == {"role": "user", "content": "Hi, I want to cancel an order."}
    assert info["user_errors"] == 0 and info["user_error"] is None
    prompt, params = backend.calls[0]
    assert params == SamplingParams(temperature=0.7, seed=5, max_new_tokens=llm_user.MAX_NEW_TOKENS)
    assert _task(env)["instruction"] in prompt
    for rule in ("You play the customer", "one line at a time", "only when the agent asks", "Do not make up", "###STOP###"):
        assert rule in prompt, rule
    # The agent is the "user" side of the customer's chat, which τ-bench opens with a greeting.
    assert prompt.endswith(f"<|im_start|>user\n{GREETING}<|im_end|>\n<|im_start|>assistant\n")

    # Tool calls never reach the customer; messages do, after the customer's own earlier lines.
    env.step(format_tool_call("get_order_details", {"order_id": "#W5442520"}))
    assert len(backend.calls) == 1
    observation, *_ = env.step("What is your email address?")
    assert observation == [{"role": "user", "content": "It is olivia.ito5204@example.com."}]
    prompt, params = backend.calls[1]
    assert prompt.endswith(
        "<|im_start|>assistant\nHi, I want to cancel an order.<|im_end|>\n<|im_start|>user\nWhat is your email address?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert params.temperature == 0.7 and params.seed == 5


def test_stop_ends_the_episode(default_tokenizer) -> None:
    env = _make(ScriptedBackend(default_tokenizer, ["Please cancel my order.", "Great, thanks! ###STOP###"]))
    env.reset(seed=0, options={"task_id": TASK_ID})
    observation, reward, terminated, truncated, info = env.step("Your order is cancelled.")
    assert terminated and not truncated and "###STOP###" in observation[0]["content"]
    assert reward == 0.0 and "orders/" in info["reward_reason"]  # nothing was cancelled


def _play(env: gym.Env, actions: Sequence[str]) -> str:
    env.reset(seed=0, options={"task_id": TASK_ID})
    for action in actions:
        *_, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            break
    return to_json_line(env.unwrapped.episode_record())


AGENT = ["Hello! Could you give me your email?", format_tool_call("find_user_id_by_email", {"email": "olivia.ito5204@example.com"}), "Which order?"]


def test_the_cache_replays_a_rerun_without_calling_the_model(default_tokenizer, tmp_path, monkeypatch) -> None:
    replies = ["I need help.", "olivia.ito5204@example.com", "The pending one. ###STOP###"]
    cache = ResponseCache()  # in memory, shared by the environments given it
    record = _play(_make(ScriptedBackend(default_tokenizer, replies), user_cache=cache), AGENT)
    again = ScriptedBackend(default_tokenizer, [RuntimeError("must not be called")])
    assert _play(_make(again, user_cache=cache), AGENT) == record and again.calls == [] and len(cache) == 3

    path = tmp_path / "customer.jsonl"
    first = ScriptedBackend(default_tokenizer, replies)
    record = _play(_make(first, user_cache=str(path)), AGENT)
    assert len(first.calls) == 3 and "###STOP###" in record and len(path.read_text().splitlines()) == 3

    # The same agent again, in a new environment sharing the in-process cache of that file ...
    again = ScriptedBackend(default_tokenizer, [RuntimeError("must not be called")])
    assert _play(_make(again, user_cache=str(path)), AGENT) == record and again.calls == []
    # ... and as a new process would: the file alone replays the episode.
    monkeypatch.setattr(llm_user, "_FILE_CACHES", {})
    fresh = ScriptedBackend(default_tokenizer, [RuntimeError("must not be called")])
    assert _play(_make(fresh, user_cache=str(path)), AGENT) == record and fresh.calls == []

    # Other sampling settings or another backend miss from the opening on; other agent words
    # miss from where the transcript departs.
    for backend, kwargs in ((ScriptedBackend(default_tokenizer), {"user_seed": 1}), (ScriptedBackend(default_tokenizer, name="fake:another"), {})):
        _play(_make(backend, user_cache=ResponseCache(path), **kwargs), AGENT[:1])
        assert len(backend.calls) == 2
    other_words = ScriptedBackend(default_tokenizer)
    _play(_make(other_words, user_cache=ResponseCache(path)), ["Good morning!"])
    assert len(other_words.calls) == 1


def test_a_failing_model_gives_the_fallback_line_and_is_recorded(default_tokenizer) -> None:
    backend = ScriptedBackend(default_tokenizer, [RuntimeError("out of memory"), "  \n", "Cancel my order, please."])
    cache = ResponseCache()
    env = _make(backend, user_cache=cache)
    observation, info = env.reset(seed=0, options={"task_id": TASK_ID})
    assert observation[1]["content"] == FALLBACK
    assert info["user_errors"] == 1 and info["user_error"] == "RuntimeError: out of memory"
    observation, _, terminated, _, info = env.step("Sorry?")
    assert observation[0]["content"] == FALLBACK and not terminated
    assert info["user_errors"] == 2 and info["user_error"] == "the customer model returned no text"
    observation, *_ = env.step("How can I help?")
    assert observation[0]["content"] == "Cancel my order, please." and env.unwrapped.user.info()["user_errors"] == 2
    # Failures are not cached: a rerun asks the model again.
    rerun = ScriptedBackend(default_tokenizer, ["I need help."])
    observation, _ = _make(rerun, user_cache=cache).reset(seed=0, options={"task_id": TASK_ID})
    assert len(rerun.calls) == 1 and observation[1]["content"] == "I need help."


def test_without_a_backend_the_named_model_is_loaded_once_on_the_first_reset(default_tokenizer, monkeypatch) -> None:
    loaded: list[str] = []

    def create_backend(name: str) -> ScriptedBackend:
        loaded.append(name)
        return ScriptedBackend(default_tokenizer, name=f"hf:{name}")

    monkeypatch.setattr(llm_user, "create_backend", create_backend)
    monkeypatch.setattr(llm_user, "_MODELS", {})
    envs = [gym.make(ENV_ID, split="val", user="llm") for _ in range(3)] + [gym.make(ENV_ID, split="val", user="llm", user_model="tiny")]
    assert loaded == []  # making an environment loads nothing (the CLI makes one to check its arguments)
    for env in envs:
        env.reset(seed=0, options={"task_id": TASK_ID})
    assert loaded == [DEFAULT_MODEL, "tiny"]
    assert envs[0].unwrapped.user.model is envs[2].unwrapped.user.model
    # Records keep the JSON arguments, so the episode can be replayed from the command line.
    assert envs[3].unwrapped.episode_record()["env_kwargs"] == {"split": "val", "user": "llm", "user_model": "tiny"}


def test_llm_arguments_are_checked(default_tokenizer) -> None:
    with pytest.raises(ValueError, match="only apply to user='llm'"):
        gym.make(ENV_ID, user_backend=ScriptedBackend(default_tokenizer))
    with pytest.raises(ValueError, match="only apply to user='llm'"):
        gym.make(ENV_ID, user="ticket", user_cache="cache.jsonl")
    with pytest.raises(ValueError, match="not both"):
        gym.make(ENV_ID, user="llm", user_backend=ScriptedBackend(default_tokenizer), user_model="tiny")
    with pytest.raises(ValueError, match="temperature"):
        gym.make(ENV_ID, user="llm", user_backend=ScriptedBackend(default_tokenizer), user_temperature=-1.0)


def test_check_env(default_tokenizer) -> None:
    check_env(_make(ScriptedBackend(default_tokenizer)).unwrapped, skip_render_check=True)


def test_confirmations_by_the_llm_customer_count_for_violations(default_tokenizer) -> None:
    env = _make(ScriptedBackend(default_tokenizer, ["Hi.", "Yes, go ahead.", "No, keep it."]))
    task = _task(env)
    (cancel,) = task["actions"]
    write = format_tool_call(cancel["name"], cancel["kwargs"])
    find = format_tool_call("find_user_id_by_email", {"email": "olivia.ito5204@example.com"})
    env.reset(seed=0, options={"task_id": TASK_ID})
    for action in (find, "Shall I cancel it? (yes/no)", write, "Shall I also update your address? (yes/no)"):
        *_, info = env.step(action)
    assert info["policy_violations"] == 0
    *_, info = env.step(
        format_tool_call(
            "modify_user_address",
            {"user_id": task["user_id"], "address1": "1 Main Street", "address2": "", "city": "Austin", "state": "TX", "country": "USA", "zip": "73301"},
        )
    )
    assert info["policy_violations_by_rule"]["unconfirmed_write"] == 1  # the customer said no
