"""psycopg 3 pipelines and statement-cache maintenance through pgfleet behave as on a direct
connection (issue 19): each scenario runs against PostgreSQL and through pgfleet in transaction
mode, and what the client sees (values, and the class of each error) must be the same."""

import psycopg
import pytest

STATEMENTS = ["select 1", "select 2", "select 3"]


def outcome(fn):
    try:
        return ("ok", fn())
    except psycopg.Error as e:
        return ("error", type(e).__name__)


def pipeline_with_error(conn, position):
    """An error on the first, middle or last statement of a pipeline, then commit."""
    statements = list(STATEMENTS)
    statements[position] = "select 1 from nosuchtable"
    seen = []
    seen.append(outcome(lambda: _run_pipeline(conn, statements)))
    seen.append(outcome(conn.rollback))
    seen.append(outcome(lambda: _run_pipeline(conn, STATEMENTS)))
    seen.append(outcome(lambda: conn.execute("select 42").fetchone()[0]))
    conn.rollback()
    return seen


def _run_pipeline(conn, statements):
    with conn.pipeline():
        cursors = [conn.execute(s) for s in statements]
        conn.commit()
    return [c.fetchone()[0] for c in cursors]


def cache_maintenance(conn, statement):
    """DEALLOCATE ALL or DISCARD ALL inside a transaction with prepared statements around."""
    seen = []
    for n in range(3):
        seen.append(outcome(lambda n=n: conn.execute("select %s::int", (n,)).fetchone()[0]))
    seen.append(outcome(lambda: conn.execute(statement).statusmessage))
    seen.append(outcome(conn.rollback))
    for n in range(3):
        seen.append(outcome(lambda n=n: conn.execute("select %s::int", (n,)).fetchone()[0]))
    seen.append(outcome(conn.commit))
    return seen


@pytest.mark.parametrize("position", [0, 1, 2])
def test_error_in_a_pipeline_then_rollback_commit_and_a_new_pipeline(pg, pgfleet, position):
    fleet = pgfleet(pool_size=2)
    results = []
    for dsn in (pg.dsn(), fleet.dsn()):
        with psycopg.connect(dsn, prepare_threshold=0) as conn:
            results.append(pipeline_with_error(conn, position))
    assert results[1] == results[0]


@pytest.mark.parametrize("statement", ["DEALLOCATE ALL", "DISCARD ALL"])
def test_cache_maintenance_inside_a_transaction(pg, pgfleet, statement):
    fleet = pgfleet(pool_size=2)
    results = []
    for dsn in (pg.dsn(), fleet.dsn()):
        with psycopg.connect(dsn, prepare_threshold=0) as conn:
            results.append(cache_maintenance(conn, statement))
    assert results[1] == results[0]
