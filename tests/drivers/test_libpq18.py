"""libpq 18 through pgfleet: protocol 3.2 (32-byte cancel keys), `max_protocol_version`, and
direct TLS (`sslnegotiation=direct`, ALPN "postgresql"), with psycopg 3.3 and the libpq 18 that
its psycopg-binary wheel bundles.

Runs with the venv's python that scripts/install-test-servers.sh makes (scripts/test.sh does):

    $(scripts/install-test-servers.sh --print | sed -n 's/^LIBPQ18_PYTHON=//p') \\
        -m pytest -q tests/drivers/test_libpq18.py

Debian's python3 has psycopg 3.1 over libpq 15: there every test fails, saying so (nothing is
skipped). The same checks also run straight against PostgreSQL 18 and 16 (the npm server packages
of scripts/install-test-servers.sh; PG18_BINDIR and PG16_BINDIR override where they are), which
proves the checks themselves: PostgreSQL 18 speaks 3.2, PostgreSQL 16 downgrades libpq to 3.0.
"""

import os
import shutil
import socket
import struct
import subprocess
import threading
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import errors

from conftest import REPO, PgCluster, run_clients

# Every check runs in a thread bounded by this (seconds): a pooler that stops answering fails
# the test instead of hanging the run.
BOUND = 60
PROTOCOL_3_2 = 30002
PROTOCOL_3_0 = 30000


def run_bounded(fn, timeout=BOUND):
    errs = run_clients(lambda _: fn(), 1, timeout)
    if errs:
        raise errs[0]


def toolchain():
    """Where scripts/install-test-servers.sh puts the servers and the venv (its --print), with
    PG16_BINDIR / PG18_BINDIR from the environment winning."""
    out = subprocess.run([str(REPO / "scripts/install-test-servers.sh"), "--print"],
                         check=True, capture_output=True, text=True, timeout=30).stdout
    paths = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    for key in ("PG16_BINDIR", "PG18_BINDIR"):
        if os.environ.get(key):
            paths[key] = os.environ[key]
    return paths


@pytest.fixture(scope="module", autouse=True)
def libpq18():
    """Fails (never skips) every test of this module unless psycopg >= 3.3 runs over libpq 18."""
    version = tuple(int(p) for p in psycopg.__version__.split(".")[:2])
    libpq = psycopg.pq.version()
    if version < (3, 3) or libpq < 180000:
        pytest.fail(
            f"needs psycopg >= 3.3 over libpq >= 18, got psycopg {psycopg.__version__} "
            f"({psycopg.pq.__impl__}) over libpq {libpq}: run this module with "
            f"{toolchain().get('LIBPQ18_PYTHON', 'the venv python')} -m pytest "
            "(scripts/install-test-servers.sh makes that venv)", pytrace=False)


def bindir(major):
    path = Path(toolchain()[f"PG{major}_BINDIR"])
    if not (path / "postgres").exists():
        pytest.fail(f"no PostgreSQL {major} in {path}: run scripts/install-test-servers.sh",
                    pytrace=False)
    return path


@pytest.fixture(scope="module")
def certs(session_dir):
    """A CA and a server certificate for 127.0.0.1 and localhost (openssl, P-256)."""
    d = session_dir / "libpq18-certs"
    d.mkdir(exist_ok=True)
    newkey = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=60)

    openssl("req", "-x509", *newkey, "-days", "2", "-subj", "/CN=pgfleet libpq18 CA",
            "-keyout", "ca.key", "-out", "ca.crt")
    openssl("req", *newkey, "-subj", "/CN=localhost", "-keyout", "server.key",
            "-out", "server.csr")
    (d / "server.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl("x509", "-req", "-days", "2", "-in", "server.csr", "-CA", "ca.crt", "-CAkey",
            "ca.key", "-CAcreateserial", "-extfile", "server.ext", "-out", "server.crt")
    os.chmod(d / "server.key", 0o600)
    return {"ca": d / "ca.crt", "cert": d / "server.crt", "key": d / "server.key"}


