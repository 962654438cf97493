#!/usr/bin/env python3
"""pgfleet's end-to-end checks on the single-node Kubernetes of tests/e2e/cluster.sh.

Run by tests/e2e/run.sh inside the cluster's network namespace, with KUBECONFIG set, kubectl and
helm on PATH, the images loaded and a PostgreSQL listening on the node address. Every check prints
"ok" or "FAILED" with what it saw; the last line counts them. The scenarios follow issue 32:

  standalone: helm install (2 replicas), probes and PodDisruptionBudget, helm test, pgbench
    through the Service, kubectl scale 2 -> 4 -> 1 under pgbench, cancels through the Service,
    a rolling update (config change) under pgbench; all the while PostgreSQL's backends of the
    budgeted database are sampled and never exceed max_db_connections;
  controller: its ServiceAccount has no token and no permissions (it uses no Kubernetes API);
  sidecar: an app chart with the native sidecar; the app's first psql through 127.0.0.1 works;
    Prometheus (built from its module: Debian's 2.42 has no Kubernetes service discovery)
    discovers the pods through the Kubernetes API, scrapes them and loads the chart's alert rules.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import psycopg2
import psycopg2.extensions

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODE_IP = os.environ["E2E_NODE_IP"]
PG_PORT = int(os.environ.get("E2E_PG_PORT", "5432"))
IMAGE_REPO, IMAGE_TAG = os.environ.get("E2E_IMAGE", "localhost/pgfleet:dev").rsplit(":", 1)
CLIENT_REPO, CLIENT_TAG = os.environ.get("E2E_CLIENT_IMAGE", "localhost/pgfleet-e2e-client:dev").rsplit(":", 1)
PROMETHEUS = os.environ.get("E2E_PROMETHEUS", "prometheus")
WORK = tempfile.mkdtemp(prefix="pgfleet-e2e-checks.")
BUDGET = 12
APP_PASSWORD = "app-e2e-password"
NS = "pgfleet-e2e"
RELEASE = "pool"
SIDECAR_NS = "pgfleet-e2e-sidecar"

results = []


def log(msg):
    print(f"  .. {msg}", flush=True)


def check(name, ok, detail=""):
    results.append((name, bool(ok)))
    print(f"{'ok     ' if ok else 'FAILED '} {name}{': ' + detail if detail else ''}", flush=True)
    return ok


def run(*cmd, check_rc=True, timeout=300, **kw):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check_rc and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc


def kubectl(*args, **kw):
    return run("kubectl", *args, **kw)


def kjson(*args):
    return json.loads(kubectl(*args, "-o", "json").stdout)


def wait_until(what, limit, fn, interval=0.5):
    """Bounded poll: fn() until truthy, at most `limit` seconds; returns the last value."""
    deadline = time.monotonic() + limit
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            log(f"timed out after {limit}s waiting for {what}")
            return value
        time.sleep(interval)


def pg_admin(dbname="postgres"):
    conn = psycopg2.connect(host="127.0.0.1", port=PG_PORT, user="postgres", dbname=dbname)
    conn.autocommit = True
    return conn


def service_ip(ns, name):
    return kjson("-n", ns, "get", "service", name)["spec"]["clusterIP"]


def pods(ns, selector):
    return kjson("-n", ns, "get", "pods", "-l", selector)["items"]


def ready(pod):
    conds = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
    return conds.get("Ready") == "True" and not pod["metadata"].get("deletionTimestamp")


def scrape(ip, port, path="/metrics"):
    with urllib.request.urlopen(f"http://{ip}:{port}{path}", timeout=5) as resp:
        return resp.read().decode()


def metric_sum(text, name):
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


class BackendSampler(threading.Thread):
    """Counts PostgreSQL's client backends of the budgeted database every 50 ms."""

    def __init__(self):
        super().__init__(daemon=True)
        self.max_seen = 0
        self.samples = 0
        self.stop = threading.Event()
        self.conn = pg_admin()

    def run(self):
        while not self.stop.is_set():
            try:
                if self.conn is None:
                    self.conn = pg_admin()
                cur = self.conn.cursor()
                cur.execute("SELECT count(*) FROM pg_stat_activity "
                            "WHERE datname = 'app' AND backend_type = 'client backend'")
                self.max_seen = max(self.max_seen, cur.fetchone()[0])
                self.samples += 1
            except psycopg2.Error:  # PostgreSQL stopped on purpose (readiness_checks)
                self.conn = None
            self.stop.wait(0.05)


