"""psycopg 3's statement cache evicting inside a transaction (issue 19, item 1): with
prepare_threshold=0 and prepared_max=5, ten distinct statements in one transaction make psycopg
drop the oldest with SQL `DEALLOCATE _pg3_N` (libpq older than 17) while the transaction is open.
The name is pgfleet's alone (the server knows it as pgfleet_N): pgfleet must answer it, not pass
it to the server, where it would fail the transaction."""

import psycopg
import pytest


@pytest.mark.parametrize("autocommit", [False, True])
def test_cache_eviction_inside_a_transaction(pg, pgfleet, autocommit):
    fleet = pgfleet(pool_size=2)
    with psycopg.connect(fleet.dsn(), prepare_threshold=0, autocommit=autocommit) as conn:
        conn.prepared_max = 5
        for round_ in range(3):
            with conn.transaction():
                for n in range(10):
                    row = conn.execute(f"SELECT %s::int + {n} AS c{n}_{round_}", (round_,))
                    assert row.fetchone()[0] == round_ + n
            # The cache stays at its size and the statements still run.
            assert len(conn._prepared._names) <= 5
        assert conn.execute("SELECT 41 + %s::int", (1,)).fetchone()[0] == 42
