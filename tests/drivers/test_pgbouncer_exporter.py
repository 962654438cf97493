"""prometheus-community's pgbouncer_exporter (tests/third_party, built with Go) scrapes pgfleet's
admin console as it scrapes PgBouncer's (issue 35): no errors, and every series it reports for
PgBouncer (Debian's, run beside it on the same PostgreSQL) it reports for pgfleet too."""

import os
import re
import shutil
import signal
import subprocess
import urllib.request
from pathlib import Path

import psycopg2
import pytest

from conftest import Process, _as_postgres_kwargs, await_listening, free_port

HERE = Path(__file__).resolve().parent
EXPORTER_SRC = HERE.parent / "third_party" / "pgbouncer_exporter"
TOOLS = Path(os.environ.get("PGFLEET_TOOLS", "/var/tmp/pgfleet-tools"))


@pytest.fixture(scope="session")
def exporter_binary():
    # The exporter's go.mod wants Go 1.25: the toolchain in /usr/local/go, not Debian's 1.19.
    go = "/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else shutil.which("go")
    if go is None:
        pytest.fail("no Go toolchain in /usr/local/go")
    out = TOOLS / "pgbouncer_exporter-6918f4e"
    if not out.exists():
        TOOLS.mkdir(parents=True, exist_ok=True)
        subprocess.run([go, "build", "-o", str(out), "."], cwd=EXPORTER_SRC, check=True,
                       timeout=600)
    return out


def start_exporter(binary, dsn, log_path):
    port = free_port()
    log = open(log_path, "wb")
    popen = subprocess.Popen([str(binary), f"--pgBouncer.connectionString={dsn}",
                              f"--web.listen-address=127.0.0.1:{port}", "--log.level=debug"],
                             stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
    log.close()
    proc = Process(popen, signal.SIGTERM)
    await_listening(port, proc, log_path, "pgbouncer_exporter")
    return proc, port


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def series(text):
    """{metric name: set of label names} of the pgbouncer_* series in an exposition."""
    found = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith("pgbouncer_"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s", line)
        labels = set(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)=\"", m.group(3) or ""))
        found.setdefault(m.group(1), set()).update(labels)
    return found


def value(text, name):
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.fixture
def pgbouncer(pg, session_dir):
    """Debian's PgBouncer on the same PostgreSQL, trust, admin user postgres."""
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not os.path.exists(binary):
        pytest.fail("no pgbouncer (apt-get install pgbouncer; scripts/install-deps.sh does)")
    d = Path(session_dir) / f"pgbouncer-{os.getpid()}-{free_port()}"
    d.mkdir()
    if os.geteuid() == 0:
        shutil.chown(d, "postgres", "postgres")  # PgBouncer refuses to run as root
    port = free_port()
    (d / "userlist.txt").write_text('"postgres" ""\n')
    (d / "pgbouncer.ini").write_text(
        f"[databases]\npostgres = host=127.0.0.1 port={pg.port}\n"
        f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {d}/userlist.txt\nadmin_users = postgres\n"
        "pool_mode = transaction\n")
    log = open(d / "pgbouncer.log", "wb")
    popen = subprocess.Popen([binary, str(d / "pgbouncer.ini")], stdout=log,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True, **_as_postgres_kwargs())
    log.close()
    proc = Process(popen, signal.SIGTERM)
    await_listening(port, proc, d / "pgbouncer.log", "pgbouncer")
    yield port
    proc.stop(10)


def run_traffic(port):
    conn = psycopg2.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres")
    conn.autocommit = True
    with conn.cursor() as cur:
        for i in range(20):
            cur.execute("SELECT %s", (i,))
    return conn  # kept open: a client and a pool in the SHOW output


def test_exporter_reports_for_pgfleet_what_it_reports_for_pgbouncer(
        pg, pgfleet, pgbouncer, exporter_binary, session_dir):
    fleet = pgfleet(workers=2, pool_size=2, extra="admin: {users: [postgres]}\n")
    held = [run_traffic(fleet.port), run_traffic(pgbouncer)]
    logs = {}
    texts = {}
    exporters = []
    try:
        for name, port in (("pgfleet", fleet.port), ("pgbouncer", pgbouncer)):
            logs[name] = Path(session_dir) / f"exporter-{name}-{free_port()}.log"
            proc, mport = start_exporter(
                exporter_binary,
                f"postgres://postgres@127.0.0.1:{port}/pgbouncer?sslmode=disable", logs[name])
            exporters.append(proc)
            texts[name] = scrape(mport)
            texts[name] = scrape(mport)  # twice: counters and the second round of queries
    finally:
        for proc in exporters:
            proc.stop(5)
        for conn in held:
            conn.close()
    got = {name: series(text) for name, text in texts.items()}
    assert value(texts["pgbouncer"], "pgbouncer_up") == 1, texts["pgbouncer"]
    assert value(texts["pgfleet"], "pgbouncer_up") == 1, texts["pgfleet"]
    exporter_log = logs["pgfleet"].read_text()
    errors = [line for line in exporter_log.splitlines()
              if "level=ERROR" in line or "level=WARN" in line]
    assert not errors, exporter_log
    missing = {name: labels for name, labels in got["pgbouncer"].items()
               if name not in got["pgfleet"]}
    assert not missing, f"series PgBouncer has and pgfleet lacks: {sorted(missing)}"
    differing = {name: (labels, got["pgfleet"][name]) for name, labels in got["pgbouncer"].items()
                 if labels != got["pgfleet"][name]}
    assert not differing, differing
    # The numbers mean something: the traffic shows.
    assert value(texts["pgfleet"], "pgbouncer_stats_totals_queries_pooled_total") >= 20
    assert value(texts["pgfleet"], "pgbouncer_pools_client_active_connections") is not None
    assert value(texts["pgfleet"], "pgbouncer_config_max_client_connections") > 0
