"""How much memory a training or evaluation process reaches at its peak, estimated before it starts.

``agentgym experiment`` runs several phases side by side; it starts a phase only when the
estimates of the phases running and of the new one fit in its :class:`MemoryBudget`: the memory
that was available when the experiment started, and at most the experiment's ``memory_limit_gb``
when it sets one. The estimates (``benchmarks/bench_memory.py`` measures the real peaks) count,
for a model of ``W`` weight bytes, ``k`` key/value bytes per token and ``a`` activation bytes per
token of a training pass:

* a **training** process: the larger of its rollouts, ``W + rows x tokens x k`` (weights and the
  key/value buffers, released before the update), and its update, ``2 W + M + tokens x a``
  (weights, gradients, the AdamW moments ``M`` and one whole pass's activations: an upper bound,
  now that the update's passes keep only each decoder layer's input and run the layers again one
  at a time in backward); ``M`` is ``2 W``, or nothing when the moments live on disk between steps
  (:func:`optimizer_state_folder`); plus :data:`TRAINING_OVERHEAD` (the Python runtime with torch
  and transformers, a chunk of logits, the allocator's slack);
* an **evaluation** process: ``W``, its key/value buffers, and :data:`EVALUATION_OVERHEAD`.

``tokens`` is the most an episode holds: ``rollout.max_total_tokens`` when set, else
:data:`EPISODE_TOKENS`.

It also holds the means the trainers use to keep a process's resident memory low:
:class:`MappedFile` (tensors in an unlinked file on disk, paged out of the process between uses;
the AdamW moments live there between optimiser steps) and :func:`return_freed_memory` (hands the
allocator's free pages back to the system).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import math
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = [
    "EPISODE_TOKENS",
    "EVALUATION_OVERHEAD",
    "IDEEP_CACHE",
    "OFFLOAD_OPTIMIZER_STATE",
    "ONEDNN_PRIMITIVE_CACHE",
    "TRAINING_OVERHEAD",
    "MappedFile",
    "MemoryBudget",
    "ModelFootprint",
    "available_memory",
    "bound_primitive_cache",
    "disk_folder",
    "model_footprint",
    "optimizer_state_folder",
    "peak_resident_mib",
    "resident_mib",
    "return_freed_memory",
]

GIB = 2**30
TRAINING_OVERHEAD = GIB // 2
EVALUATION_OVERHEAD = 3 * GIB // 4
EPISODE_TOKENS = 2048
"""Tokens an episode is assumed to hold when the configuration sets no ``max_total_tokens``."""


@dataclass(frozen=True)
class ModelFootprint:
    """The sizes the estimates start from.

    Attributes:
        weight_bytes: the model's weights as loaded for training (float32).
        kv_bytes_per_token: keys and values of one token over all layers, float32.
        activation_bytes_per_token: what a training pass keeps for backward per token, float32
            (about ``4 x layers x (8 x hidden + 4 x intermediate)`` for a Llama-style decoder:
            1.29 MB for SmolLM2-135M, whose prefix pass measured 1.25 MB).
    """

    weight_bytes: int
    kv_bytes_per_token: int
    activation_bytes_per_token: int = 0

    def training_peak(self, rows: int, tokens: int) -> int:
        """Estimated peak bytes of a training process whose rollouts decode ``rows`` episodes of ``tokens``."""
        weights = self.weight_bytes
        moments = 0 if optimizer_state_folder() is not None else 2 * weights
        # The rollouts may also hold a bfloat16 copy of the weights (autocast's products, cast once).
        rollouts = weights + weights // 2 + rows * tokens * self.kv_bytes_per_token
        update = 2 * weights + moments + tokens * self.activation_bytes_per_token
        return max(rollouts, update) + TRAINING_OVERHEAD

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
    hidden = config.get("hidden_size") or 0
    intermediate = config.get("intermediate_size") or 4 * hidden
    return ModelFootprint(
        weight_bytes=stored * 4 // dtype_bytes,
        kv_bytes_per_token=2 * layers * kv_heads * head_dim * 4,
        activation_bytes_per_token=4 * layers * (8 * hidden + 4 * intermediate),
    )


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


def peak_resident_mib() -> float:
    """The most resident memory this process has held so far, in MiB (0 where it cannot be read)."""
    try:
        import resource
    except ImportError:  # not on Windows
        return 0.0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


def resident_mib() -> float:
    """The resident memory this process holds now, in MiB (0 where it cannot be read: not Linux)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


