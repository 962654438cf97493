"""Fixtures for the driver tests: a private PostgreSQL per session, a pgfleet per test.

PostgreSQL runs from a temporary directory on a free loopback port (trust auth, fsync off), as
the `postgres` account when the tests run as root (PostgreSQL refuses root). pgfleet runs from a
private copy of PGFLEET_BIN (default: build/cmd/pgfleet/pgfleet), so a rebuild during the run
neither changes the binary under test nor makes its supervisor roll onto a half-linked file.
Every process is started here, tracked by PID and stopped by PID; every wait is bounded.
"""

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Errors that a transaction-mode pooler without prepared statement support gives these drivers.
PREPARED_FAILURES = re.compile(
    r"prepared statement \S+ does not exist|prepared statement \S+ already exists|"
    r"bind message supplies \d+ parameters|bind message has \d+ parameter formats|"
    r"unnamed prepared statement does not exist|portal \S+ does not exist",
    re.IGNORECASE,
)


_ports_handed_out = set()


def free_port():
    """A port free now that no earlier call returned: the kernel may give a port it handed out
    a moment ago to the next bind to port 0, and two listeners of one test must differ."""
    for _ in range(1000):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _ports_handed_out:
            _ports_handed_out.add(port)
            return port
    raise RuntimeError("free_port: no port that this test run has not used yet")


