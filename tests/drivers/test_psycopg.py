"""psycopg 3 (Debian's python3-psycopg) through pgfleet in transaction mode, with every query
prepared on first use (prepare_threshold=0), plainly and in pipeline mode."""

import time

import psycopg
import pytest

from conftest import assert_clean_log, assert_no_prepared_failures, assert_server_side_prepared
from conftest import run_clients

CLIENTS = 20
TRANSACTIONS = 25


@pytest.fixture
def items(pg):
    pg.query("DROP TABLE IF EXISTS psycopg_items; "
             "CREATE TABLE psycopg_items (client int, n int, note text)")
    yield "psycopg_items"


def test_prepare_threshold_0(pg, pgfleet, items):
    fleet = pgfleet(pool_size=2)
    since = pg.log_offset()
    marker = "drv_psycopg3_plain"
    prepared_names = []

    def client(i):
        with psycopg.connect(fleet.dsn(), prepare_threshold=0) as conn:
            for n in range(TRANSACTIONS):
                with conn.cursor() as cur:
                    cur.execute(f"SELECT %s::int + 1 AS {marker}", (n,))
                    assert cur.fetchone()[0] == n + 1
                    cur.execute(f"SELECT %s::text || %s::text AS {marker}, %s::int * 2",
                                (f"c{i}", "x", n))
                    assert cur.fetchone() == (f"c{i}x", 2 * n)
                    cur.execute(f"INSERT INTO {items} (client, n, note) "
                                f"VALUES (%s, %s, %s) /* {marker} */", (i, n, "plain"))
                    # Every few transactions a ROLLBACK: psycopg then sends DEALLOCATE ALL and
                    # prepares everything again (its documented behaviour).
                if n % 10 == 9:
                    conn.rollback()
                else:
                    conn.commit()
            prepared_names.append(len(conn._prepared._names))

    errors = run_clients(client, CLIENTS, timeout=60)
    assert_no_prepared_failures([str(e) for e in errors])
    assert not errors, errors[:3]
    # The driver itself reports its statements as prepared.
    assert prepared_names and min(prepared_names) >= 1, prepared_names
    expected = CLIENTS * (TRANSACTIONS - TRANSACTIONS // 10)
    assert pg.query(f"SELECT count(*) FROM {items}") == [expected]
    stats = assert_server_side_prepared(pg, marker, since)
    held = fleet.server_statements()
    assert any(marker in q and name.startswith("pgfleet_")
               for statements in held.values() for name, q in statements.items()), held
    assert_clean_log(fleet)
    print("psycopg prepare_threshold=0:", stats)


def test_pipeline_mode(pg, pgfleet, items):
    fleet = pgfleet(pool_size=2)
    since = pg.log_offset()
    marker = "drv_psycopg3_pipeline"

    def client(i):
        with psycopg.connect(fleet.dsn(), prepare_threshold=0) as conn:
            # One transaction per pipeline: BEGIN, statements and COMMIT without waiting.
            for n in range(TRANSACTIONS // 2):
                # One cursor per query: in pipeline mode a reused cursor keeps earlier results.
                with conn.pipeline():
                    first = conn.execute(f"SELECT %s::int + 1 AS {marker}", (n,))
                    with conn.cursor() as cur:
                        cur.executemany(
                            f"INSERT INTO {items} (client, n, note) "
                            f"VALUES (%s, %s, %s) /* {marker} */",
                            [(i, n, "pipe"), (i, n, "pipe")])
                    last = conn.execute(f"SELECT %s::text AS {marker}, %s::int", (f"c{i}", n))
                    conn.commit()
                    assert first.fetchone() == (n + 1,)
                    assert last.fetchone() == (f"c{i}", n)
            # Autocommit: several transactions in one pipeline, one per Sync. The server is
            # released at each Sync while the client has already sent what follows.
            conn.autocommit = True
            for n in range(TRANSACTIONS // 5):
                with conn.pipeline() as p:
                    cursors = []
                    for k in range(4):
                        cur = conn.cursor()
                        cur.execute(f"SELECT %s::int * 10 + %s::int AS {marker}", (n, k))
                        cursors.append((k, cur))
                        p.sync()
                    for k, cur in cursors:
                        assert cur.fetchone()[0] == n * 10 + k

    errors = run_clients(client, CLIENTS, timeout=60)
    assert_no_prepared_failures([str(e) for e in errors])
    assert not errors, errors[:3]
    assert pg.query(f"SELECT count(*) FROM {items} WHERE note = 'pipe'") == [
        CLIENTS * (TRANSACTIONS // 2) * 2]
    stats = assert_server_side_prepared(pg, marker, since)
    assert_clean_log(fleet)
    print("psycopg pipeline:", stats)


def test_more_statements_than_prepared_max(pg, pgfleet):
    """psycopg keeps prepared_max statements (100 by default) and drops the oldest with the SQL
    command DEALLOCATE <its name> (sent with the extended protocol): pgfleet must not let that
    reach a server that never had the name, so it forgets the client's statement and answers
    itself."""
    fleet = pgfleet(pool_size=2)
    since = pg.log_offset()
    marker = "drv_psycopg3_rotate"

    def client(i):
        with psycopg.connect(fleet.dsn(), prepare_threshold=0, autocommit=True) as conn:
            conn.prepared_max = 5
            deadline = time.monotonic() + 30
            for n in range(24):
                assert time.monotonic() < deadline
                k = n % 8  # 8 distinct statements through a cache of 5: rotation
                value = conn.execute(f"SELECT %s::int + {k} AS {marker}", (n,)).fetchone()[0]
                assert value == n + k

    errors = run_clients(client, 4, timeout=60)
    assert_no_prepared_failures([str(e) for e in errors])
    assert not errors, errors[:3]
    assert_server_side_prepared(pg, marker, since, min_servers=1)
