"""psycopg 3 scenarios of issue 19 that the driver tests run with each psycopg 3 they have
(test_psycopg_cache.py, test_psycopg_pipeline_errors.py), directly against PostgreSQL and
through pgfleet, and compare: what the client sees (values, statuses, and the class of each
error) must be the same.

Each psycopg runs in its own interpreter, this file being its program:

    python psycopg_scenarios.py SCENARIO DSN   -> one JSON line: {"driver": ..., "seen": [...]}

so Debian's python3-psycopg 3.1 (SQL DEALLOCATE over libpq 15) and the venv of
scripts/install-test-servers.sh (psycopg 3.3; PSYCOPG_IMPL=python: pure Python over Debian's libpq
15, SQL DEALLOCATE; binary: its bundled libpq 18, protocol-level Close) run the same code. Nothing
here needs more than psycopg and the standard library.
"""

import json
import sys

import psycopg

STATEMENTS = ["select 1", "select 2", "select 3"]


def outcome(fn):
    try:
        return ["ok", fn()]
    except psycopg.Error as e:
        return ["error", type(e).__name__]


def connect(dsn, autocommit=False, prepared_max=None):
    conn = psycopg.connect(dsn, prepare_threshold=0, autocommit=autocommit)
    if prepared_max is not None:
        conn.prepared_max = prepared_max
    return conn


def distinct(n, tag):
    """The n-th of many distinct statements (each its own prepared statement): %s + n."""
    return f"select %s::int + {n} as c{n}_{tag}"


# ---- statement cache eviction (prepare_threshold=0, prepared_max=5) ----

def eviction_in_transaction(dsn, autocommit):
    """Ten distinct statements in one transaction, three times: psycopg drops the oldest five
    each time, inside the transaction (SQL DEALLOCATE before libpq 17, Close since)."""
    seen = []
    with connect(dsn, autocommit=autocommit, prepared_max=5) as conn:
        for round_ in range(3):
            with conn.transaction():
                for n in range(10):
                    sql = distinct(n, round_)
                    seen.append(outcome(
                        lambda sql=sql: conn.execute(sql, (round_,)).fetchone()[0]))
            seen.append(["cache", len(conn._prepared._names) <= 5])
        seen.append(outcome(lambda: conn.execute("select 41 + %s::int", (1,)).fetchone()[0]))
    return seen


def eviction_sequential_in_transaction(dsn):
    return eviction_in_transaction(dsn, autocommit=False)


def eviction_sequential_in_autocommit_transaction(dsn):
    return eviction_in_transaction(dsn, autocommit=True)


def eviction_in_pipeline(dsn, autocommit):
    """The same in pipeline mode: each eviction is queued behind statements the server has not
    answered yet, and the pipeline goes on after it."""
    seen = []
    with connect(dsn, autocommit=autocommit, prepared_max=5) as conn:
        for round_ in range(3):
            with conn.transaction():
                with conn.pipeline():
                    cursors = []
                    for n in range(10):
                        cursor = conn.execute(distinct(n, round_), (round_,))
                        if n % 4 == 3:
                            # A sync point in between: results come back mid-pipeline.
                            seen.append(outcome(lambda c=cursor: c.fetchone()[0]))
                        else:
                            cursors.append(cursor)
                seen.extend(outcome(lambda c=c: c.fetchone()[0]) for c in cursors)
            seen.append(["cache", len(conn._prepared._names) <= 5])
        with conn.pipeline():
            # Outside a transaction block too (autocommit), or in the implicit one.
            cursors = [conn.execute(distinct(n, "x"), (1,)) for n in range(8)]
        seen.extend(outcome(lambda c=c: c.fetchone()[0]) for c in cursors)
        seen.append(outcome(lambda: conn.execute("select 41 + %s::int", (1,)).fetchone()[0]))
        if not autocommit:
            seen.append(outcome(conn.commit))
    return seen