@dataclass(frozen=True)
class MemoryBudget:
    """Memory the phases of an experiment may take together, and each kind's estimated peak.

    Attributes:
        available: bytes available when the experiment started.
        training: estimated peak of a training phase.
        evaluation: estimated peak of an evaluation phase.
        limit: the most the phases may hold together, however much is available (``None``: no
            limit but what is available).
    """

    available: int
    training: int
    evaluation: int
    limit: int | None = None

    def estimate(self, kind: str) -> int:
        """The estimate of a phase of ``kind`` (``train`` or ``eval``)."""
        return self.training if kind == "train" else self.evaluation

    def fits(self, kinds: list[str], kind: str) -> bool:
        """Whether a ``kind`` phase fits beside phases of ``kinds``; a phase alone always runs."""
        return not kinds or sum(map(self.estimate, [*kinds, kind])) <= self.room

    @property
    def room(self) -> int:
        """The most the phases may hold together: what is available, or the limit when lower."""
        return self.available if self.limit is None else min(self.available, self.limit)


_MADV_DONTNEED = 4
_IN_MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs", "devtmpfs", "hugetlbfs"})
_PAGE = 4096


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


def return_freed_memory() -> None:
    """Hand the C allocator's free pages back to the system (glibc's ``malloc_trim``).

    glibc keeps freed blocks below its mmap threshold (which grows to 32 MiB as large blocks are
    freed) for reuse, so after a phase that allocated and freed gigabytes (rollouts' key/value
    buffers, an update's activations) the process stays that large. Elsewhere this does nothing.
    """
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None)
    if trim is not None:
        trim(0)


ONEDNN_PRIMITIVE_CACHE = 64
"""Primitives oneDNN keeps (its default is 1,024) in a training process: see :func:`bound_primitive_cache`."""

IDEEP_CACHE = 16
"""Products PyTorch's ideep layer keeps (``LRU_CACHE_CAPACITY``; its default is 1,024) in a training
process: see :func:`bound_primitive_cache`."""


def bound_primitive_cache() -> None:
    """Keep at most :data:`ONEDNN_PRIMITIVE_CACHE` oneDNN primitives and :data:`IDEEP_CACHE` of
    ideep's cached products in this process, unless ``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` or
    ``LRU_CACHE_CAPACITY`` is set already.

    oneDNN computes the bfloat16 products of a CPU that has them natively (AMX, AVX512-BF16), and
    keeps a primitive, with its memory, for every shape it has met, up to 1,024; each row of a GRPO
    update has a length of its own, so a training process grew by ~140 MiB after each update there
    (docs/trainer.md); with 64 the growth fell to ~60 MiB and the level by ~170-250 MiB, with no slower
    update in a rough comparison. PyTorch's ideep layer, between torch and oneDNN, keeps a second
    cache per shape, also up to 1,024 (about a quarter of a MiB each: 200 new shapes of a bfloat16
    product left ~50 MiB in each cache); a product ideep no longer holds is rebuilt from oneDNN's
    cache, at no measured cost (docs/trainer.md). Both read their setting when they first build
    one, so this must run before any bfloat16 product of the process.
    """
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(ONEDNN_PRIMITIVE_CACHE))
    os.environ.setdefault("LRU_CACHE_CAPACITY", str(IDEEP_CACHE))


OFFLOAD_OPTIMIZER_STATE = True
"""A CPU model's AdamW moments live on disk between steps (``agentgym.trainers.modeling.OffloadedAdamW``);
``False``: in memory (the path before, ``benchmarks/bench_memory.py --paths old``)."""


def optimizer_state_folder() -> Path | None:
    """Where a CPU model's AdamW moments live between steps (the temporary folder), or ``None``:
    in memory (:data:`OFFLOAD_OPTIMIZER_STATE` is off, or that folder is not on disk)."""
    return disk_folder() if OFFLOAD_OPTIMIZER_STATE else None


