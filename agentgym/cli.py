"""The ``agentgym`` command line: list environments, play one, roll out scripted policies.

Every command turns bad input into one clear line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

__all__ = ["main"]


class CLIError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        print("agentgym: interrupted", file=sys.stderr)
        return 130
    except (CLIError, ValueError, FileNotFoundError, IsADirectoryError, PermissionError, gym.error.Error) as exc:
        print(f"agentgym: error: {exc}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentgym", description="Deterministic multi-turn tool environments for agent RL.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = commands.add_parser("list", help="list the registered environments")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=_list)

    p = commands.add_parser("play", help="play an environment yourself in the terminal")
    _env_arguments(p)
    p.add_argument("--task-id", help="play this task (default: drawn with the seed)")
    p.set_defaults(run=_play)

    p = commands.add_parser("rollout", help="run a scripted policy and write trajectories as JSONL")
    _env_arguments(p)
    p.add_argument("--policy", default="oracle", help="scripted policy: oracle, random, do_nothing, or one the env adds")
    p.add_argument("--episodes", type=_positive_int, default=10, help="number of episodes (default 10)")
    p.add_argument("--out", required=True, help="output file: JSON lines, or Parquet when it ends in .parquet")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(run=_rollout)

    p = commands.add_parser("validate-reward", help="check a reward against hand-labelled trajectories")
    p.add_argument("labels", metavar="LABELS.jsonl", help="labelled episode records (rollout format plus a 'label')")
    p.add_argument("--env", help="environment for the oracle/canary checks (default: the records' env)")
    p.add_argument("--reward", help="module:function scoring a record (default: the environment's own reward)")
    p.add_argument("--min-agreement", type=float, default=0.95, help="minimum pass/fail accuracy (default 0.95)")
    p.add_argument("--probe-episodes", type=_positive_int, default=10, help="episodes per oracle/canary policy (default 10)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(run=_validate_reward)

    p = commands.add_parser("audit-tasks", help="check code tasks for hidden tests that a constant function passes")
    p.add_argument("--tasks", metavar="FILE", help="a task file (CodeExec, HumanEval or MBPP format; default: CodeExec-v0's bundled tasks)")
    p.add_argument("--json", action="store_true", help="print every task's baseline scores as JSON")
    p.set_defaults(run=_audit_tasks)

    p = commands.add_parser("serve", help="serve environments to remote sessions over WebSocket (agentgym/Remote-v0)")
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1; 0.0.0.0 for a cluster)")
    p.add_argument("--port", type=int, default=8765, help="TCP port (default 8765; 0 picks a free one)")
    p.add_argument("--env", action="append", dest="envs", metavar="ENV", help="offer only this environment id (repeatable; default: all)")
    p.add_argument("--max-sessions", type=_positive_int, default=256, help="open sessions at most (default 256)")
    p.add_argument("--idle-timeout", type=float, default=600.0, metavar="SECONDS", help="close a silent session after this long (default 600)")
    p.add_argument("--workers", type=_positive_int, help="threads running environment calls (default 4 per CPU)")
    p.add_argument("--token-env", metavar="VAR", help="require the bearer token held by this environment variable")
    p.set_defaults(run=_serve)

    from agentgym.cli_eval import add_eval_commands

    add_eval_commands(commands)

    from agentgym.trainers.cli import add_parsers as add_train_commands

    add_train_commands(commands)
    return parser


def _env_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("env", metavar="ENV", help="environment id, e.g. agentgym/Refund-v0")
    p.add_argument("--seed", type=int, default=0, help="base seed (default 0)")
    p.add_argument("--split", default="train", choices=["train", "val", "test"], help="task split (default train)")
    p.add_argument("--env-kwargs", type=_json_object, default={}, metavar="JSON", help="extra keyword arguments for gym.make, as a JSON object")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc.msg}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def _make(args: argparse.Namespace, **extra: Any) -> gym.Env:
    from agentgym.envs import make_env

    return make_env(args.env, split=args.split, **args.env_kwargs, **extra)


def _list(args: argparse.Namespace) -> int:
    from agentgym.envs import ENVIRONMENTS

    if args.json:
        print(json.dumps([{"id": k, "description": d} for k, (_, d) in ENVIRONMENTS.items()], indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("environment", "description")
    for env_id, (_, description) in ENVIRONMENTS.items():
        table.add_row(env_id, description)
    Console().print(table)
    return 0


def _serve(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    try:
        from agentgym.remote import EnvServer
    except ImportError:
        raise CLIError("agentgym serve needs the serve extra: pip install 'agentgym[serve]'") from None
    token = None
    if args.token_env:
        token = os.environ.get(args.token_env)
        if not token:
            raise CLIError(f"--token-env {args.token_env}: that environment variable is empty or unset")
    import agentgym  # noqa: F401  (registers the environments)

    unknown = [e for e in args.envs or [] if e not in gym.registry]
    if unknown:
        raise CLIError(f"unknown environment(s): {', '.join(unknown)}")
    server = EnvServer(
        args.host, args.port, token=token, allowed_envs=args.envs, max_sessions=args.max_sessions, idle_timeout_s=args.idle_timeout, workers=args.workers
    )

    async def run() -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, server.shutdown)
        await server.run(
            on_ready=lambda: print(
                f"agentgym: serving {len(server.allowed_envs)} environment(s) on {server.url}{' (token required)' if token else ''}; Ctrl-C stops", flush=True
            )
        )

    try:
        asyncio.run(run())
    except OSError as exc:
        raise CLIError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    finally:
        server.close()
    print("agentgym: stopped; every session closed", flush=True)
    return 0


def _rollout(args: argparse.Namespace) -> int:
    from agentgym.rollout import make_policy, rollout, summarize, write_records

    env = _make(args)  # validates the id, kwargs and policy before the output file is touched
    make_policy(env, args.policy, args.seed)
    env.close()
    records = write_records(args.out, rollout(args.env, args.policy, episodes=args.episodes, seed=args.seed, split=args.split, env_kwargs=args.env_kwargs))
    summary = {"env": args.env, "policy": args.policy, "split": args.split, **summarize(records), "out": args.out}
    _print_summary(summary, args.json)
    return 0


def _validate_reward(args: argparse.Namespace) -> int:
    from agentgym.rollout import read_jsonl
    from agentgym.validation import env_reward, load_reward, validate

    reward = load_reward(args.reward) if args.reward else env_reward
    report = validate(
        read_jsonl(args.labels), reward, env_id=args.env, min_agreement=args.min_agreement, probe_episodes=args.probe_episodes, reward_spec=args.reward
    )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        _print_report(report)
    return 0 if report.ok else 1


def _audit_tasks(args: argparse.Namespace) -> int:
    from agentgym.envs.code_exec.audit import MAX_BASELINE_SCORE, audit_tasks, bundled_tasks
    from agentgym.envs.code_exec.loaders import load_tasks

    audits = audit_tasks(load_tasks(args.tasks) if args.tasks else bundled_tasks())
    failed = [a for a in audits if not a.passed]
    if args.json:
        print(json.dumps([{**dataclasses.asdict(a), "passed": a.passed} for a in audits], indent=1))
    else:
        constant = [a.constant for a in audits]
        print(f"{len(audits)} tasks; constant function: mean {sum(constant) / len(constant):.3f}, max {max(constant):.3f}")
        visible = [a.majority_visible for a in audits if a.majority_visible is not None]
        if visible:
            print(f"most common visible answer: mean {sum(visible) / len(visible):.3f}, max {max(visible):.3f}")
        for audit in failed:
            print(f"FAIL {audit.task_id}: constant {audit.constant:.2f}, most common visible answer {audit.majority_visible}")
        print(f"{len(failed)} task(s) above {MAX_BASELINE_SCORE}" if failed else f"every task keeps both baselines at or below {MAX_BASELINE_SCORE}")
    return 1 if failed else 0


def _print_report(report: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    stats = Table("agreement", "value", title=f"{report.n} labelled trajectories")
    stats.add_row("accuracy", f"{report.accuracy:.3f} (min {report.min_agreement:.2f})")
    stats.add_row("Cohen's kappa", f"{report.kappa:.3f}")
    if report.spearman is not None:
        stats.add_row("Spearman (scored labels)", f"{report.spearman:.3f}")
    if report.mae is not None:
        stats.add_row("mean abs. error (scored labels)", f"{report.mae:.3f}")
    console.print(stats)
    confusion = Table("", "reward: pass", "reward: fail", title="confusion")
    confusion.add_row("label: pass", str(report.confusion["true_pass"]), str(report.confusion["false_fail"]))
    confusion.add_row("label: fail", str(report.confusion["false_pass"]), str(report.confusion["true_fail"]))
    console.print(confusion)
    checks = Table("check", "result", "detail", title="built-in checks")
    for check in report.checks:
        checks.add_row(check.name, "[green]pass[/]" if check.passed else "[red]FAIL[/]", check.detail)
    console.print(checks)
    if report.disagreements:
        table = Table("task", "label", "reward", "reward's reason", "label's justification", title="disagreements")
        for d in report.disagreements:
            label = ("pass" if d.label["pass"] else "fail") + (f" {d.label['score']:.2f}" if d.label.get("score") is not None else "")
            table.add_row(d.task_id, label, f"{d.score:.3f} ({'pass' if d.passed else 'fail'})", d.reason, d.label["justification"])
        console.print(table)
    console.print("[bold green]reward validated[/]" if report.ok else "[bold red]reward NOT validated[/]")


def _print_summary(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("metric", "value", title=f"{summary['env']} — {summary['policy']} ({summary['split']})")
    for key, value in summary.items():
        if key not in ("env", "policy", "split"):
            table.add_row(key.replace("_", " "), f"{value:.3f}" if isinstance(value, float) else str(value))
    Console().print(table)


def _play(args: argparse.Namespace, read: Callable[[str], str] = input) -> int:
    """An interactive episode: type the assistant's turns; ``/call NAME {json}`` writes a tool call."""
    from rich.console import Console

    from agentgym.parsing import format_tool_call

    console = Console(highlight=False)
    env = _make(args)
    observation, info = env.reset(seed=args.seed, options={"task_id": args.task_id} if args.task_id else None)
    console.print(f"[bold]{args.env}[/] task {info['task_id']}. Type your turn; /call NAME {{json args}} makes a tool call; /tools lists tools; /quit ends.")
    done = False
    while not done:
        _show(console, observation)
        try:
            line = read("assistant> ").strip()
        except EOFError:
            line = "/quit"
        if line == "/quit":
            break
        if line == "/tools":
            for schema in env.unwrapped.tools:
                console.print(json.dumps(schema["function"], indent=1))
            observation = []
            continue
        if line.startswith("/call "):
            name, _, raw = line[6:].strip().partition(" ")
            try:
                line = format_tool_call(name, json.loads(raw) if raw.strip() else {})
            except json.JSONDecodeError as exc:
                console.print(f"[red]arguments are not valid JSON: {exc.msg}[/]")
                observation = []
                continue
        observation, reward, terminated, truncated, info = env.step(line)
        done = terminated or truncated
    if done:
        _show(console, observation)
        console.print(f"[bold]episode over[/]: reward {reward:.3f} — {info.get('reward_reason', '')}")
    env.close()
    return 0


def _show(console: Any, messages: list[dict[str, Any]]) -> None:
    from rich.text import Text

    for message in messages:
        label = message["role"] + (f":{message['name']}" if "name" in message else "")
        console.print(Text.assemble((label, "bold cyan"), " ", message["content"]))


if __name__ == "__main__":
    sys.exit(main())