def eviction_in_pipeline_in_transaction(dsn):
    return eviction_in_pipeline(dsn, autocommit=False)


def eviction_in_pipeline_autocommit(dsn):
    return eviction_in_pipeline(dsn, autocommit=True)


def close_after_an_error_in_pipeline(dsn):
    """In a pipeline, an error, then statements whose cache evicts (a Close or DEALLOCATE of a
    renamed statement behind the failed one: PostgreSQL skips it), then rollback and the same
    statements again: the skipped eviction must leave the statement as PostgreSQL has it."""
    seen = []
    with connect(dsn, prepared_max=2) as conn:
        for n in range(2):
            seen.append(outcome(lambda n=n: conn.execute(*pair(n)).fetchone()[0]))
        conn.commit()

        def failing_pipeline():
            with conn.pipeline():
                cursors = [conn.execute("select 1 from nosuchtable")]
                cursors += [conn.execute(*pair(n)) for n in range(2, 6)]
            return [c.fetchone()[0] for c in cursors]

        seen.append(outcome(failing_pipeline))
        seen.append(outcome(conn.rollback))
        for n in range(6):
            seen.append(outcome(lambda n=n: conn.execute(*pair(n)).fetchone()[0]))
        seen.append(outcome(conn.commit))
        with conn.pipeline():
            cursors = [conn.execute(*pair(n)) for n in range(6)]
        seen.extend(outcome(lambda c=c: c.fetchone()[0]) for c in cursors)
        seen.append(outcome(conn.commit))
    return seen


def pair(n):
    """execute() arguments of the n-th distinct statement."""
    return distinct(n, "p"), (100,)


def reparse_after_a_failed_parse_in_a_pipeline(dsn):
    """libpq's pipeline, written at once: PQsendPrepare of a name with a syntax error, Sync; the
    same name for a fixed query, Sync; an execution of it, Sync; the name again, Sync. The second
    Parse finds the name free (the first failed), the last 42P05: as PostgreSQL answers, which
    pgfleet can tell only once the first Parse's answer came."""
    from psycopg import pq

    seen = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        pgconn = conn.pgconn
        pgconn.enter_pipeline_mode()
        pgconn.send_prepare(b"s1", b"selec 1")
        pgconn.pipeline_sync()
        pgconn.send_prepare(b"s1", b"select 1 + $1::int")
        pgconn.pipeline_sync()
        pgconn.send_query_prepared(b"s1", [b"41"])
        pgconn.pipeline_sync()
        pgconn.send_prepare(b"s1", b"select 2")
        pgconn.pipeline_sync()
        pgconn.flush()
        syncs = 0
        for _ in range(100):  # each query's results end with None; each Sync has its own
            if syncs == 4:
                break
            result = pgconn.get_result()
            if result is None:
                continue
            status = pq.ExecStatus(result.status).name
            if status == "PIPELINE_SYNC":
                syncs += 1
                continue
            sqlstate = result.error_field(pq.DiagnosticField.SQLSTATE)
            value = result.get_value(0, 0) if result.ntuples else None
            seen.append([status, sqlstate and sqlstate.decode(), value and value.decode()])
        seen.append(["syncs", syncs])
        pgconn.exit_pipeline_mode()
        seen.append(outcome(lambda: conn.execute("select 43").fetchone()[0]))
    return seen


# ---- DEALLOCATE ALL / DISCARD ALL inside a transaction ----

def cache_maintenance(dsn, statement):
    seen = []
    with connect(dsn) as conn:
        for n in range(3):
            seen.append(outcome(lambda n=n: conn.execute("select %s::int", (n,)).fetchone()[0]))
        seen.append(outcome(lambda: conn.execute(statement).statusmessage))
        seen.append(outcome(conn.rollback))
        for n in range(3):
            seen.append(outcome(lambda n=n: conn.execute("select %s::int", (n,)).fetchone()[0]))
        seen.append(outcome(conn.commit))
    return seen