def cluster_with_tls(session_dir, major, certs):
    """A PostgreSQL of that major from the npm package, with ssl on (TCP: plain and TLS)."""
    cluster = PgCluster(session_dir, bindir=bindir(major), name=f"pg{major}")
    for name in ("cert", "key"):
        dst = cluster.data / f"server.{'crt' if name == 'cert' else 'key'}"
        dst.write_bytes(certs[name].read_bytes())
        os.chmod(dst, 0o600)
        if os.geteuid() == 0:
            shutil.chown(dst, "postgres", "postgres")
    with open(cluster.data / "postgresql.conf", "a") as conf:
        conf.write("\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n")
    cluster.restart()
    return cluster


@pytest.fixture(scope="module")
def pg18(session_dir, certs):
    cluster = cluster_with_tls(session_dir, 18, certs)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def pg16(session_dir, certs):
    cluster = cluster_with_tls(session_dir, 16, certs)
    yield cluster
    cluster.stop()


@pytest.fixture
def fleet(pgfleet):
    return pgfleet(pool_size=2)


@pytest.fixture
def tls_fleet(pgfleet, certs):
    """pgfleet with client TLS required (plain-text TCP clients refused)."""
    return pgfleet(pool_size=2, extra=(
        f"tls: {{client_tls_sslmode: require, client_tls_cert_file: '{certs['cert']}', "
        f"client_tls_key_file: '{certs['key']}'}}\n"))


# ---- checks shared by pgfleet and PostgreSQL itself -------------------------------------------

def check_session(conn):
    """Simple and extended queries, a named prepared statement and a pipeline, on one
    connection."""
    with conn.cursor() as cur:
        cur.execute("SELECT 1; SELECT 2")  # simple protocol: no parameters, two statements
        assert cur.fetchone() == (1,)
        assert cur.nextset() and cur.fetchone() == (2,)
        cur.execute("SELECT %s::int + 1, %s::text", (41, "x"))  # extended protocol
        assert cur.fetchone() == (42, "x")
        for n in range(3):  # prepare=True: Parse once under a name, then Bind/Execute
            cur.execute("SELECT %s::int * 2 AS libpq18_prepared", (n,), prepare=True)
            assert cur.fetchone() == (2 * n,)
    with conn.pipeline():
        curs = []
        for n in range(5):
            cur = conn.cursor()
            cur.execute("SELECT %s::int AS libpq18_pipeline", (n,))
            curs.append(cur)
        cur = conn.cursor()
        cur.execute("SELECT current_setting('server_version_num')::int")
        curs.append(cur)
    assert [c.fetchone()[0] for c in curs[:5]] == list(range(5))
    assert curs[5].fetchone()[0] >= 150000
    conn.commit()


def check_cancel(conn, activity_dsn):
    """pg_sleep(10) on `conn`, cancelled with libpq 18's cancel API (PQcancelCreate/
    PQcancelBlocking, which sends the key of whatever length the server gave) once PostgreSQL
    (`activity_dsn`, straight to it) runs it: QueryCanceled within a second, and the connection
    stays usable."""
    conn.autocommit = True
    marker = f"libpq18_cancel_{uuid.uuid4().hex[:12]}"
    outcome = {}

    def sleeper():
        try:
            conn.execute(f"SELECT pg_sleep(10) /* {marker} */")
            outcome["result"] = "finished without being cancelled"
        except BaseException as e:  # noqa: B902 - reported below
            outcome["error"] = e
        outcome["at"] = time.monotonic()

    thread = threading.Thread(target=sleeper, daemon=True)
    thread.start()
    with psycopg.connect(activity_dsn, autocommit=True) as watcher:
        deadline = time.monotonic() + 10
        while True:
            running = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                "AND query LIKE %s AND pid <> pg_backend_pid()", (f"%{marker}%",)).fetchone()[0]
            if running:
                break
            assert time.monotonic() < deadline, "the query never ran on PostgreSQL"
            assert thread.is_alive(), f"the query ended before the cancel: {outcome}"
            time.sleep(0.02)
    start = time.monotonic()
    conn.cancel_safe(timeout=5)
    thread.join(5)
    assert not thread.is_alive(), "pg_sleep(10) still running 5 s after the cancel"
    assert isinstance(outcome.get("error"), errors.QueryCanceled), outcome
    elapsed = outcome["at"] - start
    assert elapsed < 1.0, f"cancelled after {elapsed:.2f} s"
    assert conn.execute("SELECT 'after cancel'").fetchone() == ("after cancel",)


