"""psycopg2 (Debian's python3-psycopg2) through pgfleet in transaction mode. psycopg2 never
prepares at the protocol level; its applications use SQL PREPARE/EXECUTE/DEALLOCATE inside a
transaction, and DEALLOCATE ALL / DISCARD ALL. Here 15 psycopg2 clients do that on the same two
servers as 5 psycopg 3 clients whose statements pgfleet prepares: each DEALLOCATE ALL or DISCARD
ALL wipes the pgfleet statements of the server it ran on, and pgfleet must prepare them again
there rather than let the next Bind fail."""

import psycopg
import psycopg2

from conftest import assert_clean_log, assert_no_prepared_failures, assert_server_side_prepared
from conftest import run_clients

PSYCOPG2_CLIENTS = 15
PSYCOPG3_CLIENTS = 5
TRANSACTIONS = 30


def test_sql_prepare_and_deallocate_all_next_to_protocol_statements(pg, pgfleet):
    pg.query("DROP TABLE IF EXISTS psycopg2_items; "
             "CREATE TABLE psycopg2_items (client int, n int)")
    fleet = pgfleet(pool_size=2)
    since = pg.log_offset()
    marker = "drv_psycopg2_mix"
    sql_prepared_seen = []

    def psycopg2_client(i):
        conn = psycopg2.connect(fleet.dsn())
        try:
            for n in range(TRANSACTIONS):
                if n % 6 == 5:
                    conn.autocommit = True
                    with conn.cursor() as cur:
                        cur.execute("DISCARD ALL" if n % 12 == 5 else "DEALLOCATE ALL")
                    conn.autocommit = False
                    continue
                with conn.cursor() as cur:
                    # A server-side prepared statement that lives and dies in one transaction.
                    cur.execute(f"PREPARE p2_{i} (int, int) AS "
                                f"INSERT INTO psycopg2_items VALUES ($1, $2)")
                    cur.execute(f"EXECUTE p2_{i} (%s, %s)", (i, n))
                    cur.execute("SELECT count(*) FROM pg_prepared_statements WHERE name = %s",
                                (f"p2_{i}",))
                    sql_prepared_seen.append(cur.fetchone()[0])
                    cur.execute(f"DEALLOCATE p2_{i}")
                    cur.execute("SELECT %s + 1", (n,))
                    assert cur.fetchone()[0] == n + 1
                conn.commit()
        finally:
            conn.close()

    def psycopg3_client(i):
        with psycopg.connect(fleet.dsn(), prepare_threshold=0, autocommit=True) as conn:
            for n in range(TRANSACTIONS * 2):
                value = conn.execute(f"SELECT %s::int + 7 AS {marker}", (n,)).fetchone()[0]
                assert value == n + 7

    def client(i):
        if i < PSYCOPG2_CLIENTS:
            psycopg2_client(i)
        else:
            psycopg3_client(i)

    errors = run_clients(client, PSYCOPG2_CLIENTS + PSYCOPG3_CLIENTS, timeout=60)
    assert_no_prepared_failures([str(e) for e in errors])
    assert not errors, errors[:3]
    assert sql_prepared_seen and set(sql_prepared_seen) == {1}
    per_client = TRANSACTIONS - TRANSACTIONS // 6
    assert pg.query("SELECT count(*) FROM psycopg2_items") == [PSYCOPG2_CLIENTS * per_client]

    # Deterministically now, on a pool of one server: a psycopg 3 client prepares, psycopg2
    # wipes the server with DEALLOCATE ALL, and the statement still runs: pgfleet prepared it
    # again on the server that had it before.
    solo = pgfleet(pool_size=1)
    solo_marker = "drv_psycopg2_solo"
    solo_since = pg.log_offset()
    with psycopg.connect(solo.dsn(), prepare_threshold=0, autocommit=True) as p3:
        assert p3.execute(f"SELECT %s::int + 7 AS {solo_marker}", (1,)).fetchone()[0] == 8
        wiper = psycopg2.connect(solo.dsn())
        try:
            with wiper.cursor() as cur:
                cur.execute("DEALLOCATE ALL")
            wiper.commit()
        finally:
            wiper.close()
        for n in range(3):
            assert p3.execute(f"SELECT %s::int + 7 AS {solo_marker}", (n,)).fetchone()[0] == n + 7
    parses = [(pid, name) for pid, kind, name in pg.statement_log(solo_marker, solo_since)
              if kind == "parse"]
    assert len(parses) == 2 and parses[0] == parses[1] and parses[0][1].startswith("pgfleet_"), (
        f"expected one Parse before and one after DEALLOCATE ALL on the one server: {parses}")
    assert_clean_log(solo)

    stats = assert_server_side_prepared(pg, marker, since)
    parses = [(pid, name) for pid, kind, name in pg.statement_log(marker, since)
              if kind == "parse"]
    repeated = {p for p in parses if parses.count(p) > 1}
    assert_clean_log(fleet)
    print("psycopg2 mix:", stats, "statements prepared again on a server after DEALLOCATE ALL "
          "or DISCARD ALL:", len(repeated))