def deallocate_all_in_transaction(dsn):
    return cache_maintenance(dsn, "DEALLOCATE ALL")


def discard_all_in_transaction(dsn):
    return cache_maintenance(dsn, "DISCARD ALL")


# ---- errors in pipelines ----

def _run_pipeline(conn, statements):
    with conn.pipeline():
        cursors = [conn.execute(s) for s in statements]
        conn.commit()
    return [c.fetchone()[0] for c in cursors]


def pipeline_with_error(dsn, position):
    """An error on the first, middle or last statement of a pipeline, then commit; rollback;
    a new pipeline; a statement."""
    statements = list(STATEMENTS)
    statements[position] = "select 1 from nosuchtable"
    seen = []
    with connect(dsn) as conn:
        seen.append(outcome(lambda: _run_pipeline(conn, statements)))
        seen.append(outcome(conn.rollback))
        seen.append(outcome(lambda: _run_pipeline(conn, STATEMENTS)))
        seen.append(outcome(lambda: conn.execute("select 42").fetchone()[0]))
        seen.append(outcome(conn.rollback))
    return seen


def error_on_first_statement_of_pipeline(dsn):
    return pipeline_with_error(dsn, 0)


def error_on_middle_statement_of_pipeline(dsn):
    return pipeline_with_error(dsn, 1)


def error_on_last_statement_of_pipeline(dsn):
    return pipeline_with_error(dsn, 2)


def error_at_commit_in_pipeline(dsn):
    """Issue 19, item 2: in `with conn.pipeline()`, a failing execute then commit() raises
    UndefinedTable; rollback() must then work, and the pipeline's later statements run."""
    seen = []
    with connect(dsn) as conn:
        with conn.pipeline() as p:
            # The error surfaces at commit(), or already at execute() when the answer is back
            # before psycopg returns from it (a race on a fast or busy machine, direct too):
            # either way it is one UndefinedTable.
            seen.append(outcome(lambda: (conn.execute("select 1 from nosuchtable"),
                                         conn.commit())[1]))
            seen.append(outcome(conn.rollback))
            cursor = conn.execute("select %s::int", (7,))
            seen.append(outcome(lambda: (p.sync(), cursor.fetchone()[0])[1]))
            later = [conn.execute(*pair(n)) for n in range(3)]
            seen.append(outcome(conn.commit))
        seen.extend(outcome(lambda c=c: c.fetchone()[0]) for c in later)
        seen.append(outcome(lambda: conn.execute("select 43").fetchone()[0]))
        seen.append(outcome(conn.commit))
    return seen


# ---- a schema change under prepared statements (issue 31) ----

def schema_change_drop_column(dsn):
    """A prepared select over a table loses a column (DDL through the same route): the
    connection that prepared it, and a new one, see what PostgreSQL gives them."""
    seen = []
    with psycopg.connect(dsn, autocommit=True) as setup:
        setup.execute("drop table if exists psy_schema")
        setup.execute("create table psy_schema (a int, b text, c int)")
        setup.execute("insert into psy_schema values (1, 'x', 2)")
    query = "select * from psy_schema where a = %s"
    with connect(dsn, autocommit=True) as conn:
        seen.append(outcome(lambda: conn.execute(query, (1,)).fetchall()))
        with psycopg.connect(dsn, autocommit=True) as ddl:
            ddl.execute("alter table psy_schema drop column b")
        for _ in range(3):
            seen.append(outcome(lambda: conn.execute(query, (1,)).fetchall()))
        # psycopg's way to start again: its cache forgets the statement (DEALLOCATE or Close).
        conn.prepared_max = 0
        conn.prepared_max = 5
        seen.append(outcome(lambda: conn.execute(query, (1,)).fetchall()))
    with connect(dsn, autocommit=True) as other:
        seen.append(outcome(lambda: other.execute(query, (1,)).fetchall()))
        seen.append(outcome(lambda: [d.name for d in other.execute(query, (1,)).description]))
    return seen


