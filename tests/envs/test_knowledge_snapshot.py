"""The knowledge snapshot: deterministic world, byte-identical builds, a safe build-once cache, and
full-text search with deterministic ranking."""

import multiprocessing
import sqlite3

import pytest

from agentgym.envs.knowledge import snapshot
from agentgym.envs.knowledge.articles import render_articles
from agentgym.envs.knowledge.names import normalize_name
from agentgym.envs.knowledge.search_tool import ArticleIndex
from agentgym.envs.knowledge.sql_env import SQLEnv
from agentgym.envs.knowledge.world import LAST_YEAR, WORLD_SEED, generate_world
from agentgym.tools import ToolError


@pytest.fixture(scope="module")
def world():
    return generate_world(WORLD_SEED)


@pytest.fixture
def index():
    articles = ArticleIndex(snapshot.open_readonly())
    yield articles
    articles.close()


def test_world_content_is_pinned(world):
    assert snapshot.content_hash(world, render_articles(world)) == snapshot.CONTENT_HASH
    assert generate_world(WORLD_SEED).tables == world.tables


def test_two_builds_are_byte_identical(tmp_path):
    first, second = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    assert snapshot.build_snapshot(first) == snapshot.build_snapshot(second) == snapshot.CONTENT_HASH
    assert snapshot.file_sha256(first) == snapshot.file_sha256(second)
    with pytest.raises(snapshot.SnapshotError, match="refusing to overwrite"):
        snapshot.build_snapshot(first)


def test_names_are_unique_and_facts_consistent(world):
    names = [
        row[c]
        for t, c in [
            ("countries", "name"),
            ("cities", "name"),
            ("universities", "name"),
            ("people", "name"),
            ("companies", "name"),
            ("works", "title"),
            ("awards", "name"),
        ]
        for row in world.tables[t]
    ]
    assert len({normalize_name(n) for n in names}) == len(names)
    for work in world.tables["works"]:
        creator, publisher = world.get("people", work["creator_id"]), world.get("companies", work["publisher_id"])
        assert creator["birth_year"] + 20 <= work["year"] <= LAST_YEAR
        assert publisher["founded_year"] <= work["year"]
    for country in world.tables["countries"]:
        cities = [c for c in world.tables["cities"] if c["country_id"] == country["id"]]
        assert world.get("cities", country["capital_city_id"]) in cities
        assert country["population"] >= sum(c["population"] for c in cities)
    ceremonies = [(w["award_id"], w["year"]) for w in world.tables["award_winners"]]
    assert len(ceremonies) == len(set(ceremonies))
    assert len({w["work_id"] for w in world.tables["award_winners"]}) == len(ceremonies)


def _build_in(cache: str) -> str:
    import os

    os.environ["AGENTGYM_CACHE"] = cache
    return str(snapshot.snapshot_path())


def test_cache_is_built_once_and_concurrent_builders_agree(tmp_path, monkeypatch):
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        paths = pool.map(_build_in, [str(tmp_path)] * 2)
    assert paths[0] == paths[1]
    files = list((tmp_path / "knowledge").iterdir())
    assert [f.name for f in files] == [f"world-v1-{snapshot.CONTENT_HASH[:16]}.sqlite"]  # no temporary left behind
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path))
    monkeypatch.setattr(snapshot, "_resolved", {})
    monkeypatch.setattr(snapshot, "build_snapshot", lambda *a, **k: pytest.fail("the cached snapshot was rebuilt"))
    env = SQLEnv(split="val")
    for seed in range(3):
        env.reset(seed=seed)
    env.close()


def test_a_generator_that_drifts_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path))
    monkeypatch.setattr(snapshot, "_resolved", {})
    monkeypatch.setattr(snapshot, "CONTENT_HASH", "f" * 64)
    with pytest.raises(snapshot.SnapshotError, match="bundled tasks would not match"):
        snapshot.snapshot_path()
    assert list((tmp_path / "knowledge").iterdir()) == []


def test_an_unwritable_cache_is_a_clear_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("AGENTGYM_CACHE", str(blocker))
    monkeypatch.setattr(snapshot, "_resolved", {})
    with pytest.raises(snapshot.SnapshotError, match="AGENTGYM_CACHE"):
        snapshot.snapshot_path()


def test_snapshot_connections_are_read_only():
    conn = snapshot.open_readonly()
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        conn.execute("DELETE FROM cities")
    conn.close()


def test_search_finds_every_entity_by_its_title(world, index):
    for article in render_articles(world):
        hits = [h["doc_id"] for h in index.search(article["title"], k=5)]
        assert article["doc_id"] in hits, article["title"]


def test_search_ranking_is_deterministic_and_ties_go_by_doc_id(index):
    # the ranking must be exactly (BM25 score, doc_id): the same order a direct query gives
    first = index.search("founded", k=10)
    assert first == index.search("founded", k=10)
    conn = snapshot.open_readonly()
    ranked = conn.execute(
        "SELECT a.doc_id, bm25(articles_fts, 10.0, 1.0) FROM articles_fts JOIN articles a ON a.rowid = articles_fts.rowid "
        "WHERE articles_fts MATCH '\"founded\"' ORDER BY 2, 1 LIMIT 10"
    ).fetchall()
    conn.close()
    assert [h["doc_id"] for h in first] == [r[0] for r in ranked]


@pytest.mark.parametrize("query", ['"unbalanced', "title: NEAR(a b)", "a* OR AND NOT", "(x)", "café ünïcode", "x" * 5000])
def test_search_treats_query_syntax_as_words(index, query):
    assert isinstance(index.search(query, k=3), list)


def test_search_and_open_errors_are_clear(index):
    with pytest.raises(ToolError, match="no words"):
        index.search("?!", k=3)
    with pytest.raises(ToolError, match="between 1 and 10"):
        index.search("city", k=11)
    with pytest.raises(ToolError, match="use a doc_id returned by search"):
        index.open("no-such-doc")
    some = index.search("city", k=1)[0]
    assert index.open(some["title"])["doc_id"] == some["doc_id"]  # a title works as an id
