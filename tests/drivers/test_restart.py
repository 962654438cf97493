"""PostgreSQL restarts under psycopg 3 and asyncpg clients that hold prepared statements through
pgfleet: the servers, and every statement on them, are gone; the clients keep their connections
to pgfleet and their statement names, and pgfleet prepares the statements again on the new
servers. A transaction that meets a server dying with PostgreSQL may fail with a connection
error and is retried (bounded); a prepared statement error is never acceptable."""

import asyncio
import time

import asyncpg
import psycopg

from conftest import assert_no_prepared_failures, run_clients

PSYCOPG_CLIENTS = 10
ASYNCPG_TASKS = 10
BEFORE = 5
AFTER = 10
ATTEMPTS = 3


def test_statements_survive_postgres_restart(pg, pgfleet):
    fleet = pgfleet(pool_size=2)
    marker = "drv_restart"
    p3_sql = f"SELECT %s::int + 100 AS {marker}_p3"
    apg_sql = f"SELECT $1::int + 200 AS {marker}_apg"
    errors = []  # every error seen, retried or not: none may be a prepared statement failure
    p3_conns = {}

    def p3_transaction(i, n):
        for attempt in range(ATTEMPTS):
            conn = p3_conns.get(i)
            try:
                if conn is None or conn.closed:
                    conn = p3_conns[i] = psycopg.connect(fleet.dsn(), prepare_threshold=0)
                with conn.transaction():
                    assert conn.execute(p3_sql, (n,)).fetchone()[0] == n + 100
                    assert conn.execute(p3_sql, (n + 1,)).fetchone()[0] == n + 101
                return
            except psycopg.OperationalError as e:
                errors.append(f"psycopg: {e}")
                if attempt == ATTEMPTS - 1:
                    raise
                time.sleep(0.2)

    async def apg_transaction(conns, i, n):
        for attempt in range(ATTEMPTS):
            try:
                if conns.get(i) is None or conns[i].is_closed():
                    conns[i] = await asyncpg.connect(host="127.0.0.1", port=fleet.port,
                                                     user="postgres", database="postgres",
                                                     timeout=10)
                async with conns[i].transaction():
                    assert await conns[i].fetchval(apg_sql, n) == n + 200
                return
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as e:
                errors.append(f"asyncpg: {type(e).__name__}: {e}")
                if attempt == ATTEMPTS - 1 or isinstance(e, asyncpg.PostgresSyntaxError):
                    raise
                await asyncio.sleep(0.2)

    async def apg_phase(conns, first, count):
        async def task(i):
            for n in range(first, first + count):
                await apg_transaction(conns, i, n)

        return await asyncio.wait_for(
            asyncio.gather(*(task(i) for i in range(ASYNCPG_TASKS)), return_exceptions=True), 60)

    def p3_phase(first, count):
        def client(i):
            for n in range(first, first + count):
                p3_transaction(i, n)

        return run_clients(client, PSYCOPG_CLIENTS, timeout=60)

    loop = asyncio.new_event_loop()
    apg_conns = {}
    try:
        failed = p3_phase(0, BEFORE)
        failed += [r for r in loop.run_until_complete(apg_phase(apg_conns, 0, BEFORE))
                   if isinstance(r, BaseException)]
        assert not failed and not errors, (failed[:3], errors[:3])
        before = fleet.server_statements()
        assert any(marker in q for s in before.values() for q in s.values()), before

        pg.restart()
        since = pg.log_offset()

        failed = p3_phase(BEFORE, AFTER)
        failed += [r for r in loop.run_until_complete(apg_phase(apg_conns, BEFORE, AFTER))
                   if isinstance(r, BaseException)]
        assert_no_prepared_failures(errors + [str(e) for e in failed])
        assert not failed, (failed[:3], errors[:5])
        # The same client-side statements ran on new servers, under pgfleet's names, prepared
        # there again by pgfleet (the clients sent no Parse after the restart).
        after = fleet.server_statements()
        assert not set(after) & set(before), (before, after)
        assert any(marker in q and name.startswith("pgfleet_")
                   for s in after.values() for name, q in s.items()), after
        parses = [e for e in pg.statement_log(marker, since) if e[1] == "parse"]
        assert parses and all(name.startswith("pgfleet_") for _, _, name in parses), parses
        print(f"restart: {len(errors)} connection error(s) retried:", errors[:4])
    finally:
        for conn in p3_conns.values():
            conn.close()
        for conn in apg_conns.values():
            if conn is not None:
                loop.run_until_complete(conn.close(timeout=5))
        loop.close()