SCENARIOS = {fn.__name__: fn for fn in [
    eviction_sequential_in_transaction,
    eviction_sequential_in_autocommit_transaction,
    eviction_in_pipeline_in_transaction,
    eviction_in_pipeline_autocommit,
    close_after_an_error_in_pipeline,
    reparse_after_a_failed_parse_in_a_pipeline,
    deallocate_all_in_transaction,
    discard_all_in_transaction,
    error_on_first_statement_of_pipeline,
    error_on_middle_statement_of_pipeline,
    error_on_last_statement_of_pipeline,
    error_at_commit_in_pipeline,
    schema_change_drop_column,
]}


def driver():
    return {"version": psycopg.__version__, "impl": psycopg.pq.__impl__,
            "libpq": psycopg.pq.version()}


# ---- running a scenario with each psycopg (imported by the tests; runs psycopg elsewhere) ----

# Each psycopg 3 the tests use, and what it must be (nothing is skipped: a missing one fails).
DRIVERS = {
    # Debian's python3-psycopg: pure Python over Debian's libpq 15 (SQL DEALLOCATE).
    "debian": {"python": "/usr/bin/python3", "impl": None, "version": (3, 1), "libpq_17": False},
    # PyPI's, from the venv of scripts/install-test-servers.sh, pure Python over Debian's libpq 15.
    "pypi-python": {"python": "venv", "impl": "python", "version": (3, 2), "libpq_17": False},
    # PyPI's psycopg-binary with its bundled libpq 18 (protocol-level Close).
    "pypi-binary": {"python": "venv", "impl": "binary", "version": (3, 2), "libpq_17": True},
}


def venv_python():
    """LIBPQ18_PYTHON from the environment, else where scripts/install-test-servers.sh puts it."""
    import os
    import subprocess
    from pathlib import Path

    if os.environ.get("LIBPQ18_PYTHON"):
        return os.environ["LIBPQ18_PYTHON"]
    script = Path(__file__).resolve().parents[2] / "scripts/install-test-servers.sh"
    out = subprocess.run([str(script), "--print"], check=True, capture_output=True, text=True,
                         timeout=30).stdout
    paths = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return paths.get("LIBPQ18_PYTHON", "")


def run(driver_name, scenario, dsn, timeout=120):
    """What `scenario` saw on `dsn` with psycopg `driver_name` (a key of DRIVERS), after checking
    that psycopg is the one named. Raises AssertionError with the child's output on failure."""
    import os
    import subprocess

    spec = DRIVERS[driver_name]
    python = venv_python() if spec["python"] == "venv" else spec["python"]
    assert python and os.access(python, os.X_OK), (
        f"no python for psycopg {driver_name} ({python!r}): run scripts/install-test-servers.sh "
        "or set LIBPQ18_PYTHON")
    env = dict(os.environ)
    env.pop("PSYCOPG_IMPL", None)
    if spec["impl"] is not None:
        env["PSYCOPG_IMPL"] = spec["impl"]
    proc = subprocess.run([python, __file__, scenario, dsn], capture_output=True, text=True,
                          timeout=timeout, env=env)
    assert proc.returncode == 0, (
        f"{scenario} with psycopg {driver_name} exited {proc.returncode}:\n"
        f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    got = result["driver"]
    version = tuple(int(p) for p in got["version"].split(".")[:2])
    want = spec["version"]
    assert (version[:2] == want if spec["python"] != "venv" else version >= want), (
        f"psycopg {driver_name}: got {got}")
    assert spec["impl"] is None or got["impl"] == spec["impl"], f"psycopg {driver_name}: {got}"
    assert (got["libpq"] >= 170000) == spec["libpq_17"], f"psycopg {driver_name}: {got}"
    return result["seen"]


if __name__ == "__main__":
    scenario, dsn = sys.argv[1], sys.argv[2]
    print(json.dumps({"driver": driver(), "seen": SCENARIOS[scenario](dsn)}))
