"""The read-only SQL tool under attack: every hostile query gets a clear error within the time
limit, and the snapshot's bytes are the same afterwards."""

import sqlite3
import time

import pytest

from agentgym.envs.knowledge.snapshot import file_sha256, open_readonly, snapshot_path
from agentgym.envs.knowledge.sql_tool import QueryInterrupted, ReadOnlySQL
from agentgym.tools import ToolError

TIME_LIMIT_S = 2.0

HOSTILE = {
    "delete": ("DELETE FROM cities", "DELETE statements"),
    "update via CTE": ("WITH x AS (SELECT 1) UPDATE cities SET name = 'x'", "update cities"),
    "insert via CTE": ("WITH x AS (SELECT 1) INSERT INTO cities(name) VALUES ('x')", "insert cities"),
    "replace": ("REPLACE INTO cities(id) VALUES (1)", "REPLACE statements"),
    "drop": ("DROP TABLE cities", "DROP statements"),
    "drop behind a comment": ("-- harmless\nDROP TABLE cities", "DROP statements"),
    "create temp": ("/* x */ CREATE TEMP TABLE t(x)", "CREATE statements"),
    "attach": ("ATTACH DATABASE '/tmp/evil.db' AS evil", "ATTACH statements"),
    "vacuum into": ("VACUUM INTO '/tmp/copy.db'", "VACUUM statements"),
    "pragma write": ("PRAGMA user_version = 7", "PRAGMA user_version"),
    "pragma journal": ("PRAGMA journal_mode = WAL", "PRAGMA journal_mode"),
    "pragma writable_schema": ("PRAGMA writable_schema = ON", "PRAGMA writable_schema"),
    "transaction": ("BEGIN IMMEDIATE", "BEGIN statements"),
    "two statements": ("SELECT 1; DROP TABLE cities", "only one SQL statement"),
    "random": ("SELECT random()", "random()"),
    "clock": ("SELECT date('now')", "date()"),
    "current_timestamp": ("SELECT CURRENT_TIMESTAMP", "current_timestamp()"),
    "load_extension": ("SELECT load_extension('/tmp/evil.so')", "load_extension()"),
    "zeroblob": ("SELECT zeroblob(2000000000)", "zeroblob()"),
    "printf width": ("SELECT printf('%.*c', 1000000000, 'x')", "printf()"),
    "hidden tables": ("SELECT body FROM articles LIMIT 1", "reading table 'articles'"),
    "fts shadow tables": ("SELECT * FROM articles_fts_data", "reading table 'articles_fts_data'"),
    "recursive CTE bomb": ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c", "was stopped"),
    "recursive string bomb": ("WITH RECURSIVE c(x) AS (SELECT 'a' UNION ALL SELECT x || x FROM c) SELECT count(*) FROM c", "too big"),
    "group_concat bomb": ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT group_concat(x) FROM c", "was stopped"),
    "cross join": ("SELECT count(*) FROM people a, people b, people c", "was stopped"),
    "sorted cross join": ("SELECT a.name FROM people a, people b, works c ORDER BY a.name || b.name || c.title LIMIT 1", "was stopped"),
    "nested replace": ("SELECT " + "replace(" * 6 + "'aaaaaaaaaa'" + ", 'a', 'aaaaaaaaaa')" * 6, "too big"),
    "syntax error": ("SELEC name FROM cities", "syntax error"),
    "empty": ("   ", "empty"),
    "overlong": ("SELECT 1 -- " + "x" * 5000, "limit is"),
}


@pytest.fixture(scope="module")
def runner():
    sql = ReadOnlySQL(open_readonly(), time_limit_s=TIME_LIMIT_S)
    yield sql
    sql.close()


@pytest.fixture(scope="module")
def snapshot_hash():
    return file_sha256(snapshot_path())


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_sql_is_refused_clearly_and_quickly(runner, snapshot_hash, name):
    query, message = HOSTILE[name]
    start = time.monotonic()
    with pytest.raises(ToolError) as caught:
        runner.run(query)
    assert time.monotonic() - start < TIME_LIMIT_S + 1.0
    assert message in str(caught.value)
    assert file_sha256(snapshot_path()) == snapshot_hash
    assert runner.run("SELECT COUNT(*) FROM cities")["rows"][0][0] > 0  # the connection still works


def test_the_authorizer_refuses_writes_even_without_the_statement_check(runner, snapshot_hash):
    # the friendly first-word check is only for messages: the authorizer must hold on its own
    conn = runner._conn
    for statement in ("DROP TABLE cities", "ATTACH DATABASE ':memory:' AS x", "CREATE TEMP TABLE t(x)", "PRAGMA query_only = 0"):
        with pytest.raises(sqlite3.DatabaseError, match="not authorized"):
            conn.execute(statement)
    assert file_sha256(snapshot_path()) == snapshot_hash


def test_the_step_budget_stops_at_the_same_point_every_time():
    sql = ReadOnlySQL(open_readonly(), max_steps=200_000, time_limit_s=60.0)
    query = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c"
    messages = set()
    for _ in range(3):
        with pytest.raises(QueryInterrupted) as caught:
            sql.run(query)
        messages.add(str(caught.value))
    sql.close()
    assert len(messages) == 1 and not QueryInterrupted.cacheable


def test_rows_are_capped_and_truncation_reported():
    sql = ReadOnlySQL(open_readonly(), max_rows=7)
    result = sql.run("SELECT id, name FROM people ORDER BY id")
    assert result["row_count"] == 7 and result["truncated"] and result["columns"] == ["id", "name"]
    assert sql.run("SELECT id FROM people WHERE id <= 3")["truncated"] is False
    sql.close()


def test_legitimate_queries_work(runner):
    assert runner.run("PRAGMA table_info(cities)")["rows"][0][1] == "id"
    result = runner.run(
        "WITH big AS (SELECT country_id, SUM(population) AS p FROM cities GROUP BY country_id) "
        "SELECT co.name, big.p, RANK() OVER (ORDER BY big.p DESC) FROM big JOIN countries co ON co.id = big.country_id LIMIT 3"
    )
    assert result["row_count"] == 3
    assert runner.run("SELECT COUNT(*) FROM people a JOIN works b ON b.creator_id = a.id")["rows"] == [[720]]
