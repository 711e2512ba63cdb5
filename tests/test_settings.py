"""The rollout settings are declared once (agentgym/rollouts/settings.py): the command line, the trainer's
YAML section, the trainer's rollouts and validation all derive from the declaration."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap

import pytest

from agentgym.cli import _parser
from agentgym.cli.evaluate import rollout_config
from agentgym.rollouts.settings import RolloutConfig, RolloutSettings

# A fresh interpreter whose agentgym/rollouts/settings.py has one more field in RolloutSettings, put in
# place before anything imports it: exactly what adding the field to the file does.
ADDED_FIELD = textwrap.dedent(
    """
    import pathlib, sys, types
    import agentgym.rollouts

    path = pathlib.Path(agentgym.rollouts.__file__).with_name("settings.py")
    source = path.read_text(encoding="utf-8")
    anchor = "    def __post_init__(self) -> None:\\n        check_settings(self)\\n"
    assert source.count(anchor) == 1
    added = '    stop_after_calls: int = setting(3, help="tool calls an episode may make", min=1)\\n\\n'
    module = types.ModuleType("agentgym.rollouts.settings")
    module.__file__ = str(path)
    sys.modules["agentgym.rollouts.settings"] = agentgym.rollouts.settings = module
    exec(compile(source.replace(anchor, added + anchor), str(path), "exec"), module.__dict__)
    """
)

CHECKS = textwrap.dedent(
    """
    import contextlib, io
    from agentgym.cli import _parser
    from agentgym.cli.evaluate import rollout_config as eval_config
    from agentgym.trainers.config import ConfigError, config_to_dict, config_from_dict, load_config
    from agentgym.trainers.trainer import rollout_config

    help_text = io.StringIO()
    with contextlib.redirect_stdout(help_text), contextlib.suppress(SystemExit):
        _parser().parse_args(["eval", "--help"])
    assert "--stop-after-calls STOP_AFTER_CALLS" in help_text.getvalue(), help_text.getvalue()
    assert "tool calls an episode may make (default 3)" in help_text.getvalue()

    args = _parser().parse_args(["eval", "agentgym/SQL-v0", "--stop-after-calls", "5"])
    assert eval_config(args).stop_after_calls == 5
    assert eval_config(_parser().parse_args(["eval", "agentgym/SQL-v0"])).stop_after_calls == 3
    errors = io.StringIO()
    with contextlib.redirect_stderr(errors), contextlib.suppress(SystemExit):
        _parser().parse_args(["eval", "agentgym/SQL-v0", "--stop-after-calls", "0"])
    assert "argument --stop-after-calls: must be at least 1; got 0" in errors.getvalue(), errors.getvalue()

    config = load_config(overrides={"env_id": "agentgym/SQL-v0", "rollout.stop_after_calls": 5})
    assert config.rollout.stop_after_calls == 5
    assert config_from_dict(config_to_dict(config)) == config
    assert rollout_config(config, ["sql-0001"], seed=1).stop_after_calls == 5
    assert rollout_config(config, ["sql-0001"], seed=1, evaluation=True).stop_after_calls == 5
    try:
        load_config(overrides={"env_id": "agentgym/SQL-v0", "rollout.stop_after_calls": 0})
        raise AssertionError("an out-of-bounds value was accepted")
    except ConfigError as exc:
        assert exc.problems == ["rollout.stop_after_calls must be at least 1; got 0"], exc.problems
    print("derived")
    """
)


def test_a_setting_added_to_the_settings_class_reaches_every_surface() -> None:
    # One field added, nothing else edited: eval's --help and parser, the trainer's YAML section
    # (bounds included) and the RolloutConfig the trainer plays, in training and evaluation.
    assert "stop_after_calls" not in {f.name for f in dataclasses.fields(RolloutSettings)}  # the test adds it
    result = subprocess.run([sys.executable, "-c", ADDED_FIELD + CHECKS], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip().endswith("derived"), result.stderr[-3000:]


def test_a_misspelled_rollout_option_names_the_valid_ones() -> None:
    from agentgym.trainers.config import ConfigError, RolloutSection, load_config

    with pytest.raises(ConfigError) as info:
        load_config(overrides={"env_id": "agentgym/SQL-v0", "rollout.max_new_token": 64})
    (problem,) = info.value.problems
    assert problem.startswith("rollout.max_new_token: unknown option; valid options: max_turns, max_new_tokens, ")
    assert problem.endswith(", ".join(f.name for f in dataclasses.fields(RolloutSection)))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"max_new_tokens": 0}, "max_new_tokens must be at least 1; got 0"),
        ({"max_turns": 0}, "max_turns must be at least 1; got 0"),
        ({"max_total_tokens": 1}, "max_total_tokens must be at least 2; got 1"),
        ({"temperature": -0.5}, "temperature must be at least 0; got -0.5"),
        ({"temperature": float("nan")}, "temperature must be at least 0; got nan"),
        ({"error_temperature": 0.0}, "error_temperature must be above 0; got 0.0"),
        ({"top_p": 0.0}, "top_p must be in (0, 1]; got 0.0"),
        ({"top_p": 1.5}, "top_p must be in (0, 1]; got 1.5"),
        ({"tool_mode": "xml"}, "tool_mode must be 'auto', 'template' or 'system_prompt'; got 'xml'"),
        ({"split": "dev"}, "split must be 'train', 'val' or 'test'; got 'dev'"),
        ({"group_size": 0}, "group_size must be at least 1; got 0"),
        ({"max_concurrent": 0}, "max_concurrent must be at least 1; got 0"),
        ({"seed": -1}, "seed must be at least 0; got -1"),
    ],
)
def test_bounds_come_from_the_declaration(change, message) -> None:
    with pytest.raises(ValueError) as info:
        RolloutConfig("agentgym/SQL-v0", **change)
    assert str(info.value) == message


def test_public_names_and_keywords_keep_working() -> None:
    from agentgym.rollouts.chat import ToolMode
    from agentgym.rollouts.episode import RolloutSettings as from_episode
    from agentgym.rollouts.runner import RolloutConfig as from_runner
    from agentgym.rollouts.settings import ToolMode as declared

    assert from_episode is RolloutSettings and from_runner is RolloutConfig
    assert declared is ToolMode  # the renderer's literal, one declaration
    config = RolloutConfig("agentgym/Refund-v0", split="train", num_tasks=8, group_size=4, seed=0, max_turns=10, max_new_tokens=256, temperature=1.0)
    assert (config.num_episodes, config.top_p, config.tool_mode) == (32, 1.0, "auto")


def test_eval_options_fill_every_setting_with_todays_flags_and_defaults() -> None:
    parse = _parser().parse_args
    default = rollout_config(parse(["eval", "agentgym/SQL-v0"]))
    expected = RolloutConfig("agentgym/SQL-v0", split="test", num_tasks=10)
    assert default == expected
    args = ["--num-trials", "3", "--task-ids", "a", "b", "--top-p", "0.5", "--max-turns", "4", "--template-kwargs", '{"enable_thinking": false}']
    config = rollout_config(parse(["eval", "agentgym/SQL-v0", *args]))
    assert (config.group_size, config.task_ids, config.num_tasks, config.top_p, config.max_turns) == (3, ("a", "b"), 2, 0.5, 4)
    assert config.template_kwargs == {"enable_thinking": False}
    config = rollout_config(parse(["eval", "agentgym/SQL-v0", "--tool-mode", "system_prompt", "--error-temperature", "1.5"]))
    assert (config.tool_mode, config.error_temperature) == ("system_prompt", 1.5)
