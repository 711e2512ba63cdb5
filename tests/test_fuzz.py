"""Thousands of malformed actions thrown at every environment: nothing escapes, every bad turn
is answered with an error observation, and the observation always fits the space."""

import json
import time
from collections import Counter

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentgym.envs import ENVIRONMENTS
from agentgym.parsing import parse_action
from agentgym.rollouts.io import to_json_line

# Text as a model or a Python caller can produce it, unpaired UTF-16 surrogates included.
_any_text = st.text(st.characters(exclude_categories=()), max_size=20)
# Degenerate digit loops: integer literals longer than Python converts by default (4,300 digits).
_huge_int_literal = st.integers(4301, 6000).map(lambda n: "9" * n)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20) | _any_text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
# What a Python caller may put in a dict action: values JSON cannot carry.
_python_value = st.one_of(
    _json, st.sets(st.integers(), max_size=3), st.binary(max_size=4), st.tuples(st.integers()), st.just(object()), st.integers(4301, 4400).map(lambda n: 10**n)
)


def _tool_names():
    names = set()
    for env_id in ENVIRONMENTS:
        env = gym.make(env_id)
        names |= {t["function"]["name"] for t in env.unwrapped.tools}
        env.close()
    return sorted(names)


_call = st.fixed_dictionaries({"name": st.sampled_from(_tool_names()) | st.text(max_size=10), "arguments": _json})
_deep = st.integers(100, 20_000).map(lambda n: "[" * n + "]" * n)
_bad_text = st.one_of(
    st.text(max_size=200),
    st.integers(10_000, 2_000_000).map(lambda n: "y" * n),  # huge turns
    st.builds(lambda name, nested: f'<tool_call>{{"name": "{name}", "arguments": {{"a": {nested}}}}}</tool_call>', st.sampled_from(_tool_names()), _deep),
    st.text(st.characters(exclude_categories=()), max_size=200),
    st.builds(
        lambda name, digits: f'<tool_call>{{"name": "{name}", "arguments": {{"x": {digits}}}}}</tool_call>', st.sampled_from(_tool_names()), _huge_int_literal
    ),
    st.builds(lambda c, junk: f"<tool_call>{json.dumps(c)}</tool_call>{junk}", _call, _any_text),
    st.builds(lambda s: f"<tool_call>{s}</tool_call>", st.text(max_size=100)),
    st.builds(lambda c: f"<tool_call>{json.dumps(c)}</tool_call>", _call),
    st.builds(lambda c: f"<tool_call>{json.dumps(c)}", _call),
    st.builds(lambda a, b: a + "</tool_call>" + b, st.text(max_size=20), st.text(max_size=20)),
)
_python_call = st.fixed_dictionaries(
    {"name": st.sampled_from(_tool_names()) | _any_text, "arguments": st.dictionaries(st.text(max_size=8), _python_value, max_size=3)}
)
_string_arguments = st.builds(  # OpenAI-style: arguments as a JSON string, possibly a huge number
    lambda name, digits: {"name": name, "arguments": f'{{"x": {digits}}}'}, st.sampled_from(_tool_names()), _huge_int_literal
)
_bad_dict = st.builds(
    lambda calls, content: {"role": "assistant", "content": content, "tool_calls": calls},
    st.lists(st.one_of(_json, _python_value, st.builds(lambda c: {"type": "function", "function": c}, _call | _python_call | _string_arguments)), max_size=3),
    st.none() | st.text(max_size=20) | _any_text,
)
_action = st.one_of(_bad_text, _bad_dict, _json)


@pytest.fixture(scope="module")
def envs():
    made = {env_id: gym.make(env_id, max_turns=50) for env_id in sorted(ENVIRONMENTS)}
    yield made
    for env in made.values():
        env.close()


# Per environment: at least 10,000 actions stepped, in episodes of up to 12 turns (many end
# early, on a random answer call); the count is checked when the module's fixtures close.
ACTIONS_PER_ENV = 10_000
STEP_SECONDS_MAX = 10.0  # a generous bound: what matters is that no input hangs a step


@pytest.fixture(scope="module")
def stepped():
    """Actions stepped per environment; every environment fuzzed in full took ``ACTIONS_PER_ENV``."""
    counts: Counter[str] = Counter()
    yield counts
    short = {env_id: n for env_id, n in counts.items() if n < ACTIONS_PER_ENV}
    assert not short, f"fewer than {ACTIONS_PER_ENV:,} fuzzed actions: {short}"


@pytest.mark.parametrize("fuzzed", sorted(ENVIRONMENTS))
@settings(max_examples=1750, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(actions=st.lists(_action, min_size=4, max_size=12), seed=st.integers(0, 50))
def test_malformed_actions_never_raise(envs, stepped, fuzzed, actions, seed):
    stepped[fuzzed] += check_actions(envs[fuzzed], actions, seed)


def check_actions(env, actions, seed) -> int:
    """Step ``env`` through ``actions``: nothing raises or hangs, every malformed call gets an error
    observation, and everything that comes out encodes as UTF-8 text and JSON. Returns the steps taken."""
    env.reset(seed=seed)
    steps = 0
    for action in actions:
        steps += 1
        started = time.monotonic()
        observation, reward, terminated, truncated, info = env.step(action)
        assert time.monotonic() - started < STEP_SECONDS_MAX
        assert env.observation_space.contains(observation)
        parsed = parse_action(action)
        if parsed.errors:
            assert info["turn_format_errors"] >= len(parsed.errors)
            assert sum(m["content"].startswith("Error:") for m in observation) >= len(parsed.errors)
        assert observation or terminated or truncated
        # Whatever came in, what goes out is text a tokenizer and a file can take.
        for message in observation:
            message["content"].encode("utf-8")
        record = env.unwrapped.episode_record()
        to_json_line(record).encode("utf-8")
        for message in record["messages"]:
            json.dumps(message, ensure_ascii=False).encode("utf-8")
        if terminated or truncated:
            break
    return steps
