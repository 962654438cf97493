"""asyncpg (Debian's python3-asyncpg) through pgfleet in transaction mode, with its default
statement cache: every query is a named prepared statement that asyncpg reuses by name."""

import asyncio

import asyncpg

from conftest import assert_clean_log, assert_no_prepared_failures, assert_server_side_prepared

TASKS = 20
TRANSACTIONS = 25


def test_default_statement_cache(pg, pgfleet):
    pg.query("DROP TABLE IF EXISTS asyncpg_items; "
             "CREATE TABLE asyncpg_items (client int, n int, note text)")
    fleet = pgfleet(workers=1, pool_size=2)
    since = pg.log_offset()
    marker = "drv_asyncpg"
    cache_sizes = []

    async def client(i):
        conn = await asyncpg.connect(host="127.0.0.1", port=fleet.port, user="postgres",
                                     database="postgres", timeout=10)
        try:
            explicit = await conn.prepare(f"SELECT $1::int * 3 AS {marker}")
            for n in range(TRANSACTIONS):
                async with conn.transaction():
                    assert await conn.fetchval(f"SELECT $1::int + 1 AS {marker}", n) == n + 1
                    row = await conn.fetchrow(
                        f"SELECT $1::text || $2::text AS {marker}, $3::bigint * 2 AS b",
                        f"c{i}", "x", n)
                    assert (row[0], row["b"]) == (f"c{i}x", 2 * n)
                    await conn.executemany(
                        f"INSERT INTO asyncpg_items (client, n, note) "
                        f"VALUES ($1, $2, $3) /* {marker} */",
                        [(i, n, "a"), (i, n, "b")])
                # A statement prepared once, used outside transactions, on any server.
                assert await explicit.fetchval(n) == 3 * n
                if n % 5 == 0:
                    # A cursor: a named portal fetched 10 rows at a time (PortalSuspended).
                    async with conn.transaction():
                        rows = [r[0] async for r in conn.cursor(
                            f"SELECT g AS {marker} FROM generate_series(1, $1::int) g", 35,
                            prefetch=10)]
                        assert rows == list(range(1, 36))
                    # A cached statement that fails at execution: the error is the client's,
                    # the statement and the connection stay usable.
                    try:
                        await conn.fetchval(f"SELECT 10 / $1::int AS {marker}", 0)
                        raise AssertionError("division by zero did not fail")
                    except asyncpg.DivisionByZeroError:
                        pass
                    assert await conn.fetchval(f"SELECT 10 / $1::int AS {marker}", 5) == 2
            cache_sizes.append(len(conn._stmt_cache))
        finally:
            await conn.close(timeout=10)

    async def main():
        results = await asyncio.wait_for(
            asyncio.gather(*(client(i) for i in range(TASKS)), return_exceptions=True), 60)
        return [r for r in results if isinstance(r, BaseException)]

    errors = asyncio.run(main())
    assert_no_prepared_failures([str(e) for e in errors])
    assert not errors, errors[:3]
    # asyncpg reports its cached (prepared) statements.
    assert len(cache_sizes) == TASKS and min(cache_sizes) >= 3, cache_sizes
    assert pg.query("SELECT count(*) FROM asyncpg_items") == [TASKS * TRANSACTIONS * 2]
    stats = assert_server_side_prepared(pg, marker, since)
    assert_clean_log(fleet)
    print("asyncpg:", stats)


def test_server_settings_are_the_sessions(pg, pgfleet):
    """asyncpg's server_settings travel as startup parameters: through pgfleet they are the
    client's session settings (issue 35), on every server it gets, and never another client's."""
    fleet = pgfleet(workers=1, pool_size=1)

    async def scenario():
        tuned = await asyncpg.connect(host="127.0.0.1", port=fleet.port, user="postgres",
                                      database="postgres", timeout=10,
                                      server_settings={"jit": "off", "lock_timeout": "2345",
                                                       "application_name": "drv_settings"})
        plain = await asyncpg.connect(host="127.0.0.1", port=fleet.port, user="postgres",
                                      database="postgres", timeout=10)
        try:
            for _ in range(3):
                assert await tuned.fetchval("SHOW lock_timeout") == "2345ms"
                assert await tuned.fetchval("SHOW jit") == "off"
                assert await tuned.fetchval(
                    "SELECT current_setting('application_name')") == "drv_settings"
                assert await plain.fetchval("SHOW lock_timeout") == "0"
        finally:
            await tuned.close()
            await plain.close()
        refused = None
        try:
            await asyncpg.connect(host="127.0.0.1", port=fleet.port, user="postgres",
                                  database="postgres", timeout=10,
                                  server_settings={"lock_timeout": "later"})
        except asyncpg.PostgresError as e:
            refused = e
        assert refused is not None and refused.sqlstate == "22023", refused

    asyncio.run(scenario())
