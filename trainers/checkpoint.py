"""Checkpoints that resume a run exactly where it stopped.

A checkpoint is a folder ``checkpoints/step-NNNNNN`` (the run's global step) holding:

* ``weights.safetensors``: the trainable parameters (all weights, or only the LoRA adapters);
  absent at the boundary between SFT and GRPO, where they are those of ``sft_model/``, which a
  resumed GRPO phase loads;
* ``optimizer.pt``: the optimiser's and the learning-rate schedule's state (absent at the
  boundary between SFT and GRPO, where a fresh optimiser starts);
* ``rng.pt``: torch's, numpy's and Python's global random states (the trainer draws nothing
  from them, but libraries may);
* ``state.json``: where the run is (phase, step), its evaluations, early stopping and warning
  state.

Everything else a step depends on is derived from the seed and the step number (which tasks,
sampling seeds, mini-batch order), so restoring these files reproduces the uninterrupted run.
Folders are written under a temporary name and renamed, so a crash never leaves a partial one.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from agentgym.trainers.modeling import TrainerError

__all__ = ["checkpoints", "folder_bytes", "latest_checkpoint", "load_checkpoint_state", "restore_checkpoint", "save_checkpoint"]

_PREFIX = "step-"


def _folder(run_dir: Path) -> Path:
    return run_dir / "checkpoints"


def checkpoints(run_dir: str | Path) -> list[Path]:
    """The run's complete checkpoints, oldest first."""
    folder = _folder(Path(run_dir))
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and p.name.startswith(_PREFIX) and (p / "state.json").is_file())


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of the run, or ``None``."""
    found = checkpoints(run_dir)
    return found[-1] if found else None


def save_checkpoint(
    run_dir: str | Path,
    t: int,
    *,
    model: torch.nn.Module | None,
    optimizer: torch.optim.Optimizer | None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None,
    state: dict[str, Any],
    keep: int,
) -> Path:
    """Write the checkpoint of global step ``t`` and delete all but the newest ``keep``.

    ``model=None`` writes no weights: the run's saved model folder holds them (the SFT result).
    """
    folder = _folder(Path(run_dir))
    target = folder / f"{_PREFIX}{t:06d}"
    partial = folder / f".partial-{t:06d}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        if model is not None:
            weights = {name: p.detach().contiguous().cpu() for name, p in model.named_parameters() if p.requires_grad}
            save_file(weights, str(partial / "weights.safetensors"))
        if optimizer is not None and scheduler is not None:
            torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, partial / "optimizer.pt")
        rng = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        torch.save(rng, partial / "rng.pt")
        (partial / "state.json").write_text(json.dumps(state, indent=1), encoding="utf-8")
    except BaseException:
        # A full disk (or a kill) mid-write: the half-written files would only take the space the
        # rerun needs; the previous checkpoint is untouched and the rerun resumes from it.
        shutil.rmtree(partial, ignore_errors=True)
        raise
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    for old in checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old)
    return target


def folder_bytes(path: str | Path) -> int:
    """Bytes of the files under ``path``."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def load_checkpoint_state(path: str | Path) -> dict[str, Any]:
    """The ``state.json`` of a checkpoint.

    Raises:
        TrainerError: when ``path`` is not a complete checkpoint.
    """
    file = Path(path) / "state.json"
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise TrainerError(f"{path} is not a readable checkpoint: {exc}") from None


def restore_checkpoint(
    path: str | Path, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None, scheduler: torch.optim.lr_scheduler.LRScheduler | None = None
) -> None:
    """Load a checkpoint's weights into ``model`` (and the optimiser, schedule and random states).

    Raises:
        TrainerError: when the checkpoint's parameters do not match the model's trainable ones
            (a different model or LoRA setting than the run that wrote it).
    """
    path = Path(path)
    device = next(model.parameters()).device
    if (path / "weights.safetensors").is_file():  # absent: the model was loaded with them (see save_checkpoint)
        weights = load_file(str(path / "weights.safetensors"))
        expected = {name for name, p in model.named_parameters() if p.requires_grad}
        if set(weights) != expected:
            missing, extra = sorted(expected - set(weights)), sorted(set(weights) - expected)
            raise TrainerError(
                f"checkpoint {path} does not fit this model: missing {missing[:3]}, unexpected {extra[:3]} (resume with the configuration that wrote it)"
            )
        model.load_state_dict({k: v.to(device) for k, v in weights.items()}, strict=False)
    if optimizer is not None and scheduler is not None and (path / "optimizer.pt").is_file():
        saved = torch.load(path / "optimizer.pt", map_location=device, weights_only=False)
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
    # Our own file: random states hold numpy arrays and tuples, which the weights-only loader refuses.
    rng = torch.load(path / "rng.pt", weights_only=False)
    torch.set_rng_state(rng["torch"])
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