def raw_startup(port, minor):
    """A StartupMessage for protocol 3.<minor> as user postgres (trust) over a raw socket: the
    NegotiateProtocolVersion answer if any (newest minor, unrecognized options) and the length
    of the BackendKeyData's secret key (4 bytes in 3.0; PostgreSQL 18 sends 32 in 3.2)."""
    params = b"user\0postgres\0database\0postgres\0\0"
    body = struct.pack("!I", (3 << 16) | minor) + params
    negotiated, key_len, auth = None, None, []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(struct.pack("!I", len(body) + 4) + body)
        buf = b""

        def read(n):
            nonlocal buf
            while len(buf) < n:
                chunk = s.recv(65536)
                if not chunk:
                    raise AssertionError(f"connection closed during startup (auth {auth})")
                buf += chunk
            out, buf = buf[:n], buf[n:]
            return out

        for _ in range(1000):
            kind, length = struct.unpack("!cI", read(5))
            payload = read(length - 4)
            if kind == b"v":
                negotiated = struct.unpack("!I", payload[:4])[0]
            elif kind == b"R":
                auth.append(struct.unpack("!I", payload[:4])[0])
                assert auth[-1] == 0, f"authentication request {auth[-1]}, expected trust"
            elif kind == b"K":
                key_len = len(payload) - 4
            elif kind == b"E":
                raise AssertionError(f"ErrorResponse during startup: {payload!r}")
            elif kind == b"Z":
                s.sendall(b"X\0\0\0\4")
                return negotiated, key_len
        raise AssertionError("no ReadyForQuery after 1000 messages")


def direct_tls_query(dsn, ca):
    with psycopg.connect(dsn, sslmode="verify-full", sslrootcert=str(ca),
                         sslnegotiation="direct") as conn:
        assert conn.pgconn.ssl_in_use
        assert conn.execute("SELECT 'direct tls'").fetchone() == ("direct tls",)


# ---- through pgfleet ----------------------------------------------------------------------------

def test_default_connection_through_pgfleet(fleet):
    """(a) libpq 18 with its defaults (max_protocol_version 3.0, sslnegotiation postgres)."""
    def body():
        # psycopg has no per-connection libpq version: pq.version() is the libpq it loaded.
        assert psycopg.pq.version() >= 180000
        with psycopg.connect(fleet.dsn()) as conn:
            assert conn.pgconn.full_protocol_version == PROTOCOL_3_0
            check_session(conn)
    run_bounded(body)


def test_cancel_default_protocol_through_pgfleet(pg, fleet):
    """libpq 18's cancel API over protocol 3.0 (a 4-byte key): the baseline of the 3.2 cancel."""
    def body():
        with psycopg.connect(fleet.dsn()) as conn:
            check_cancel(conn, pg.dsn())
    run_bounded(body)


@pytest.mark.parametrize("max_version", ["3.2", "latest"])
def test_protocol_3_2_through_pgfleet(fleet, max_version):
    """(b) libpq asks for 3.2 (max_protocol_version 3.2 or latest): pgfleet speaks it."""
    def body():
        with psycopg.connect(fleet.dsn(), max_protocol_version=max_version) as conn:
            assert conn.pgconn.full_protocol_version == PROTOCOL_3_2
            check_session(conn)
    run_bounded(body)


def test_startup_3_2_gets_a_32_byte_key_from_pgfleet(fleet):
    """(b) A 3.2 StartupMessage is accepted as is (no NegotiateProtocolVersion) and the cancel
    key pgfleet mints is 32 bytes; a 3.0 client still gets 4."""
    def body():
        assert raw_startup(fleet.port, 2) == (None, 32)
        assert raw_startup(fleet.port, 0) == (None, 4)
    run_bounded(body)


