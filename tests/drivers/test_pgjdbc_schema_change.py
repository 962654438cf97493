"""pgjdbc after a schema change through pgfleet in transaction mode (issue 31): with one server in
the pool, its named statements meet the server that holds the analysis from before the DDL.
pgjdbc retries a statement that PostgreSQL refuses with 0A000 (cached plan must not change result
type) by preparing it again; through pgfleet that new Parse must be analysed afresh, as
PostgreSQL analyses it. JdbcSchemaChange.java runs against PostgreSQL and through pgfleet; the
output must be the same."""

import subprocess

from conftest import assert_clean_log, assert_same_lines
from test_pgjdbc import HERE, jdbc_classpath  # noqa: F401 - the fixture
from test_pgjdbc_cache import run_java


def test_statements_after_a_schema_change_as_on_a_direct_connection(pg, pgfleet, jdbc_classpath):
    subprocess.run(["javac", "-cp", jdbc_classpath, "-d", jdbc_classpath.split(":")[1],
                    str(HERE / "JdbcSchemaChange.java")], check=True, timeout=120)
    fleet = pgfleet(pool_size=1, pool_extra=", ignore_startup_parameters: [extra_float_digits]")
    direct = run_java(jdbc_classpath, pg.port, "JdbcSchemaChange")
    pooled = run_java(jdbc_classpath, fleet.port, "JdbcSchemaChange")
    assert_same_lines(pooled, direct)
    assert direct[-1] == "done"
    # After the DROP COLUMN, the second connection's statement has two columns.
    assert "ok a:int4 c:int4 1 2" in direct, direct
    assert_clean_log(fleet)