class Pgbench:
    """pgbench through the client Service in the background; connect per transaction (-C), so a
    pod that goes away can fail a transaction only if it drops one in flight or a connection
    reaches it after it stopped serving."""

    def __init__(self, host, seconds, clients=6, connect_each=True):
        env = dict(os.environ, PGPASSWORD=APP_PASSWORD)
        cmd = ["pgbench", "-h", host, "-p", "6432", "-U", "app", "-n", "-S", "-T", str(seconds),
               "-c", str(clients), "-j", "2", "-P", "5"]
        if connect_each:
            cmd.append("-C")
        self.proc = subprocess.Popen(cmd + ["app"], env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)

    def result(self, limit):
        out, _ = self.proc.communicate(timeout=limit)
        processed = failed = 0
        for line in out.splitlines():
            if line.startswith("number of transactions actually processed:"):
                processed = int(line.split(":")[1].split("/")[0])
            if line.startswith("number of failed transactions:"):
                failed = int(line.split(":")[1].split()[0])
        aborted = [l for l in out.splitlines() if "aborted" in l or "error" in l.lower()]
        return self.proc.returncode, processed, failed, aborted, out


def committed_transactions():
    with pg_admin() as conn:
        cur = conn.cursor()
        cur.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = 'app'")
        return cur.fetchone()[0]


def wait_for_transactions(count, limit=30):
    """Polls until PostgreSQL has committed `count` more transactions in 'app' (pgbench runs)."""
    start = committed_transactions()
    return wait_until(f"{count} transactions", limit,
                      lambda: committed_transactions() - start >= count)


def standalone_values():
    path = os.path.join(WORK, "standalone.yaml")
    values = {
        "image": {"repository": IMAGE_REPO, "tag": IMAGE_TAG, "pullPolicy": "Never"},
        "replicaCount": 2,
        "config": {
            "workers": 2,
            "databases": {"app": {"host": NODE_IP, "port": PG_PORT, "dbname": "app",
                                  "max_db_connections": BUDGET}},
            "pool": {"default_pool_size": 8},
            "log": {"log_connections": False, "log_disconnections": False},
        },
        "secret": {"userlist": {"app": APP_PASSWORD}},
        # Four pooler pods and the controller on a 2-core node.
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"},
                      "limits": {"cpu": "1", "memory": "256Mi"}},
        "controller": {"resources": {"requests": {"cpu": "50m", "memory": "32Mi"}}},
        "shutdown": {"preStopSleepSeconds": 3, "drainTimeoutSeconds": 15},
        "tests": {"image": {"repository": CLIENT_REPO, "tag": CLIENT_TAG, "pullPolicy": "Never"},
                  "user": "app", "password": APP_PASSWORD},
    }
    with open(path, "w") as f:
        json.dump(values, f)
    return path


SELECTOR = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=pooler"


def pooler_pods():
    return [p for p in pods(NS, SELECTOR) if not p["metadata"].get("deletionTimestamp")]


def wait_pooler_ready(count, limit=180):
    return wait_until(f"{count} ready pooler pods", limit,
                      lambda: len([p for p in pooler_pods() if ready(p)]) == count
                      and len(pooler_pods()) == count)


