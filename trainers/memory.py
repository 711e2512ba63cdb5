"""How much memory a training or evaluation process reaches at its peak, estimated before it starts.

``agentgym experiment`` runs several phases side by side; it starts a phase only when the
estimates of the phases running and of the new one fit in the memory that was available when the
experiment started (:class:`MemoryBudget`). The estimates (``benchmarks/bench_memory.py`` measures
the real peaks) count, for a model of ``W`` weight bytes and ``k`` key/value bytes per token:

* a **training** process: ``4 W`` (weights, gradients and AdamW's two moments, all float32), the
  key/value buffers of its rollouts (``rows x tokens x k``), and :data:`TRAINING_OVERHEAD`
  (one row's activations, a chunk of logits, the Python runtime and the allocator's slack);
* an **evaluation** process: ``W``, its key/value buffers, and :data:`EVALUATION_OVERHEAD`.

``tokens`` is the most an episode holds: ``rollout.max_total_tokens`` when set, else
:data:`EPISODE_TOKENS`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["EPISODE_TOKENS", "EVALUATION_OVERHEAD", "TRAINING_OVERHEAD", "MemoryBudget", "ModelFootprint", "available_memory", "model_footprint"]

GIB = 2**30
TRAINING_OVERHEAD = GIB
EVALUATION_OVERHEAD = 3 * GIB // 4
EPISODE_TOKENS = 2048
"""Tokens an episode is assumed to hold when the configuration sets no ``max_total_tokens``."""


@dataclass(frozen=True)
class ModelFootprint:
    """The sizes the estimates start from.

    Attributes:
        weight_bytes: the model's weights as loaded for training (float32).
        kv_bytes_per_token: keys and values of one token over all layers, float32.
    """

    weight_bytes: int
    kv_bytes_per_token: int

    def training_peak(self, rows: int, tokens: int) -> int:
        """Estimated peak bytes of a training process whose rollouts decode ``rows`` episodes of ``tokens``."""
        return 4 * self.weight_bytes + rows * tokens * self.kv_bytes_per_token + TRAINING_OVERHEAD

    def evaluation_peak(self, rows: int, tokens: int) -> int:
        """Estimated peak bytes of an evaluation process decoding ``rows`` episodes of ``tokens`` at once."""
        return self.weight_bytes + rows * tokens * self.kv_bytes_per_token + EVALUATION_OVERHEAD


def model_footprint(folder: str | Path) -> ModelFootprint | None:
    """The footprint of the checkpoint in ``folder`` (its ``config.json`` and safetensors files),
    or ``None`` when it is not a local checkpoint folder."""
    folder = Path(folder)
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    config = config.get("text_config", config)
    stored = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
    dtype_bytes = {"float16": 2, "bfloat16": 2}.get(str(config.get("torch_dtype") or config.get("dtype")), 4)
    heads = config.get("num_attention_heads") or 1
    head_dim = config.get("head_dim") or config.get("hidden_size", 0) // heads
    kv_heads = config.get("num_key_value_heads") or heads
    layers = config.get("num_hidden_layers") or 0
    return ModelFootprint(weight_bytes=stored * 4 // dtype_bytes, kv_bytes_per_token=2 * layers * kv_heads * head_dim * 4)


def available_memory() -> int:
    """Bytes of memory available to new processes now (``MemAvailable``; the machine's memory where
    the kernel does not say)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


@dataclass(frozen=True)
class MemoryBudget:
    """Memory the phases of an experiment may take together, and each kind's estimated peak.

    Attributes:
        available: bytes available when the experiment started.
        training: estimated peak of a training phase.
        evaluation: estimated peak of an evaluation phase.
    """

    available: int
    training: int
    evaluation: int

    def estimate(self, kind: str) -> int:
        """The estimate of a phase of ``kind`` (``train`` or ``eval``)."""
        return self.training if kind == "train" else self.evaluation

    def fits(self, kinds: list[str], kind: str) -> bool:
        """Whether a ``kind`` phase fits beside phases of ``kinds``; a phase alone always runs."""
        return not kinds or sum(map(self.estimate, [*kinds, kind])) <= self.available
