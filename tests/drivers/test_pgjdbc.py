"""pgjdbc (Debian's libpostgresql-jdbc-java) through pgfleet in transaction mode: server-side
prepared statements from the first execution (prepareThreshold=1), executeBatch, and pgjdbc's
own statement cache closing and re-preparing statements. JdbcClients.java is compiled with the
machine's javac at test time."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import assert_clean_log, assert_no_prepared_failures, assert_server_side_prepared

THREADS = 20
TRANSACTIONS = 25
HERE = Path(__file__).resolve().parent


def jdbc_jar():
    for candidate in (os.environ.get("PGJDBC_JAR"), "/usr/share/java/postgresql.jar"):
        if candidate and Path(candidate).exists():
            return candidate
    pytest.fail("pgjdbc not found: install libpostgresql-jdbc-java (scripts/install-deps.sh) "
                "or set PGJDBC_JAR")


@pytest.fixture(scope="module")
def jdbc_classpath(session_dir):
    javac = shutil.which("javac")
    if javac is None:
        pytest.fail("javac not found: install default-jdk-headless (scripts/install-deps.sh)")
    jar = jdbc_jar()
    out = session_dir / "jdbc-classes"
    out.mkdir(exist_ok=True)
    subprocess.run([javac, "-cp", jar, "-d", str(out), str(HERE / "JdbcClients.java")],
                   check=True, timeout=120)
    return f"{jar}:{out}"


def test_server_prepared_statements_and_batches(pg, pgfleet, jdbc_classpath):
    table = "jdbc_items"
    pg.query(f"DROP TABLE IF EXISTS {table}; "
             f"CREATE TABLE {table} (client int, n int, note text)")
    # pgjdbc sends extra_float_digits at startup: ignored, as PgBouncer users configure it.
    fleet = pgfleet(pool_size=2, pool_extra=", ignore_startup_parameters: [extra_float_digits]")
    since = pg.log_offset()
    marker = "drv_pgjdbc"
    url = f"jdbc:postgresql://127.0.0.1:{fleet.port}/postgres"
    run = subprocess.run(
        ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp",
         jdbc_classpath, "JdbcClients", url, str(THREADS), str(TRANSACTIONS), marker, table],
        capture_output=True, text=True, timeout=90)
    output = run.stdout + run.stderr
    errors = [line for line in output.splitlines() if line.startswith("ERROR")]
    assert_no_prepared_failures(errors)
    assert run.returncode == 0, output[-3000:]
    summary = dict(kv.split("=") for kv in
                   next(line for line in output.splitlines()
                        if line.startswith("SUMMARY")).split()[1:])
    executions = THREADS * TRANSACTIONS * 3
    assert int(summary["executions"]) == executions, summary
    # pgjdbc reports every one of them as a server-side prepared statement.
    assert int(summary["server_prepared"]) == executions, summary
    assert pg.query(f"SELECT count(*) FROM {table}") == [THREADS * TRANSACTIONS * 5]
    stats = assert_server_side_prepared(pg, marker, since)
    # The batch insert ran as a named statement too.
    inserts = [e for e in pg.statement_log(f"INSERT INTO {table}", since)
               if e[1] == "execute" and e[2].startswith("pgfleet_")]
    assert len(inserts) == THREADS * TRANSACTIONS * 5, len(inserts)
    assert_clean_log(fleet)
    print("pgjdbc:", stats, summary)
