"""Session state in transaction mode through real drivers (README, "Session state in transaction
mode"): psycopg 3 (extended protocol, non-autocommit transactions) and asyncpg. A neighbour
holding a transaction on a pool of 2 makes the client under test change servers."""

import asyncio
import select
import time
import urllib.request

import asyncpg
import psycopg
import pytest
from psycopg import errors


def test_psycopg_settings_and_pins_follow_the_client(pg, pgfleet):
    fleet = pgfleet(pool_size=2, pool_extra=", max_pinned_servers: 1")
    with psycopg.connect(fleet.dsn()) as conn, \
            psycopg.connect(fleet.dsn(), autocommit=True) as neighbour:
        # psycopg's default: every statement in a transaction, committed by conn.commit().
        conn.execute("SET statement_timeout = '2345ms'")
        conn.execute("SELECT set_config('app.tenant', 'acme', false)")
        conn.commit()
        conn.execute("SET work_mem = '3MB'")
        conn.rollback()
        seen = set()
        for round_ in range(4):
            # Who opens a transaction first alternates, so the client gets the server the
            # neighbour used last every other round.
            if round_ % 2:
                pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            with neighbour.transaction():
                neighbour_pid = neighbour.execute("SELECT pg_backend_pid()").fetchone()[0]
                assert neighbour.execute("SHOW statement_timeout").fetchone()[0] == "0"
                if not round_ % 2:
                    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
                assert pid != neighbour_pid
                seen.add(pid)
                assert conn.execute("SHOW statement_timeout").fetchone()[0] == "2345ms"
                assert conn.execute("SELECT current_setting('app.tenant')").fetchone()[0] == "acme"
                assert conn.execute("SHOW work_mem").fetchone()[0] == "4MB"
                conn.commit()
        assert len(seen) == 2, seen
        # An advisory lock pins: nobody else can take it, and with max_pinned_servers: 1 another
        # pin is refused with an ERROR; trying for the lock answers false, as PostgreSQL does
        # (issue 34); the neighbour goes on.
        conn.execute("SELECT pg_advisory_lock(%s)", (31,))
        conn.commit()
        assert pg.query("SELECT pg_try_advisory_lock(31)") == [False]
        with pytest.raises(errors.ConfigurationLimitExceeded, match="max_pinned_servers"):
            neighbour.execute("CREATE TEMP TABLE t (n int)")
        assert neighbour.execute("SELECT pg_try_advisory_lock(%s)", (31,)).fetchone()[0] is False
        assert neighbour.execute("SELECT 1").fetchone()[0] == 1
        conn.execute("SELECT pg_advisory_unlock(%s)", (31,))
        conn.commit()
        # Released: a try that fails takes no pin, one that succeeds does until unlocked.
        assert neighbour.execute("SELECT pg_try_advisory_lock(31)").fetchone()[0] is True
        neighbour.execute("SELECT pg_advisory_unlock_all()")