def disk_folder(folder: str | Path | None = None) -> Path | None:
    """``folder`` (default: the system's temporary folder), or ``None`` when the files there would
    live in memory (tmpfs, ramfs) or the system is not Linux: a :class:`MappedFile` there would
    save nothing."""
    if _libc() is None:
        return None
    path = Path(folder or tempfile.gettempdir()).resolve()
    best, kind = "", ""
    try:
        with open("/proc/mounts", encoding="utf-8") as mounts:
            for line in mounts:
                fields = line.split()
                point = fields[1].replace("\\040", " ")
                if len(fields) > 2 and (path == Path(point) or Path(point) in path.parents) and len(point) >= len(best):
                    best, kind = point, fields[2]
    except OSError:
        return None
    return None if not best or kind in _IN_MEMORY_FILESYSTEMS else path


class MappedFile:
    """Tensors stored in one unlinked file, mapped shared into the process.

    The tensors are ordinary CPU tensors (in-place updates write the file's pages); after use,
    :meth:`page_out` drops their pages from the process (``madvise(MADV_DONTNEED)``): the data
    stays in the page cache and on disk, and the next access reads it back. The file has no name
    from the start, so nothing is left behind whatever ends the process.

    Args:
        nbytes: the file's size; :meth:`slot` hands out page-aligned pieces of it.
        folder: where the file is made: a folder on disk (see :func:`disk_folder`).

    Raises:
        OSError: the folder's disk has no room for ``nbytes`` (the file's blocks are reserved at once).
    """

    def __init__(self, nbytes: int, folder: Path) -> None:
        import torch

        fd, name = tempfile.mkstemp(dir=folder, prefix=".agentgym-mapped-")
        try:
            # The file's blocks are reserved now: a sparse file on a disk that fills up later would
            # kill the process (SIGBUS) at the first write to a page with no block behind it.
            # Without room it is an OSError (ENOSPC) here.
            os.posix_fallocate(fd, 0, max(nbytes, 1))
            self._storage = torch.from_file(name, shared=True, size=max(nbytes, 1), dtype=torch.uint8)
        except BaseException:
            os.close(fd)
            raise
        finally:
            os.unlink(name)
        # The descriptor stays open so that private_view can map the same file again.
        self._fd = fd
        self._used = 0
        self._libc = _libc()

    def __del__(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None:
            os.close(fd)

    @staticmethod
    def room(shape: torch.Size, dtype: torch.dtype) -> int:
        """The bytes a :meth:`slot` of ``shape`` and ``dtype`` takes (rounded up to whole pages)."""
        return -(-math.prod(shape) * dtype.itemsize // _PAGE) * _PAGE

    def slot(self, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
        """A new tensor in the file (page-aligned, so that it pages out on its own; zeros until written)."""
        nbytes = math.prod(shape) * dtype.itemsize
        start, self._used = self._used, self._used + self.room(shape, dtype)
        if self._used > self._storage.numel():
            raise ValueError(f"a MappedFile of {self._storage.numel()} bytes has no room for {nbytes} more")
        return self._storage[start : start + nbytes].view(dtype).view(shape)

    def holds(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` lives in this file's mapping."""
        return tensor.untyped_storage().data_ptr() == self._storage.untyped_storage().data_ptr()

    def private_view(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` (one of this file's) read through a private mapping of exactly its bytes,
        which goes away with the returned tensor: reading it (to save it) neither leaves the pages
        in the process nor makes a copy, and it is saved as a tensor of its own size."""
        import numpy as np
        import torch

        nbytes = tensor.numel() * tensor.element_size()
        if nbytes == 0:
            return tensor.clone()
        start = tensor.data_ptr() - self._storage.data_ptr()
        region = np.memmap(f"/proc/self/fd/{self._fd}", dtype=np.uint8, mode="c", offset=start, shape=(nbytes,))
        return torch.from_numpy(region).view(tensor.dtype).view(tensor.shape)

    def page_out(self, tensor: torch.Tensor) -> None:
        """Drop ``tensor``'s pages (one of this file's) from the process's resident memory."""
        if self._libc is not None:
            self._libc.madvise(ctypes.c_void_p(tensor.data_ptr()), ctypes.c_size_t(tensor.numel() * tensor.element_size()), _MADV_DONTNEED)
