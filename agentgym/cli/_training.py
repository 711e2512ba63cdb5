"""What ``agentgym train`` and ``agentgym sft`` share: their arguments and the run of the reference trainer.

The commands print the run's markdown report (or its evaluations as JSON) and turn every user
error into one line on stderr with exit status 2. Heavy imports (torch, transformers) happen only
when a command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agentgym.cli._common import quiet_argument

__all__ = ["run_training", "training_arguments"]


def training_arguments(p: argparse.ArgumentParser, *, steps_help: str) -> None:
    p.add_argument("env", metavar="ENV", nargs="?", help="environment id, e.g. agentgym/SQL-v0 (default: the config's env_id; naming another is an error)")
    p.add_argument("--config", metavar="FILE.yaml", help="training configuration (see docs/trainer.md)")
    p.add_argument("--model", help="model name, folder or .gguf file (default: the bundled SmolLM2-135M-Instruct)")
    p.add_argument("--device", help="cpu, cuda, cuda:1 or auto (default auto)")
    p.add_argument("--dtype", help="weights dtype: auto (float32, bf16 autocast on CUDA), float32 or bfloat16")
    p.add_argument("--output", metavar="DIR", help="run folder (default: the config's output_dir, else runs/ENV_NAME)")
    p.add_argument("--seed", type=int, help="seed every random choice derives from")
    p.add_argument("--steps", type=int, help=steps_help)
    p.add_argument("--lora", action="store_true", help="train LoRA adapters (needs peft)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set any option by its dotted name, e.g. --set optim.lr=1e-5 (repeatable)",
    )
    p.add_argument(
        "--resume",
        nargs="?",
        const=True,
        default=False,
        metavar="CHECKPOINT",
        help="continue the run in the output folder from its newest checkpoint (or CHECKPOINT)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an earlier run in the output folder")
    quiet_argument(p, "--no-progress")
    p.add_argument("--json", action="store_true", help="print the evaluations as JSON instead of the report")


def run_training(args: argparse.Namespace, extra: dict[str, Any]) -> int:
    """Train with the command's options plus ``extra`` (dotted option names; ``None`` values are left out) and print the result."""
    from agentgym.models import ModelLoadError
    from agentgym.trainers.config import ConfigError, load_config, parse_override
    from agentgym.trainers.modeling import TrainerError

    try:
        overrides: dict[str, Any] = dict(parse_override(text) for text in args.overrides)
        env_id = _env_id(args, overrides.get("env_id"))
        named = {
            "env_id": env_id,
            "model": args.model,
            "device": args.device,
            "dtype": args.dtype,
            "output_dir": args.output,
            "seed": args.seed,
            "lora.enabled": True if args.lora else None,
            "logging.progress": False if args.quiet else None,
            **extra,
        }
        overrides.update({k: v for k, v in named.items() if v is not None})
        if args.output is None and _config_value(args.config, "output_dir") is None:
            overrides["output_dir"] = f"runs/{env_id.rsplit('/', 1)[-1]}"
        config = load_config(args.config, overrides=overrides)
        from agentgym.trainers.trainer import train

        result = train(config, resume=args.resume, overwrite=args.overwrite)
    except (ConfigError, TrainerError, ModelLoadError) as exc:
        print(f"agentgym: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"output_dir": str(result.output_dir), "evaluations": result.evaluations}, indent=2))
    else:
        print(result.report)
    return 0


def _env_id(args: argparse.Namespace, set_env_id: Any = None) -> str:
    """The environment to train on: ENV or the config's ``env_id`` (``--set env_id=...`` replacing
    the file's), which must agree when both are given."""
    from agentgym.trainers.config import ConfigError

    in_config = set_env_id if set_env_id is not None else _config_value(args.config, "env_id")
    if args.env is not None and in_config is not None and args.env != in_config:
        raise ConfigError(f"ENV {args.env} differs from env_id {in_config} in {args.config}; name one environment (or leave ENV out)")
    env_id = args.env or in_config
    if env_id is None:
        raise ConfigError("name the environment: agentgym train ENV, or env_id in the --config file")
    return str(env_id)


def _config_value(path: str | None, key: str) -> Any:
    """A top-level value of the YAML file (None when it has none, or cannot be read: load_config reports that)."""
    if path is None:
        return None
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    return data.get(key) if isinstance(data, dict) else None
