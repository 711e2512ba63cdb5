"""Dataset exporters: an agentgym task split as the prompt dataset each trainer reads.

Every row carries the episode spec (:class:`~agentgym.trainers.adapters.spec.EpisodeSpec`) as one JSON
string, plus the episode's opening messages as the ``prompt`` (what the trainers use for length
filtering and logging; the adapters re-render the real prompt, tools included, from the
environment). Formats:

* ``verl``: ``data_source``, ``prompt``, ``ability``, ``reward_model.ground_truth`` (the spec),
  ``extra_info`` (``index``, ``task_id``, ``split`` and the spec) and ``agent_name``;
* ``openrlhf``: ``prompt`` and ``label`` (the spec), for ``--data.input_key prompt --data.label_key label``;
* ``trl``: ``prompt``, ``environment`` (the env id) and ``agentgym_spec``, for ``environment_factory``;
* ``trl-rollout``: ``prompt`` is the spec itself, for the ``rollout_func`` path (TRL hands a
  rollout function nothing but the prompts).

    python -m agentgym.trainers.adapters.export verl agentgym/Refund-v0 --split train --out data/refund/train.parquet

The output format follows the file suffix: ``.parquet`` (needs pyarrow) or ``.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from agentgym.records import ChatMessage
from agentgym.rollouts.io import write_jsonl
from agentgym.trainers.adapters.spec import SPEC_KEY, EpisodeSpec

__all__ = ["FORMATS", "ExportedEpisode", "Format", "episodes", "export_rows", "main", "row_for", "write_rows"]

Format = Literal["verl", "openrlhf", "trl", "trl-rollout"]
FORMATS: tuple[str, ...] = get_args(Format)

VERL_AGENT_NAME = "agentgym"
"""The agent-loop name the verl rows select (registered by the adapter's agent-loop YAML)."""


@dataclass(frozen=True)
class ExportedEpisode:
    """One task of a split, ready to become a dataset row.

    Attributes:
        index: position in the export (verl's ``extra_info.index``).
        spec: the episode spec.
        messages: the opening messages the environment shows (``role`` and ``content`` only).
    """

    index: int
    spec: EpisodeSpec
    messages: tuple[dict[str, str], ...]


def episodes(
    env_id: str, *, split: str = "train", limit: int | None = None, seed: int = 0, env_kwargs: dict[str, Any] | None = None, start_index: int = 0
) -> Iterator[ExportedEpisode]:
    """The tasks of ``env_id``'s ``split`` in the environment's order; task ``i`` is reset with ``seed + i``.

    Args:
        env_id: a registered environment id.
        split: the task split.
        limit: export at most this many tasks (the first ones).
        seed: seed of the first task's reset.
        env_kwargs: extra ``gym.make`` arguments recorded in every spec.
        start_index: ``index`` of the first row (for exports that concatenate environments).
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    probe = EpisodeSpec(env_id=env_id, task_id="-", split=split, env_kwargs=dict(env_kwargs or {}))
    env = probe.make()
    try:
        task_ids = env.unwrapped.task_ids
        for offset, task_id in enumerate(task_ids[:limit] if limit else task_ids):
            spec = EpisodeSpec(env_id=env_id, task_id=task_id, split=split, seed=seed + offset, env_kwargs=probe.env_kwargs)
            opening, _ = spec.reset(env)
            yield ExportedEpisode(index=start_index + offset, spec=spec, messages=_plain_messages(opening, env_id))
    finally:
        env.close()


def _plain_messages(opening: Sequence[ChatMessage], env_id: str) -> tuple[dict[str, str], ...]:
    # Arrow stores a column of message lists as one struct type: extra keys on some messages
    # would become nulls on all others, which chat templates then render. Openings are plain.
    for message in opening:
        if message.get("role") not in ("system", "user"):
            raise ValueError(f"{env_id}: an opening message has role {message.get('role')!r}; exporters expect system/user messages")
    return tuple({"role": m["role"], "content": m["content"]} for m in opening)


def row_for(fmt: Format, episode: ExportedEpisode) -> dict[str, Any]:
    """The dataset row of ``episode`` in format ``fmt``."""
    spec_json = episode.spec.to_json()
    prompt = [dict(m) for m in episode.messages]
    if fmt == "verl":
        return {
            "data_source": episode.spec.env_id,
            "prompt": prompt,
            "ability": "agent",
            # verl indexes reward_model["ground_truth"] for every row; the spec is what identifies the answer.
            "reward_model": {"style": "rule", "ground_truth": spec_json},
            "extra_info": {"index": episode.index, "task_id": episode.spec.task_id, "split": episode.spec.split, SPEC_KEY: spec_json},
            "agent_name": VERL_AGENT_NAME,
        }
    if fmt == "openrlhf":
        return {"prompt": prompt, "label": spec_json}
    if fmt == "trl":
        return {"prompt": prompt, "environment": episode.spec.env_id, SPEC_KEY: spec_json}
    if fmt == "trl-rollout":
        return {"prompt": spec_json}
    raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")


def export_rows(
    fmt: Format, env_ids: str | Sequence[str], *, split: str = "train", limit: int | None = None, seed: int = 0, env_kwargs: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Rows of one or more environments' ``split`` in format ``fmt`` (``limit`` applies per environment)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
    rows: list[dict[str, Any]] = []
    for env_id in [env_ids] if isinstance(env_ids, str) else env_ids:
        for episode in episodes(env_id, split=split, limit=limit, seed=seed, env_kwargs=env_kwargs, start_index=len(rows)):
            rows.append(row_for(fmt, episode))
    return rows


def write_rows(rows: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Write rows to ``path``: Parquet for ``.parquet``, JSON lines for ``.jsonl``. Returns the path."""
    path = Path(path)
    if not rows:
        raise ValueError("no rows to write")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".jsonl":
        write_jsonl(path, rows)
    elif path.suffix == ".parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise RuntimeError("writing Parquet needs pyarrow (pip install pyarrow); or write .jsonl") from None
        partial = path.with_name(f".{path.name}.partial")
        try:
            pq.write_table(pa.Table.from_pylist(list(rows)), partial)
            os.replace(partial, path)
        finally:
            partial.unlink(missing_ok=True)
    else:
        raise ValueError(f"unsupported output suffix {path.suffix!r}: use .parquet or .jsonl")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m agentgym.trainers.adapters.export FORMAT ENV_ID... --out PATH``."""
    parser = argparse.ArgumentParser(
        prog="python -m agentgym.trainers.adapters.export", description="Write an agentgym task split as a trainer's prompt dataset (Parquet or JSON lines)."
    )
    parser.add_argument("format", choices=FORMATS)
    parser.add_argument("env_ids", nargs="+", metavar="ENV_ID", help="registered environment ids, e.g. agentgym/Refund-v0")
    parser.add_argument("--split", default="train", help="task split: train, val or test (default: train)")
    parser.add_argument("--out", required=True, help="output file, .parquet or .jsonl")
    parser.add_argument("--limit", type=int, default=None, help="export at most this many tasks per environment")
    parser.add_argument("--seed", type=int, default=0, help="reset seed of the first task (task i gets seed+i)")
    parser.add_argument("--env-kwargs", default="{}", help="JSON object of extra gym.make arguments, e.g. '{\"max_turns\": 12}'")
    args = parser.parse_args(argv)
    try:
        env_kwargs = json.loads(args.env_kwargs)
        if not isinstance(env_kwargs, dict):
            raise ValueError("--env-kwargs must be a JSON object")
        rows = export_rows(args.format, args.env_ids, split=args.split, limit=args.limit, seed=args.seed, env_kwargs=env_kwargs)
        path = write_rows(rows, args.out)
    except (ValueError, TypeError, RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {len(rows)} {args.format} rows to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
