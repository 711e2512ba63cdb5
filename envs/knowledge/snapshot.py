"""The world snapshot: a SQLite file with the entity tables, the articles and their FTS5 index.

The snapshot is built once per machine into the cache directory (``$AGENTGYM_CACHE``, or
``~/.cache/agentgym``) under a name carrying the generator version and the content hash, and is
then only ever opened read-only: environments never rebuild it on ``reset``. Building writes a
temporary file in the same directory and renames it into place, so concurrent processes either
see no snapshot or a complete one; two racing builders write identical bytes.

:data:`CONTENT_HASH` pins the generated content (rows and article text). If generation ever
produces something else (a changed generator, a platform difference), opening fails loudly
rather than pairing the bundled tasks with a different world.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import tempfile
import threading
from pathlib import Path
from typing import Any

import sqlite_utils

from agentgym.envs.knowledge.articles import render_articles
from agentgym.envs.knowledge.world import FOREIGN_KEYS, GENERATOR_VERSION, TABLES, WORLD_SEED, World, generate_world

__all__ = ["CONTENT_HASH", "SnapshotError", "build_snapshot", "cache_dir", "content_hash", "file_sha256", "open_readonly", "snapshot_path"]

# sha256 of the canonical JSON of the world's rows and articles (tests regenerate and compare).
CONTENT_HASH = "7562c8aef94877c828c22e6e61cfa7570773555c6ae29a64d07d553baebc7bec"
# Ranking weights of the FTS5 columns (title, body): a match in the title counts ten times more.
BM25_WEIGHTS = (10.0, 1.0)
_PYTHON_TYPES = {"INTEGER": int, "TEXT": str, "REAL": float}

_lock = threading.Lock()
_resolved: dict[Path, Path] = {}


class SnapshotError(RuntimeError):
    """The snapshot cannot be built or does not match the pinned content."""


def cache_dir() -> Path:
    """The per-machine cache directory (``$AGENTGYM_CACHE`` or ``~/.cache/agentgym``)."""
    root = os.environ.get("AGENTGYM_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "agentgym"


def content_hash(world: World, articles: list[dict[str, Any]]) -> str:
    """SHA-256 of the canonical JSON of the rows and articles: the snapshot's identity.

    It is independent of the SQLite library, unlike the bytes of the database file.
    """
    canonical = json.dumps({"version": GENERATOR_VERSION, "tables": world.tables, "articles": articles}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes (to show that a snapshot is byte-identical or unchanged)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def build_snapshot(path: str | Path, world: World | None = None) -> str:
    """Write the snapshot database to ``path`` (which must not exist) and return its content hash."""
    path = Path(path)
    if path.exists():
        raise SnapshotError(f"refusing to overwrite an existing file: {path}")
    world = world if world is not None else generate_world(WORLD_SEED)
    articles = render_articles(world)
    db = sqlite_utils.Database(sqlite3.connect(path))
    try:
        db.execute("PRAGMA journal_mode = OFF")  # a fresh private file: nothing to roll back to
        deferred = []  # countries and cities reference each other: one side's key is added later
        for table, columns in TABLES.items():
            pk: Any = "id" if columns[0].name == "id" else ("award_id", "year")
            ready = [(column, other, "id") for column, other in FOREIGN_KEYS[table] if db[other].exists() or other == table]
            deferred += [(table, column, other, "id") for column, other in FOREIGN_KEYS[table] if (column, other, "id") not in ready]
            db.create_table(table, {c.name: _PYTHON_TYPES[c.type] for c in columns}, pk=pk, foreign_keys=ready)
        db.add_foreign_keys(deferred)
        for table in TABLES:
            db.table(table).insert_all(world.tables[table])
        db.create_table("articles", {"doc_id": str, "entity_type": str, "entity_id": int, "title": str, "body": str}, pk="doc_id")
        db.table("articles").insert_all(articles)
        db.table("articles").enable_fts(["title", "body"], fts_version="FTS5", tokenize="porter unicode61")
        db.conn.commit()
        db.execute("VACUUM")
    finally:
        db.close()
    return content_hash(world, articles)


def snapshot_path() -> Path:
    """The snapshot file of this generator version, built into the cache on first use.

    Raises:
        SnapshotError: the cache cannot be written, or generation does not reproduce
            :data:`CONTENT_HASH`.
    """
    directory = cache_dir() / "knowledge"
    with _lock:  # threads of one process share one build; processes rely on the atomic rename
        if directory in _resolved:
            return _resolved[directory]
        target = directory / f"world-v{GENERATOR_VERSION}-{CONTENT_HASH[:16]}.sqlite"
        if not target.is_file():
            _build_into(target)
        _resolved[directory] = target
        return target


def _build_into(target: Path) -> None:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=".building-", suffix=".sqlite", dir=target.parent)
    except OSError as exc:
        raise SnapshotError(f"cannot write the snapshot cache in {target.parent}: {exc}; set AGENTGYM_CACHE to a writable directory") from exc
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        tmp.unlink()  # build_snapshot creates the file itself
        built = build_snapshot(tmp)
        if built != CONTENT_HASH:
            raise SnapshotError(
                f"the world generator produced content {built[:16]}..., but this version pins {CONTENT_HASH[:16]}...; the bundled tasks would not match it"
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def open_readonly(path: str | Path | None = None) -> sqlite3.Connection:
    """A read-only connection to the snapshot (``mode=ro`` and ``immutable``: SQLite refuses writes).

    The connection may be shared between threads; callers serialise its use.
    """
    path = Path(path) if path is not None else snapshot_path()
    uri = f"{path.resolve().as_uri()}?mode=ro&immutable=1"
    return sqlite3.connect(uri, uri=True, check_same_thread=False)