def port_open(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def await_listening(port, proc, log_path, what, timeout=20):
    """Polls until `port` accepts (bounded by `timeout`); fails the test, with the log, when
    `proc` exits first or the time runs out (the process is stopped then)."""
    deadline = time.monotonic() + timeout
    while not port_open(port):
        if not proc.alive() or time.monotonic() > deadline:
            proc.stop(5)
            pytest.fail(f"{what} did not start:\n" + Path(log_path).read_text(errors="replace"))
        time.sleep(0.05)


def pg_bindir():
    if os.environ.get("PG_BINDIR"):
        return Path(os.environ["PG_BINDIR"])
    for version in (17, 16, 15):
        d = Path(f"/usr/lib/postgresql/{version}/bin")
        if (d / "postgres").exists():
            return d
    pytest.fail("no PostgreSQL server binaries found (set PG_BINDIR)")


def _starttime(pid):
    """Field 22 of /proc/PID/stat: unchanged by exec, different for a reused PID."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":
        return None
    return fields[19]


def _children(pid):
    """Live descendants of pid as (pid, starttime)."""
    parent = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parent[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        for child, ppid in parent.items():
            if ppid == p:
                found.append(child)
                frontier.append(child)
    return [(c, _starttime(c)) for c in found if _starttime(c) is not None]


class Process:
    """A process we started (subprocess.Popen), stopped by its PID and nothing else."""

    def __init__(self, popen, stop_signal):
        self.popen = popen
        self.pid = popen.pid
        self.stop_signal = stop_signal

    def alive(self):
        return self.popen.poll() is None

    def stop(self, timeout=20):
        if self.popen.poll() is not None:
            return
        kids = _children(self.pid)
        try:
            os.kill(self.pid, self.stop_signal)
        except ProcessLookupError:
            pass
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.pid, signal.SIGKILL)
            self.popen.wait(timeout=10)
        # Children (pgfleet workers) exit when their parent does; any still there are ours.
        deadline = time.monotonic() + 5
        for kid, start in kids:
            while _starttime(kid) == start and time.monotonic() < deadline:
                time.sleep(0.05)
            if _starttime(kid) == start:
                os.kill(kid, signal.SIGKILL)


def _as_postgres_kwargs():
    """Popen arguments that run a command as `postgres` when we are root."""
    if os.geteuid() != 0:
        return {}
    pw = pwd.getpwnam("postgres")
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}


class PgCluster:
    """bindir: initdb and postgres (default pg_bindir()); name: its directory under base."""

    def __init__(self, base, bindir=None, name="pg"):
        self.bindir = Path(bindir) if bindir is not None else pg_bindir()
        self.dir = Path(base) / name
        self.dir.mkdir()
        self.data = self.dir / "data"
        self.port = free_port()
        self.proc = None
        self.starts = 0
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        subprocess.run(
            [str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres",
             "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"],
            cwd=self.dir, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            timeout=120, **_as_postgres_kwargs())
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(
                f"\nlisten_addresses = '127.0.0.1'\nport = {self.port}\n"
                f"unix_socket_directories = '{self.dir}'\nmax_connections = 200\n"
                "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
                "autovacuum = off\nlog_min_messages = warning\n"
                # Every parse/bind/execute is logged with its backend PID: the tests read which
                # server prepared which statement under which name.
                "log_min_duration_statement = 0\nlog_line_prefix = '%m [%p] '\n")
        (self.data / "pg_hba.conf").write_text(
            "local all all trust\nhost all all 127.0.0.1/32 trust\n")
        self.start()

    @property
    def log_path(self):
        return self.dir / "postgres.log"

    def start(self):
        assert self.proc is None or not self.proc.alive()
        self.starts += 1
        log = open(self.log_path, "ab")
        popen = subprocess.Popen(
            [str(self.bindir / "postgres"), "-D", str(self.data)], cwd=self.dir, stdout=log,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            **_as_postgres_kwargs())
        log.close()
        self.proc = Process(popen, signal.SIGINT)  # SIGINT: fast shutdown
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not self.proc.alive():
                pytest.fail("PostgreSQL exited at start:\n" + self.log_path.read_text()[-3000:])
            ready = subprocess.run(
                [self.pg_isready(), "-q", "-h", "127.0.0.1", "-p",
                 str(self.port), "-U", "postgres"], timeout=10)
            if ready.returncode == 0:
                return
            time.sleep(0.1)
        pytest.fail("PostgreSQL did not become ready in 60 s")

    def pg_isready(self):
        """The bindir's pg_isready, else the client's (the npm server packages of
        scripts/install-test-servers.sh ship initdb, pg_ctl and postgres only)."""
        own = self.bindir / "pg_isready"
        if own.exists():
            return str(own)
        found = shutil.which("pg_isready")
        if found is None:
            pytest.fail(f"no pg_isready in {self.bindir} or on PATH (postgresql-client)")
        return found

    def stop(self):
        if self.proc is not None:
            self.proc.stop(timeout=30)

    def restart(self):
        self.stop()
        self.start()

    def dsn(self, dbname="postgres"):
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname} connect_timeout=10"

    def log_offset(self):
        return self.log_path.stat().st_size

    STATEMENT_LOG = re.compile(
        r"^\S+ \S+ \S+ \[(\d+)\] LOG:  duration: [0-9.]+ ms  (parse|bind|execute) ([^:\s]+): (.*)$")

    def statement_log(self, marker, since=0):
        """(backend pid, parse|bind|execute, statement name) for every logged extended-protocol
        step since byte offset `since` whose query text contains `marker`."""
        with open(self.log_path, "rb") as f:
            f.seek(since)
            text = f.read().decode(errors="replace")
        events = []
        for line in text.splitlines():
            m = self.STATEMENT_LOG.match(line)
            if m and marker in m.group(4):
                events.append((int(m.group(1)), m.group(2), m.group(3)))
        return events

    def query(self, sql):
        """One value per row of the first column, over a direct connection (psycopg2)."""
        import psycopg2

        conn = psycopg2.connect(self.dsn())
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(sql)
                return [row[0] for row in cur.fetchall()] if cur.description else []
        finally:
            conn.close()


class Pgfleet:
    def __init__(self, binary, pg, base, workers=1, pool_size=2, max_prepared=100,
                 pool_extra="", extra=""):
        self.dir = Path(tempfile.mkdtemp(prefix="pgfleet-", dir=base))
        self.port = free_port()
        self.metrics_port = free_port()
        self.config = self.dir / "pgfleet.yaml"
        self.config.write_text(
            f"listen: {{address: 127.0.0.1, port: {self.port}}}\n"
            f"workers: {workers}\n"
            f"databases: {{postgres: {{host: 127.0.0.1, port: {pg.port}}}}}\n"
            f"pool: {{pool_mode: transaction, default_pool_size: {pool_size}, "
            f"max_prepared_statements: {max_prepared}{pool_extra}}}\n"
            f"metrics: {{listen: '127.0.0.1:{self.metrics_port}'}}\n"
            "log: {log_connections: false, log_disconnections: false}\n" + extra)
        self.log_path = self.dir / "pgfleet.log"
        log = open(self.log_path, "wb")
        popen = subprocess.Popen([str(binary), "--config", str(self.config)], stdout=log,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True, cwd=self.dir)
        log.close()
        self.proc = Process(popen, signal.SIGTERM)
        await_listening(self.port, self.proc, self.log_path, "pgfleet")

    def dsn(self, **extra):
        s = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres connect_timeout=10"
        return " ".join([s] + [f"{k}={v}" for k, v in extra.items()])

    def log(self):
        return self.log_path.read_text(errors="replace")

    def server_statements(self, servers=2):
        """Named prepared statements that the pool's servers hold now, as {backend pid:
        {name: statement}}: `servers` transactions are held open at once over psycopg2 (which
        prepares nothing itself), so each sits on its own server of an idle pool."""
        import psycopg2

        conns = [psycopg2.connect(self.dsn()) for _ in range(servers)]
        try:
            found = {}
            for conn in conns:  # each keeps its transaction, hence its server
                with conn.cursor() as cur:
                    cur.execute("SELECT pg_backend_pid()")
                    pid = cur.fetchone()[0]
                    cur.execute("SELECT name, statement FROM pg_prepared_statements")
                    found[pid] = dict(cur.fetchall())
            return found
        finally:
            for conn in conns:
                conn.close()

    def stop(self):
        self.proc.stop(timeout=15)


@pytest.fixture(scope="session")
def session_dir():
    base = tempfile.mkdtemp(prefix="pgfleet-drivers-")
    os.chmod(base, 0o755)
    yield Path(base)
    if os.environ.get("KEEP_TMP") != "1":
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def pgfleet_binary(session_dir):
    src = Path(os.environ.get("PGFLEET_BIN", REPO / "build/cmd/pgfleet/pgfleet"))
    if not src.exists():
        pytest.fail(f"pgfleet binary {src} not found (set PGFLEET_BIN)")
    dst = session_dir / "pgfleet"
    shutil.copy2(src, dst)
    return dst


@pytest.fixture(scope="session")
def pg(session_dir):
    cluster = PgCluster(session_dir)
    yield cluster
    cluster.stop()


@pytest.fixture
def pgfleet(pg, pgfleet_binary, session_dir, request):
    """Factory: pgfleet(workers=1, pool_size=2, max_prepared=100). Stopped after the test; its
    log is printed when the test failed."""
    started = []

    def start(**kwargs):
        fleet = Pgfleet(pgfleet_binary, pg, session_dir, **kwargs)
        started.append(fleet)
        return fleet

    yield start
    for fleet in started:
        fleet.stop()
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        for fleet in started:
            print(f"--- pgfleet log ({fleet.log_path}), last 4000 characters:")
            print(fleet.log()[-4000:])


def pytest_configure(config):
    # `timeout` (scripts/test.sh) sends SIGTERM: turn it into KeyboardInterrupt so pytest still
    # runs the fixtures' teardown and stops the PostgreSQL and pgfleet processes it started.
    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


def assert_no_prepared_failures(errors):
    """errors: strings of every error a test saw. None may be a prepared-statement failure."""
    bad = [e for e in errors if PREPARED_FAILURES.search(e)]
    assert not bad, f"{len(bad)} prepared statement failure(s), e.g. {bad[:3]}"


def assert_same_lines(pooled, direct):
    """A program's output through pgfleet equals its output on a direct connection."""
    assert pooled == direct, "through pgfleet:\n" + "\n".join(pooled) + "\ndirect:\n" + \
        "\n".join(direct)


