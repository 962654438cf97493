"""asyncpg's statement cache evicting through pgfleet in transaction mode (issue 19): a small
statement_cache_size with more distinct statements than it holds, and statements expiring after
max_cached_statement_lifetime, inside and outside transactions. asyncpg closes each statement it
drops (protocol Close of its own name, which the server knows as pgfleet_...) before it prepares
the next; what the client sees must equal a direct connection's."""

import asyncio
import time

import asyncpg
import pytest

from conftest import assert_clean_log

BOUND = 60  # seconds for one scenario on one connection


async def connect(port, **kwargs):
    return await asyncpg.connect(host="127.0.0.1", port=port, user="postgres",
                                 database="postgres", timeout=10, **kwargs)


async def outcome(coro):
    try:
        return ["ok", await coro]
    except asyncpg.PostgresError as e:
        return ["error", type(e).__name__]


def distinct(n, tag):
    return f"SELECT $1::int + {n} AS c{n}_{tag}"


async def size_eviction(port, in_transaction):
    """statement_cache_size=3 and eight distinct statements, three rounds; the dropped ones are
    closed as the next ones are prepared, and later prepared again under new names."""
    seen = []
    conn = await connect(port, statement_cache_size=3)
    try:
        for round_ in range(3):
            tx = conn.transaction() if in_transaction else None
            if tx is not None:
                await tx.start()
            for n in range(8):
                seen.append(await outcome(conn.fetchval(distinct(n % 5, round_ % 2), round_)))
            if round_ == 1 and in_transaction:
                # A failed statement: the transaction fails, asyncpg keeps its cache.
                seen.append(await outcome(conn.fetchval("SELECT 1 / $1::int", 0)))
                seen.append(await outcome(conn.fetchval(distinct(7, "x"), 1)))
                await tx.rollback()
            elif tx is not None:
                await tx.commit()
            seen.append(["cache", len(conn._stmt_cache) <= 3])
        seen.append(await outcome(conn.fetchval("SELECT 41 + $1::int", 1)))
    finally:
        await conn.close(timeout=10)
    return seen


async def lifetime_expiry(port, in_transaction):
    """max_cached_statement_lifetime=1: the cached statements expire (a bounded poll waits for
    asyncpg's timer), and the next new statement makes asyncpg close them, inside a transaction
    or outside one."""
    seen = []
    conn = await connect(port, statement_cache_size=10, max_cached_statement_lifetime=1)
    try:
        for round_ in range(3):
            tx = conn.transaction() if in_transaction else None
            if tx is not None:
                await tx.start()
            for n in range(4):
                seen.append(await outcome(conn.fetchval(distinct(n, "life"), round_)))
            deadline = time.monotonic() + 10
            while len(conn._stmt_cache) > 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            seen.append(["expired", len(conn._stmt_cache) == 0])
            # A new statement: asyncpg closes the expired ones first.
            seen.append(await outcome(conn.fetchval(distinct(10 + round_, "new"), round_)))
            seen.append(["closed", not conn._stmts_to_close])
            # The expired texts again: prepared anew (the server may still have them).
            for n in range(4):
                seen.append(await outcome(conn.fetchval(distinct(n, "life"), round_ + 1)))
            if tx is not None:
                await tx.commit()
    finally:
        await conn.close(timeout=10)
    return seen


SCENARIOS = {"size": size_eviction, "lifetime": lifetime_expiry}


@pytest.mark.parametrize("in_transaction", [True, False], ids=["transaction", "autocommit"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_statement_cache_eviction_as_on_a_direct_connection(pg, pgfleet, scenario,
                                                             in_transaction):
    fleet = pgfleet(pool_size=2, max_prepared=3)
    fn = SCENARIOS[scenario]

    async def both():
        return await asyncio.wait_for(
            asyncio.gather(fn(pg.port, in_transaction), fn(fleet.port, in_transaction)), BOUND)

    direct, pooled = asyncio.run(both())
    assert pooled == direct, f"through pgfleet:\n{pooled}\ndirect:\n{direct}"
    assert all(v is True for kind, v in direct if kind in ("cache", "expired", "closed")), direct
    assert ["ok", 42] in direct or scenario == "lifetime"
    assert_clean_log(fleet)