def test_cancel_3_2_through_pgfleet(pg, fleet):
    """(c) A cancel with the 32-byte key of a 3.2 session stops its query."""
    def body():
        with psycopg.connect(fleet.dsn(), max_protocol_version="3.2") as conn:
            assert conn.pgconn.full_protocol_version == PROTOCOL_3_2
            check_cancel(conn, pg.dsn())
    run_bounded(body)


def test_direct_tls_through_pgfleet(tls_fleet, certs):
    """(d) sslnegotiation=direct: TLS from the first byte, ALPN "postgresql" (libpq 18 refuses
    a direct TLS server that selects no ALPN protocol), certificate verified."""
    run_bounded(lambda: direct_tls_query(tls_fleet.dsn(), certs["ca"]))


def test_direct_tls_and_protocol_3_2_through_pgfleet(tls_fleet, certs):
    """(b)+(d) together: the way libpq 18 connects with every new option on."""
    def body():
        with psycopg.connect(tls_fleet.dsn(), sslmode="verify-full",
                             sslrootcert=str(certs["ca"]), sslnegotiation="direct",
                             max_protocol_version="latest") as conn:
            assert conn.pgconn.ssl_in_use
            assert conn.pgconn.full_protocol_version == PROTOCOL_3_2
            check_session(conn)
    run_bounded(body)


def test_direct_tls_without_client_tls_fails_cleanly(fleet):
    """(d) Direct TLS to a pgfleet without client TLS: an OperationalError at once (no hang),
    and pgfleet keeps serving."""
    def body():
        start = time.monotonic()
        with pytest.raises(psycopg.OperationalError) as failure:
            psycopg.connect(fleet.dsn(), sslmode="require", sslnegotiation="direct").close()
        elapsed = time.monotonic() - start
        assert elapsed < 5, f"direct TLS to a plain pgfleet took {elapsed:.1f} s to fail"
        print("direct TLS to pgfleet without TLS:", str(failure.value).strip())
        with psycopg.connect(fleet.dsn()) as conn:
            assert conn.execute("SELECT 'still serving'").fetchone() == ("still serving",)
    run_bounded(body)


# ---- straight to PostgreSQL: proof that the checks above are right ----------------------------

@pytest.mark.parametrize("max_version", ["3.2", "latest"])
def test_postgres18_direct_speaks_3_2(pg18, max_version):
    """(e) The 3.2 checks pass against PostgreSQL 18 itself."""
    def body():
        with psycopg.connect(pg18.dsn(), max_protocol_version=max_version) as conn:
            assert conn.pgconn.full_protocol_version == PROTOCOL_3_2
            assert conn.pgconn.server_version // 10000 == 18
            check_session(conn)
        assert raw_startup(pg18.port, 2) == (None, 32)
        assert raw_startup(pg18.port, 0) == (None, 4)
    run_bounded(body)


def test_postgres18_direct_cancel_3_2(pg18):
    """(e) The 3.2 cancel check (32-byte key) passes against PostgreSQL 18 itself."""
    def body():
        with psycopg.connect(pg18.dsn(), max_protocol_version="3.2") as conn:
            assert conn.pgconn.full_protocol_version == PROTOCOL_3_2
            check_cancel(conn, pg18.dsn())
    run_bounded(body)


def test_postgres18_direct_tls(pg18, certs):
    """(e) The direct TLS check passes against PostgreSQL 18 itself (direct TLS is 17+)."""
    run_bounded(lambda: direct_tls_query(pg18.dsn(), certs["ca"]))


def test_postgres16_direct_downgrades_to_3_0(pg16):
    """(e) PostgreSQL 16 answers a 3.2 startup with NegotiateProtocolVersion (3.0): libpq 18
    goes on with 3.0, a 4-byte key, and a working cancel."""
    def body():
        with psycopg.connect(pg16.dsn(), max_protocol_version="3.2") as conn:
            assert conn.pgconn.full_protocol_version == PROTOCOL_3_0
            assert conn.pgconn.server_version // 10000 == 16
            check_session(conn)
            check_cancel(conn, pg16.dsn())
        assert raw_startup(pg16.port, 2) == ((3 << 16) | 0, 4)
    run_bounded(body)