def assert_clean_log(fleet):
    """pgfleet logged no warning or error (a failed hidden re-Parse, a protocol error, ...)."""
    bad = [line for line in fleet.log().splitlines()
           if re.search(r"level=(warning|error)|protocol_error|panic", line)]
    assert not bad, "pgfleet log:\n" + "\n".join(bad[:20])


def run_clients(fn, count, timeout):
    """Runs fn(i) for i in range(count) on as many threads; returns the exceptions they raised.
    Fails the test if a thread is still running after `timeout` seconds."""
    errors = []
    lock = threading.Lock()

    def body(i):
        try:
            fn(i)
        except BaseException as e:  # noqa: B902 - reported to the test
            with lock:
                errors.append(e)

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    stuck = sum(t.is_alive() for t in threads)
    assert stuck == 0, f"{stuck} of {count} clients still running after {timeout} s"
    return errors


def assert_server_side_prepared(pg, marker, since, min_servers=2):
    """The driver's statements carrying `marker` were prepared on the servers under pgfleet's
    names (never the client's own), were executed by name, and reached at least `min_servers`
    server backends: a statement ran on a server that had not seen the client's Parse."""
    events = pg.statement_log(marker, since)
    parses = [(pid, name) for pid, kind, name in events if kind == "parse"]
    named = [(pid, name) for pid, name in parses if name != "<unnamed>"]
    foreign = sorted({name for _, name in named if not name.startswith("pgfleet_")})
    assert not foreign, f"client statement names reached the server: {foreign[:5]}"
    assert named, f"no named Parse for {marker!r} reached PostgreSQL (events: {events[:5]})"
    executes = [e for e in events if e[1] == "execute" and e[2].startswith("pgfleet_")]
    assert len(executes) > len(named), (
        f"{len(executes)} executions of {len(named)} prepared statements: not reused")
    servers_per_statement = {}
    for pid, name in named:
        servers_per_statement.setdefault(name, set()).add(pid)
    widest = max(len(pids) for pids in servers_per_statement.values())
    assert widest >= min_servers, (
        f"each statement was prepared on at most {widest} server(s): {servers_per_statement}")
    return {"parses": len(named), "executes": len(executes),
            "statements": len(servers_per_statement), "servers": widest}