def controller_pod():
    items = pods(NS, f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=controller")
    return items[0] if items else None


def pod_metric(pod, name):
    """The sum of a metric's series on a pod's /metrics (port 9127), or None when unreachable."""
    if not pod or not pod["status"].get("podIP"):
        return None
    try:
        return metric_sum(scrape(pod["status"]["podIP"], 9127), name)
    except OSError:
        return None


def controller_metric(name):
    return pod_metric(controller_pod(), name)


def scale(replicas):
    kubectl("-n", NS, "scale", f"deployment/{RELEASE}-pgfleet", f"--replicas={replicas}")


def standalone():
    print("== standalone mode", flush=True)
    kubectl("create", "namespace", NS)
    values = standalone_values()
    install = run("helm", "install", RELEASE, os.path.join(ROOT, "helm/pgfleet"), "-n", NS,
                  "-f", values, "--wait", "--timeout", "4m", check_rc=False, timeout=300)
    if not check("helm install (standalone, 2 replicas) becomes ready", install.returncode == 0,
                 install.stderr.strip()[-500:]):
        describe(NS)
        return
    sampler = BackendSampler()
    sampler.start()
    try:
        standalone_scenarios()
    finally:
        sampler.stop.set()
        sampler.join()
    check(f"PostgreSQL never listed more than max_db_connections={BUDGET} backends of 'app'",
          sampler.max_seen <= BUDGET and sampler.samples > 100,
          f"max {sampler.max_seen} in {sampler.samples} samples")


def standalone_scenarios():
    pp = pooler_pods()
    containers = [c for p in pp for c in p["spec"]["containers"] if c["name"] == "pgfleet"]
    check("pooler pods run as uid 65532 with startup, readiness and liveness probes",
          len(containers) == 2 and all(
              c.get("startupProbe") and c.get("readinessProbe") and c.get("livenessProbe")
              for c in containers) and all(
              p["spec"]["securityContext"].get("runAsUser") == 65532 for p in pp))
    uid = kubectl("-n", NS, "exec", pp[0]["metadata"]["name"], "-c", "pgfleet", "--",
                  "cat", "/proc/1/status", check_rc=False).stdout
    check("pgfleet in the pod runs as uid 65532 (kubectl exec)",
          any(l.startswith("Uid:") and l.split()[1] == "65532" for l in uid.splitlines()),
          uid[:200])

    # No --logs: the chart deletes a test pod that succeeded before helm could read its log.
    helm_test = run("helm", "test", RELEASE, "-n", NS, "--timeout", "2m", check_rc=False,
                    timeout=180)
    outcome = [l for l in (helm_test.stdout + helm_test.stderr).splitlines()
               if l.startswith(("Phase:", "Error", "psql", "POD LOGS")) or "error" in l]
    check("helm test (psql through the Service from a pod, by the Service's DNS name)",
          helm_test.returncode == 0, " | ".join(outcome)[-600:])
    if helm_test.returncode != 0:
        describe(NS)

    svc = service_ip(NS, f"{RELEASE}-pgfleet")
    bench = Pgbench(svc, 10, connect_each=False).result(60)
    check("pgbench through the Service (10 s, 6 clients)", bench[0] == 0 and bench[1] > 0 and bench[2] == 0,
          f"rc {bench[0]}, {bench[1]} transactions, {bench[2]} failed")

    members = wait_until("the controller to count 2 pods", 60,
                         lambda: controller_metric("pgfleet_controller_pods") == 2)
    check("the controller counts the 2 pods", members)

    # Scale 2 -> 4 -> 1 under pgbench (a new connection per transaction).
    bench = Pgbench(svc, 75)
    wait_for_transactions(500)
    scale(4)
    grew = wait_pooler_ready(4, 120)
    shares4 = wait_until("the controller to count 4 pods", 60,
                         lambda: controller_metric("pgfleet_controller_pods") == 4)
    wait_for_transactions(500)
    scale(1)
    shrank = wait_pooler_ready(1, 120)
    shares1 = wait_until("the controller to count 1 pod", 90,
                         lambda: controller_metric("pgfleet_controller_pods") == 1)
    rc, processed, failed, aborted, out = bench.result(180)
    check("kubectl scale 2 -> 4: 4 pods ready, the controller counts 4", grew and shares4)
    check("kubectl scale 4 -> 1: 1 pod left, the controller counts 1", shrank and shares1)
    share_sum = controller_metric("pgfleet_controller_share")
    check(f"the one pod's share is the whole budget ({BUDGET})", share_sum == BUDGET,
          f"sum of shares {share_sum}")
    check("pgbench -C through the Service while scaling: no failed transaction",
          rc == 0 and failed == 0 and processed > 0 and not aborted,
          f"rc {rc}, {processed} transactions, {failed} failed {aborted[:3]}")

    # Cancels through the Service: each CancelRequest is a new connection that kube-proxy may
    # give to any pod, and any worker there; with 2 pods of 2 workers, most land elsewhere.
    scale(2)
    wait_pooler_ready(2, 120)
    wait_until("the controller to count 2 pods", 60,
               lambda: controller_metric("pgfleet_controller_pods") == 2)
    forwarded_before = sum(pod_metric(p, "pgfleet_cancel_forwarded_total") or 0 for p in pooler_pods())
    cancelled = 0
    for _ in range(10):
        cancelled += cancel_once(svc)
    forwarded = sum(pod_metric(p, "pgfleet_cancel_forwarded_total") or 0 for p in pooler_pods()) - forwarded_before
    check("10 of 10 queries cancelled by a CancelRequest through the Service", cancelled == 10,
          f"{cancelled} cancelled")
    check("some of those cancels were forwarded to the owning worker (pgfleet_cancel_forwarded_total)",
          forwarded >= 1,
          f"{forwarded:.0f} forwarded")

    # A rolling update (a config change rolls the pods by its checksum) under pgbench.
    bench = Pgbench(svc, 60)
    wait_for_transactions(500)
    before = {p["metadata"]["name"] for p in pooler_pods()}
    upgrade = run("helm", "upgrade", RELEASE, os.path.join(ROOT, "helm/pgfleet"), "-n", NS,
                  "--reuse-values", "--set", "config.pool.default_pool_size=7", check_rc=False)
    rolled = run("kubectl", "-n", NS, "rollout", "status", f"deployment/{RELEASE}-pgfleet",
                 "--timeout=180s", check_rc=False, timeout=200)
    after = {p["metadata"]["name"] for p in pooler_pods()}
    rc, processed, failed, aborted, out = bench.result(180)
    check("helm upgrade (config change) rolls every pod", upgrade.returncode == 0 and
          rolled.returncode == 0 and not (before & after), f"{sorted(before)} -> {sorted(after)}")
    check("pgbench -C through the Service during the rolling update: no failed transaction",
          rc == 0 and failed == 0 and processed > 0 and not aborted,
          f"rc {rc}, {processed} transactions, {failed} failed {aborted[:3]}")

    readiness_checks()
    pdb_checks(svc)


def readiness_checks():
    """The readinessProbe (/readyz) as the chart documents it: ready while PostgreSQL answers.
    With PostgreSQL stopped the pods leave the Service's endpoints; started again, they return."""
    pg_ctl = [os.environ["E2E_PG_CTL"], "-D", os.environ["E2E_PGDATA"], "-w"]

    def ready_endpoints():
        slices = kjson("-n", NS, "get", "endpointslices", "-l",
                       f"kubernetes.io/service-name={RELEASE}-pgfleet")["items"]
        return sum(1 for sl in slices for e in sl.get("endpoints") or []
                   if e.get("conditions", {}).get("ready"))

    before = ready_endpoints()
    run("runuser", "-u", "postgres", "--", *pg_ctl, "-m", "fast", "stop")
    try:
        gone = wait_until("the pooler pods to turn unready", 60, lambda: ready_endpoints() == 0)
    finally:
        run("runuser", "-u", "postgres", "--", *pg_ctl, "-l",
            os.environ["E2E_PGDATA"] + "/restart.log", "start")
        with open(os.environ["E2E_PGDATA"] + "/postmaster.pid") as f:
            pid = f.readline().strip()
        with open(os.environ["E2E_PGDATA"] + "/../pids/postgres.pid", "w") as f:
            f.write(pid + "\n")
    back = wait_until("the pooler pods to be ready again", 60, lambda: ready_endpoints() == before)
    check("readiness: PostgreSQL stopped takes the pods out of the Service, started brings them back",
          before == 2 and gone and back, f"{before} ready endpoints before")


def cancel_once(host):
    conn = psycopg2.connect(host=host, port=6432, user="app", password=APP_PASSWORD, dbname="app")
    try:
        cur = conn.cursor()
        outcome = {}

        def query():
            started = time.monotonic()
            try:
                cur.execute("SELECT pg_sleep(20)")
                outcome["error"] = None
            except psycopg2.Error as e:
                outcome["error"] = e.pgcode
            outcome["seconds"] = time.monotonic() - started

        t = threading.Thread(target=query)
        t.start()
        # The query is running once PostgreSQL shows it (a bounded poll).
        with pg_admin() as admin:
            acur = admin.cursor()
            wait_until("pg_sleep to run", 10, lambda: (
                acur.execute("SELECT 1 FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(20)' "
                             "AND state = 'active'") or acur.fetchone()))
        conn.cancel()  # libpq's PQcancel: a CancelRequest on a new connection to the Service
        t.join(25)
        return 1 if outcome.get("error") == "57014" and outcome["seconds"] < 10 else 0
    finally:
        conn.close()


def pdb_checks(svc):
    pdb = kjson("-n", NS, "get", "pdb", f"{RELEASE}-pgfleet")
    check("PodDisruptionBudget: minAvailable 1 over the pooler pods",
          pdb["spec"].get("minAvailable") == 1 and
          wait_until("the PDB to allow one disruption", 30, lambda: kjson(
              "-n", NS, "get", "pdb", f"{RELEASE}-pgfleet")["status"].get("disruptionsAllowed") == 1))
    scale(1)
    wait_pooler_ready(1, 120)
    wait_until("the PDB to allow none", 30, lambda: kjson(
        "-n", NS, "get", "pdb", f"{RELEASE}-pgfleet")["status"].get("disruptionsAllowed") == 0)
    name = pooler_pods()[0]["metadata"]["name"]
    eviction = os.path.join(WORK, "eviction.json")
    with open(eviction, "w") as f:
        json.dump({"apiVersion": "policy/v1", "kind": "Eviction",
                   "metadata": {"name": name, "namespace": NS}}, f)
    evict = kubectl("create", "--raw", f"/api/v1/namespaces/{NS}/pods/{name}/eviction",
                    "-f", eviction, check_rc=False)
    check("evicting the last pooler pod is refused by the PodDisruptionBudget",
          evict.returncode != 0 and "disruption budget" in evict.stderr, evict.stderr.strip()[-200:])


def controller_rbac():
    print("== controller RBAC", flush=True)
    sa = f"system:serviceaccount:{NS}:{RELEASE}-pgfleet-controller"
    pod = controller_pod()
    mounted = [v for v in pod["spec"].get("volumes", []) if v["name"].startswith("kube-api-access")]
    check("the controller pod mounts no API token", not mounted)
    for verb, resource in [("list", "pods"), ("get", "endpoints"), ("watch", "endpointslices"),
                           ("get", "configmaps")]:
        can = kubectl("auth", "can-i", verb, resource, "-n", NS, f"--as={sa}", check_rc=False)
        check(f"the controller's ServiceAccount may not {verb} {resource}",
              can.stdout.strip() == "no", can.stdout.strip())


def sidecar():
    print("== sidecar mode", flush=True)
    kubectl("create", "namespace", SIDECAR_NS)
    chart = os.path.join(WORK, "sidecar-app")
    shutil.copytree(os.path.join(ROOT, "tests/helm/sidecar-app"), chart)
    os.makedirs(os.path.join(chart, "charts"))
    shutil.copytree(os.path.join(ROOT, "helm/pgfleet"), os.path.join(chart, "charts/pgfleet"))
    values = os.path.join(WORK, "sidecar.yaml")
    # The app's first act is a query through the sidecar; a failure exits, and the kubelet would
    # restart it (restartCount shows it).
    app_command = ["sh", "-c", "t0=$(date +%s%N); psql -XAtc 'SELECT 42' || exit 1; "
                   "echo FIRST-QUERY-OK in $((($(date +%s%N) - t0) / 1000000)) ms; "
                   "trap 'exit 0' TERM; sleep infinity & wait"]
    with open(values, "w") as f:
        json.dump({
            "replicaCount": 2,
            "image": f"{CLIENT_REPO}:{CLIENT_TAG}",
            "command": app_command,
            "env": {"PGUSER": "app", "PGPASSWORD": APP_PASSWORD, "PGDATABASE": "app"},
            "pgfleet": {
                "image": {"repository": IMAGE_REPO, "tag": IMAGE_TAG, "pullPolicy": "Never"},
                "config": {"databases": {"app": {"host": NODE_IP, "port": PG_PORT,
                                                 "max_db_connections": 6}}},
                "secret": {"userlist": {"app": APP_PASSWORD}},
                "resources": {"requests": {"cpu": "50m", "memory": "64Mi"},
                              "limits": {"cpu": "1", "memory": "256Mi"}},
                "controller": {"resources": {"requests": {"cpu": "50m", "memory": "32Mi"}}},
                "metrics": {"podMonitor": {"enabled": False}},
            },
        }, f)
    install = run("helm", "install", "apps", chart, "-n", SIDECAR_NS, "-f", values, "--wait",
                  "--timeout", "4m", check_rc=False, timeout=300)
    if not check("helm install of an app chart with the pgfleet native sidecar",
                 install.returncode == 0, install.stderr.strip()[-500:]):
        describe(SIDECAR_NS)
        return
    app_pods, millis = first_queries()
    restarts = [s["restartCount"] for p in app_pods for s in p["status"]["containerStatuses"]]
    sidecars = [c for p in app_pods for c in p["spec"].get("initContainers", [])
                if c.get("restartPolicy") == "Always"]
    # A fresh controller grants nothing for lease_timeout (15 s): it cannot tell a first start
    # from a restart whose pods have not come back yet, and their old leases must run out.
    check("the app's first query through 127.0.0.1:6432 succeeds, no app restart",
          len(app_pods) == 2 and len(millis) == 2 and restarts == [0, 0],
          f"restarts {restarts}, first queries in {millis} ms (a fresh controller waits 15 s)")
    check("pgfleet runs as a native sidecar (initContainer, restartPolicy Always)",
          len(sidecars) == 2)
    # A rollout: each new pod starts with share 0 (the old pods hold the budget); its first
    # login is demand the controller must see (before: it waited for old pods to leave, 43 s).
    kubectl("-n", SIDECAR_NS, "rollout", "restart", "deployment/apps-app")
    rolled = kubectl("-n", SIDECAR_NS, "rollout", "status", "deployment/apps-app",
                     "--timeout=180s", check_rc=False, timeout=200)
    app_pods, millis = first_queries()
    check("after a rollout, each new app's first query takes under 5 s",
          rolled.returncode == 0 and len(millis) == 2 and max(millis) < 5000,
          f"first queries in {millis} ms")
    prometheus_checks(app_pods)


def first_queries():
    """The running app pods and how long each one's first query took (ms), once both logged it."""

    def current():
        items = [p for p in pods(SIDECAR_NS, "app.kubernetes.io/name=sidecar-app")
                 if not p["metadata"].get("deletionTimestamp")]
        logs = [kubectl("-n", SIDECAR_NS, "logs", p["metadata"]["name"], "-c", "app",
                        check_rc=False).stdout for p in items]
        millis = [int(l.split()[2]) for text in logs for l in text.splitlines()
                  if l.startswith("FIRST-QUERY-OK")]
        return items, millis

    wait_until("the apps' first queries", 60, lambda: len(current()[1]) == 2)
    return current()


def prometheus_checks(app_pods):
    rules_dir = os.path.join(ROOT, "helm/pgfleet/alerts")
    rule_files = sorted(os.path.join(rules_dir, f) for f in os.listdir(rules_dir)
                        if f.endswith((".yaml", ".yml")))
    config = os.path.join(WORK, "prometheus.yml")
    with open(config, "w") as f:
        json.dump({
            "global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
            "rule_files": rule_files,
            "scrape_configs": [{
                "job_name": "pgfleet-pods",
                "kubernetes_sd_configs": [{"role": "pod", "kubeconfig_file": os.environ["KUBECONFIG"],
                                           "namespaces": {"names": [SIDECAR_NS]}}],
                # What the chart's PodMonitor selects: fleet pods, their pgfleet-metrics port.
                "relabel_configs": [
                    {"source_labels": ["__meta_kubernetes_pod_container_port_name"],
                     "regex": "pgfleet-metrics", "action": "keep"},
                    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
                ],
            }],
        }, f)
    port = 19090
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={config}",
                             f"--storage.tsdb.path={WORK}/prometheus",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=open(os.path.join(WORK, "prometheus.log"), "w"),
                            stderr=subprocess.STDOUT)
    try:
        def api(path):
            try:
                return json.loads(scrape("127.0.0.1", port, path))["data"]
            except (OSError, ValueError, KeyError):
                return None

        names = {p["metadata"]["name"] for p in app_pods}

        def up_targets():
            data = api("/api/v1/targets")
            if not data:
                return None
            up = {t["labels"].get("pod") for t in data["activeTargets"] if t["health"] == "up"}
            return names <= up and up

        up = wait_until("Prometheus to scrape both app pods", 60, up_targets)
        check("Prometheus (Kubernetes service discovery) scrapes the sidecars' /metrics",
              up, f"up: {sorted(up) if up else up}")
        series = wait_until("pgfleet series", 30, lambda: (api(
            "/api/v1/query?query=pgfleet_up") or {}).get("result"))
        check("pgfleet series queryable in Prometheus", series)
        groups = api("/api/v1/rules") or {}
        rules = [r for g in groups.get("groups", []) for r in g["rules"]]
        check("the chart's alert rules load into Prometheus",
              rule_files and len(rules) > 0 and all(r.get("health") != "err" for r in rules),
              f"{len(rules)} rules from {len(rule_files)} files")
    finally:
        proc.terminate()
        proc.wait(20)


def describe(ns):
    out = kubectl("-n", ns, "get", "pods,events", "-o", "wide", check_rc=False).stdout
    print("\n".join("        " + l for l in out.splitlines()[-40:]))


def main():
    started = time.monotonic()
    try:
        standalone()
        controller_rbac()
        sidecar()
    except Exception as e:  # a harness error is a failure too, reported as one
        check("the checks ran to the end", False, repr(e))
    passed = sum(1 for _, ok in results if ok)
    failed = [name for name, ok in results if not ok]
    print(f"e2e: {passed} passed, {len(failed)} failed in {time.monotonic() - started:.0f} s"
          + (": " + "; ".join(failed) if failed else ""), flush=True)
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
