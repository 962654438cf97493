"""pgjdbc's statement cache evicting through pgfleet in transaction mode (issue 19):
prepareThreshold=1 and preparedStatementCacheQueries=3 with more distinct statements, in
transactions and in autocommit, so pgjdbc Closes its dropped server statements in the batch of
its next query. JdbcCacheEviction.java runs the same statements directly against PostgreSQL and
through pgfleet; the output must be the same."""

import subprocess

from conftest import assert_clean_log, assert_same_lines
from test_pgjdbc import HERE, jdbc_classpath  # noqa: F401 - the fixture

JAVA = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]


def run_java(classpath, port, main="JdbcCacheEviction"):
    url = f"jdbc:postgresql://127.0.0.1:{port}/postgres"
    run = subprocess.run(JAVA + ["-cp", classpath, main, url],
                         capture_output=True, text=True, timeout=90)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    return run.stdout.splitlines()


def test_statement_cache_eviction_as_on_a_direct_connection(pg, pgfleet, jdbc_classpath,
                                                             session_dir):
    subprocess.run(["javac", "-cp", jdbc_classpath, "-d", jdbc_classpath.split(":")[1],
                    str(HERE / "JdbcCacheEviction.java")], check=True, timeout=120)
    fleet = pgfleet(pool_size=2, max_prepared=4,
                    pool_extra=", ignore_startup_parameters: [extra_float_digits]")
    direct = run_java(jdbc_classpath, pg.port)
    pooled = run_java(jdbc_classpath, fleet.port)
    assert_same_lines(pooled, direct)
    assert direct[-1] == "done"
    assert sum(line.endswith(" named") for line in direct) >= 40, direct
    assert "error 22012" in direct and "error 25P02" in direct
    assert_clean_log(fleet)
    print("pgjdbc:", direct)