def test_asyncpg_temp_table_and_prepared_statement(pg, pgfleet):
    fleet = pgfleet(pool_size=2)

    async def main():
        conn = await asyncpg.connect(host="127.0.0.1", port=fleet.port, user="postgres",
                                     database="postgres")
        neighbour = await asyncpg.connect(host="127.0.0.1", port=fleet.port, user="postgres",
                                          database="postgres", statement_cache_size=0)
        try:
            await conn.execute("CREATE TEMP TABLE scratch (n int)")
            for n in range(3):
                async with neighbour.transaction():
                    assert await neighbour.fetchval(
                        "SELECT to_regclass('pg_temp.scratch') IS NULL")
                    await conn.execute("INSERT INTO scratch VALUES ($1)", n)
            assert await conn.fetchval("SELECT count(*) FROM scratch") == 3
            await conn.execute("PREPARE double (int) AS SELECT $1 * 2")
            for _ in range(3):
                async with neighbour.transaction():
                    await neighbour.fetchval("SELECT 1")
                    await conn.execute("EXECUTE double(21)")
            await conn.execute("DROP TABLE scratch")
            await conn.execute("DEALLOCATE double")
            # Released: both servers serve the neighbour and a third client again.
            third = await asyncpg.connect(host="127.0.0.1", port=fleet.port, user="postgres",
                                          database="postgres")
            try:
                async with neighbour.transaction(), third.transaction():
                    pids = {await neighbour.fetchval("SELECT pg_backend_pid()"),
                            await third.fetchval("SELECT pg_backend_pid()")}
                    assert len(pids) == 2
            finally:
                await third.close()
        finally:
            await conn.close()
            await neighbour.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_asyncpg_startup_search_path_stays_its_clients(pg, pgfleet):
    """search_path given in the startup packet (asyncpg's server_settings, pgjdbc's
    currentSchema), on a server that does not report it (PostgreSQL before 18): a neighbour's SET
    of it does not override it, it does not leak to a client that asked for none, and RESET
    returns to it, as on a direct connection. One server, so every client gets the same one."""
    fleet = pgfleet(pool_size=1)

    async def main():
        args = dict(host="127.0.0.1", port=fleet.port, user="postgres", database="postgres",
                    statement_cache_size=0)
        setter = await asyncpg.connect(**args)
        startup = await asyncpg.connect(**args, server_settings={"search_path": "startup_schema"})
        plain = await asyncpg.connect(**args)
        try:
            default = await plain.fetchval("SHOW search_path")
            assert default != "startup_schema"
            await setter.execute("SET search_path = set_schema")
            for _ in range(3):
                assert await startup.fetchval("SHOW search_path") == "startup_schema"
                assert await plain.fetchval("SHOW search_path") == default
                assert await setter.fetchval("SHOW search_path") == "set_schema"
            await startup.execute("SET search_path = other_schema")
            assert await startup.fetchval("SHOW search_path") == "other_schema"
            await startup.execute("RESET search_path")
            assert await plain.fetchval("SHOW search_path") == default
            assert await startup.fetchval("SHOW search_path") == "startup_schema"
        finally:
            for conn in (setter, startup, plain):
                await conn.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def _next_notify(conn, timeout):
    """(channel, payload) of the next notification `conn` receives within `timeout` seconds
    (a bounded wait on its socket), or None."""
    deadline = time.monotonic() + timeout
    while True:
        conn.pgconn.consume_input()
        n = conn.pgconn.notifies()
        if n is not None:
            return n.relname.decode(), n.extra.decode()
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        select.select([conn.fileno()], [], [], min(left, 0.05))


def _metric(fleet, name):
    """Sum of a pgfleet metric's samples on /metrics."""
    url = f"http://127.0.0.1:{fleet.metrics_port}/metrics"
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


def test_psycopg_listeners_share_the_hub_and_get_another_clients_notify(pgfleet):
    # Three listeners and a pool of 3 on 2 workers: pinned listeners (one server each) would
    # leave no server for the notifier's transaction, which then fails after 5 s.
    fleet = pgfleet(workers=2, pool_size=3, pool_extra=", query_wait_timeout: 5s")
    listeners = [psycopg.connect(fleet.dsn(), autocommit=True) for _ in range(3)]
    try:
        for conn in listeners:
            conn.execute('LISTEN "Jobs"')
        with psycopg.connect(fleet.dsn()) as notifier:
            notifier.execute("SELECT pg_notify('Jobs', 'first')")
            notifier.commit()
            for conn in listeners:
                assert _next_notify(conn, 1.0) == ("Jobs", "first")
            # Workers publish their pools' counts every second or so: a bounded poll.
            deadline = time.monotonic() + 5
            while not 1 <= _metric(fleet, "pgfleet_pools_server_listening_connections") <= 2:
                assert time.monotonic() < deadline, "no listening server in the metrics"
                time.sleep(0.1)
            assert _metric(fleet, "pgfleet_pools_server_pinned_connections") == 0
            # UNLISTEN stops delivery to that client only.
            listeners[0].execute('UNLISTEN "Jobs"')
            notifier.execute("NOTIFY \"Jobs\", 'second'")
            notifier.commit()
            for conn in listeners[1:]:
                assert _next_notify(conn, 1.0) == ("Jobs", "second")
            assert _next_notify(listeners[0], 0.3) is None
    finally:
        for conn in listeners:
            conn.close()
