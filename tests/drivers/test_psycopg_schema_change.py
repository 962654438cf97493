"""psycopg 3 after a schema change through pgfleet in transaction mode (issue 31): each psycopg 3
the tests have (SQL DEALLOCATE, or protocol-level Close with libpq 18) sees what it sees on a
direct connection, with one server in the pool, so that its statements meet the server that
holds the analysis from before the DDL."""

import pytest

from conftest import assert_clean_log
import psycopg_scenarios
from psycopg_scenarios import DRIVERS


@pytest.mark.parametrize("driver", DRIVERS)
def test_dropped_column_as_on_a_direct_connection(pg, pgfleet, driver):
    fleet = pgfleet(pool_size=1)
    direct = psycopg_scenarios.run(driver, "schema_change_drop_column", pg.dsn())
    pooled = psycopg_scenarios.run(driver, "schema_change_drop_column", fleet.dsn())
    assert pooled == direct, f"through pgfleet:\n{pooled}\ndirect:\n{direct}"
    # The new connection's statement has the table's columns now.
    assert direct[-1] == ["ok", ["a", "c"]], direct
    assert_clean_log(fleet)
