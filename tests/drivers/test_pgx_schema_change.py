"""pgx (Go, v5.4 with its default statement cache; Debian 12's Go 1.19 builds it) after a schema change through pgfleet in
transaction mode (issue 31): a table loses a column and an enum type is dropped and created again
while pgx holds prepared statements over them. pgx returns PostgreSQL's 0A000 once, forgets the
statement and prepares the text again (Close, then Parse); through pgfleet that Parse must be
analysed afresh. pgx_schema/main.go runs against PostgreSQL and through pgfleet (one server in
the pool); the output must be the same. The Go module comes from the Go module proxy."""

import os
import shutil
import subprocess

import pytest

from conftest import assert_clean_log, assert_same_lines
from test_pgjdbc import HERE


@pytest.fixture(scope="session")
def pgx_program(session_dir):
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not os.access(go, os.X_OK):
        pytest.fail("go not found: install golang-go (scripts/install-deps.sh)")
    out = session_dir / "pgx_schema"
    subprocess.run([go, "build", "-o", str(out), "."], cwd=HERE / "pgx_schema", check=True,
                   timeout=600)
    return out


def run(program, port):
    dsn = f"postgres://postgres@127.0.0.1:{port}/postgres?sslmode=disable"
    result = subprocess.run([str(program), dsn], capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return result.stdout.splitlines()


def test_pgx_after_a_schema_change_as_on_a_direct_connection(pg, pgfleet, pgx_program):
    fleet = pgfleet(pool_size=1)
    direct = run(pgx_program, pg.port)
    pooled = run(pgx_program, fleet.port)
    assert_same_lines(pooled, direct)
    assert direct[-1] == "done"
    assert "error 0A000" in direct, direct
    assert "ok a c 1 2" in direct, direct
    assert_clean_log(fleet)
