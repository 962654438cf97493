#!/usr/bin/env python3
"""Checks of rendered manifests, the dashboard and the alerts, for tests/helm/run.sh.

Subcommands (each exits non-zero with one line per problem):
  extract-config RENDERED OUTDIR   write each pgfleet.yaml found in a ConfigMap of RENDERED to
                                   OUTDIR/<configmap>/pgfleet.yaml (and its pgbouncer.ini, when
                                   the ConfigMap has one), with the files it names under
                                   /etc/pgfleet (userlist, peering token) materialised beside it
                                   and the paths rewritten, so `pgfleet --check-config` can read
                                   them; prints the config paths.
  manifests MODE RENDERED          structural checks of a standalone or sidecar rendering.
  dashboard DASHBOARD RULES_OUT    every panel query uses only pgfleet's metric names; writes
                                   the queries as a Prometheus rule file for `promtool check rules`.
  alerts ALERTS                    every alert uses only pgfleet's metric names (and `up`).
  values-doc VALUES                every key of the chart's values.yaml is documented by a comment
                                   "# <dotted.path> -- ..." (a documented map covers its children).
  token RENDERED                   the chart's Secret has a generated peering token, and the
                                   pooler's checksum/secret annotation is computed from it.
  differs A B KEY                  the pod-template annotation KEY of the pgfleet Deployment (or
                                   the sidecar app's) differs between renderings A and B.
"""
import base64
import json
import os
import re
import sys

import yaml

# The metric names pgfleet exports (issue 5). Histograms add _bucket, _sum and _count.
METRICS = {
    "pgfleet_build_info", "pgfleet_up", "pgfleet_workers", "pgfleet_worker_restarts_total",
    "pgfleet_pools_client_active_connections", "pgfleet_pools_client_waiting_connections",
    "pgfleet_pools_client_idle_connections", "pgfleet_pools_server_active_connections",
    "pgfleet_pools_server_idle_connections", "pgfleet_pools_server_used_connections",
    "pgfleet_pools_server_testing_connections", "pgfleet_pools_server_login_connections",
    "pgfleet_pools_client_maxwait_seconds", "pgfleet_stats_transactions_total",
    "pgfleet_stats_queries_total", "pgfleet_stats_received_bytes_total",
    "pgfleet_stats_sent_bytes_total", "pgfleet_budget_share",
    "pgfleet_budget_max_db_connections", "pgfleet_cancel_received_total",
    "pgfleet_cancel_forwarded_total", "pgfleet_cancel_dropped_total",
    "pgfleet_cancel_queued_total", "pgfleet_cancel_abandoned_total",
    "pgfleet_cancel_repeated_total",
    "pgfleet_prepared_statements_total", "pgfleet_errors_total",
    "pgfleet_client_connections_total", "pgfleet_max_client_conn",
    "pgfleet_clients_rejected_total", "pgfleet_cancel_rate_limited_total",
    "pgfleet_database_host_serves",
    "pgfleet_pools_server_pinned_connections", "pgfleet_session_pins_total",
    "pgfleet_pools_client_listening_connections", "pgfleet_pools_server_listening_connections",
    "pgfleet_notifications_sent_total", "pgfleet_notifications_dropped_total",
}
HISTOGRAMS = {"pgfleet_stats_query_duration_seconds", "pgfleet_stats_transaction_duration_seconds",
              "pgfleet_stats_wait_duration_seconds"}
for _h in HISTOGRAMS:
    METRICS |= {_h + "_bucket", _h + "_sum", _h + "_count"}

PROMQL_WORDS = {
    # aggregations and keywords
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk",
    "topk", "quantile", "limitk", "limit_ratio", "by", "without", "on", "ignoring",
    "group_left", "group_right", "and", "or", "unless", "offset", "bool", "atan2",
    # functions
    "abs", "absent", "absent_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min",
    "day_of_month", "day_of_week", "day_of_year", "days_in_month", "delta", "deriv", "exp",
    "floor", "histogram_quantile", "histogram_count", "histogram_sum", "histogram_fraction",
    "holt_winters", "hour", "idelta", "increase", "irate", "label_join", "label_replace", "ln",
    "log2", "log10", "minute", "month", "predict_linear", "rate", "resets", "round", "scalar",
    "sgn", "sort", "sort_desc", "sqrt", "time", "timestamp", "vector", "year", "avg_over_time",
    "min_over_time", "max_over_time", "sum_over_time", "count_over_time", "quantile_over_time",
    "stddev_over_time", "stdvar_over_time", "last_over_time", "present_over_time", "inf", "nan",
}

GRAFANA_VARS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h",
                "$namespace": ".*", "$pod": ".*", "$database": ".*"}

problems = []


def fail(msg):
    problems.append(msg)


def load_docs(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d]


def metric_names(expr):
    """The metric names an expression reads: identifiers outside strings, label matchers,
    grouping clauses and ranges, minus PromQL's own words."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1", e)
    names = set()
    for tok in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        if tok in PROMQL_WORDS or re.fullmatch(r"[0-9.eE]+", tok):
            continue
        names.add(tok)
    return names


def cmd_dashboard(path, rules_out):
    with open(path, encoding="utf-8") as f:
        dash = json.load(f)
    exprs = []

    def walk(panels):
        for p in panels:
            walk(p.get("panels", []))
            for t in p.get("targets", []):
                if "expr" in t:
                    exprs.append((p.get("title", "?"), t["expr"]))
    walk(dash.get("panels", []))
    if not exprs:
        fail("dashboard has no queries")
    for title, expr in exprs:
        unknown = metric_names(expr) - METRICS
        if unknown:
            fail(f"panel {title!r}: unknown metric(s) {sorted(unknown)} in {expr}")
    # Template variables must exist and select on labels pgfleet's series carry.
    names = {v["name"] for v in dash.get("templating", {}).get("list", [])}
    for want in ("datasource", "namespace", "pod", "database"):
        if want not in names:
            fail(f"dashboard lacks the template variable {want}")
    for v in dash.get("templating", {}).get("list", []):
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        m = re.match(r"label_values\((.*),\s*\w+\)$", q or "")
        if m:
            unknown = metric_names(m.group(1)) - METRICS
            if unknown:
                fail(f"variable {v['name']}: unknown metric(s) {sorted(unknown)}")
    # Every panel's datasource is the templated one.
    for p in dash.get("panels", []):
        if p.get("type") != "row" and p.get("datasource", {}).get("uid") != "${datasource}":
            fail(f"panel {p.get('title')!r} does not use the ${{datasource}} variable")
    rules = []
    for i, (title, expr) in enumerate(exprs):
        e = expr
        for k, v in sorted(GRAFANA_VARS.items(), key=lambda kv: -len(kv[0])):
            e = e.replace(k, v)
        if "$" in e:
            fail(f"panel {title!r}: unreplaced variable in {expr}")
        rules.append({"record": f"dashboard:query_{i}", "expr": e})
    with open(rules_out, "w", encoding="utf-8") as f:
        yaml.safe_dump({"groups": [{"name": "dashboard-queries", "rules": rules}]}, f)
    print(f"{len(exprs)} panel queries use only pgfleet metrics")


def cmd_alerts(path):
    with open(path, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    n = 0
    for g in doc["groups"]:
        for r in g["rules"]:
            n += 1
            unknown = metric_names(r["expr"]) - METRICS - {"up"}
            if unknown:
                fail(f"rule {r.get('alert', r.get('record'))}: unknown metric(s) {sorted(unknown)}")
            if "alert" in r:
                if r.get("labels", {}).get("severity") not in ("critical", "warning", "info"):
                    fail(f"alert {r['alert']}: severity label missing or unusual")
                if not r.get("annotations", {}).get("summary"):
                    fail(f"alert {r['alert']}: no summary annotation")
    print(f"{n} rules use only pgfleet metrics")


def cmd_extract_config(rendered, outdir):
    docs = load_docs(rendered)
    secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
    found = 0
    for d in docs:
        if d["kind"] != "ConfigMap" or "pgfleet.yaml" not in (d.get("data") or {}):
            continue
        found += 1
        name = d["metadata"]["name"]
        target = os.path.join(outdir, name)
        os.makedirs(target, exist_ok=True)
        text = d["data"]["pgfleet.yaml"]
        cfg = yaml.safe_load(text)
        # The rendered Secret of the same release, if there is one; else stand-ins.
        userlist = '"app" "password"\n'
        token = "token"
        for sname, s in secrets.items():
            data = s.get("data") or {}
            if "userlist.txt" in data:
                userlist = base64.b64decode(data["userlist.txt"]).decode()
            if "peering-token" in data:
                token = base64.b64decode(data["peering-token"]).decode()
        with open(os.path.join(target, "userlist.txt"), "w", encoding="utf-8") as f:
            f.write(userlist)
        with open(os.path.join(target, "peering-token"), "w", encoding="utf-8") as f:
            f.write(token)
        text = text.replace("/etc/pgfleet/", target + "/")
        if "pgbouncer.ini" in d["data"]:
            # pgbouncerIni.content: the ini that pgfleet.yaml names (pgbouncer_ini), beside it.
            with open(os.path.join(target, "pgbouncer.ini"), "w", encoding="utf-8") as f:
                f.write(d["data"]["pgbouncer.ini"])
        elif cfg and isinstance(cfg, dict) and "pgbouncer_ini" in cfg:
            fail(f"{name}: pgfleet.yaml names pgbouncer_ini but the ConfigMap has no pgbouncer.ini")
        path = os.path.join(target, "pgfleet.yaml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        if not isinstance(cfg, dict):
            fail(f"{name}: pgfleet.yaml is not a mapping")
            continue
        print(path)
    if not found:
        fail(f"{rendered}: no ConfigMap with pgfleet.yaml")


def pod_specs(docs):
    """(kind/name, pod metadata, pod spec) of every workload in the rendering."""
    out = []
    for d in docs:
        kind, name = d["kind"], d["metadata"]["name"]
        if kind in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            t = d["spec"]["template"]
            out.append((f"{kind}/{name}", t.get("metadata", {}), t["spec"], d))
        elif kind == "Pod":
            out.append((f"{kind}/{name}", d["metadata"], d["spec"], d))
    return out


def pgfleet_containers(spec):
    """(container, is_native_sidecar) for every container that runs `pgfleet --config`."""
    out = []
    for c in spec.get("initContainers", []):
        if "pgfleet" in c.get("image", "") and "--config" in c.get("args", []) \
                and not c.get("command"):
            out.append((c, True))
    for c in spec.get("containers", []):
        if "pgfleet" in c.get("image", "") and "--config" in c.get("args", []) \
                and not c.get("command"):
            out.append((c, False))
    return out


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in (selector or {}).items())


def cmd_manifests(mode, rendered):
    docs = load_docs(rendered)
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    configmaps = {d["metadata"]["name"]: d for d in by_kind.get("ConfigMap", [])}
    configs = [yaml.safe_load(d["data"]["pgfleet.yaml"]) for d in configmaps.values()
               if "pgfleet.yaml" in (d.get("data") or {})]
    if len(configs) != 1:
        fail(f"expected one pgfleet.yaml ConfigMap, found {len(configs)}")
        return
    cfg = configs[0]
    listen_port = cfg["listen"]["port"]
    metrics_host, metrics_port = cfg["metrics"]["listen"].rsplit(":", 1)
    if metrics_host != "0.0.0.0":
        fail(f"metrics.listen is {cfg['metrics']['listen']}: probes need 0.0.0.0 in a pod")
    want_addr = "127.0.0.1" if mode == "sidecar" else "0.0.0.0"
    if cfg["listen"]["address"] != want_addr:
        fail(f"listen.address is {cfg['listen']['address']}, expected {want_addr} for {mode}")

    fleet_pods = []  # (where, labels, spec)
    for where, meta, spec, doc in pod_specs(docs):
        containers = pgfleet_containers(spec)
        labels = meta.get("labels", {})
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for c, sidecar in containers:
            fleet_pods.append((where, labels, spec))
            cname = f"{where} container {c['name']}"
            ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
            if ports.get("pgfleet-pg") != listen_port:
                fail(f"{cname}: port pgfleet-pg is not listen.port {listen_port}")
            if str(ports.get("pgfleet-metrics")) != metrics_port:
                fail(f"{cname}: port pgfleet-metrics is not the metrics port {metrics_port}")
            for probe, path in (("startupProbe", None), ("readinessProbe", "/readyz"),
                                ("livenessProbe", "/healthz")):
                p = c.get(probe)
                if p is None:
                    if probe != "livenessProbe":
                        fail(f"{cname}: no {probe}")
                    continue
                get = p.get("httpGet", {})
                if get.get("port") != "pgfleet-metrics":
                    fail(f"{cname}: {probe} is not on port pgfleet-metrics")
                if path and get.get("path") != path:
                    fail(f"{cname}: {probe} path {get.get('path')} is not {path}")
            sc = c.get("securityContext", {})
            for key, want in (("readOnlyRootFilesystem", True), ("allowPrivilegeEscalation", False),
                              ("runAsNonRoot", True)):
                if sc.get(key) is not want:
                    fail(f"{cname}: securityContext.{key} is not {want}")
            if "ALL" not in sc.get("capabilities", {}).get("drop", []):
                fail(f"{cname}: capabilities are not all dropped")
            image = c["image"]
            if image.endswith(":latest") or ("@" not in image and ":" not in image.split("/")[-1]):
                fail(f"{cname}: image {image} is not pinned by tag or digest")
            for m in c.get("volumeMounts", []):
                if m["name"] not in volumes:
                    fail(f"{cname}: volumeMount {m['name']} has no volume")
            if not any(m["mountPath"] == "/etc/pgfleet" for m in c.get("volumeMounts", [])):
                fail(f"{cname}: nothing mounted at /etc/pgfleet")
            if c.get("args") != ["--config", "/etc/pgfleet/pgfleet.yaml"]:
                fail(f"{cname}: args are {c.get('args')}")
            if sidecar:
                if c.get("restartPolicy") != "Always":
                    fail(f"{cname}: a sidecar initContainer needs restartPolicy: Always")
                if not c.get("startupProbe"):
                    fail(f"{cname}: a sidecar needs a startupProbe so the app waits for it")
                if c.get("lifecycle", {}).get("preStop"):
                    fail(f"{cname}: a native sidecar is stopped after the app; no preStop")
                for app in spec.get("containers", []):
                    env = {e["name"]: e.get("value") for e in app.get("env", [])}
                    if env.get("PGHOST") not in (None, "127.0.0.1", "localhost"):
                        fail(f"{where}: app container {app['name']} PGHOST is {env['PGHOST']}")
            else:
                if mode == "sidecar":
                    fail(f"{cname}: sidecar mode renders a pooler container outside a sidecar")
                pre = c.get("lifecycle", {}).get("preStop")
                if not pre:
                    fail(f"{cname}: no preStop hook")
                else:
                    secs = pre.get("sleep", {}).get("seconds")
                    if secs is None:
                        cmd = pre.get("exec", {}).get("command", [])
                        secs = int(cmd[-1]) if cmd and cmd[0] == "sleep" else 0
                    grace = spec.get("terminationGracePeriodSeconds", 30)
                    if grace <= secs:
                        fail(f"{where}: terminationGracePeriodSeconds {grace} does not exceed "
                             f"the preStop sleep {secs}")
        # Projected sources must name ConfigMaps of this rendering (Secrets may be external).
        for v in volumes.values():
            for src in v.get("projected", {}).get("sources", []):
                cm = src.get("configMap")
                if cm and cm["name"] not in configmaps and containers:
                    fail(f"{where}: volume {v['name']} names a ConfigMap {cm['name']} not rendered")
        if doc["kind"] == "Deployment" and containers and not containers[0][1]:
            strat = doc["spec"].get("strategy", {})
            if strat.get("type", "RollingUpdate") != "RollingUpdate" or \
                    strat.get("rollingUpdate", {}).get("maxUnavailable") != 0:
                fail(f"{where}: pooler rollout must be RollingUpdate with maxUnavailable 0")
            if not spec.get("affinity") and not spec.get("topologySpreadConstraints"):
                fail(f"{where}: no anti-affinity or topology spread")
        if doc["kind"] == "Deployment" and any(
                c.get("command") == ["pgfleet-controller"] for c in spec.get("containers", [])):
            if doc["spec"].get("replicas") != 1 or doc["spec"].get("strategy", {}).get("type") != "Recreate":
                fail(f"{where}: the controller must be 1 replica with strategy Recreate")

    if not fleet_pods:
        fail("no pod runs pgfleet")
    services = by_kind.get("Service", [])
    headless = [s for s in services if s["spec"].get("clusterIP") == "None"]
    if len(headless) != 1:
        fail(f"expected one headless peering Service, found {len(headless)}")
    for s in headless:
        if not s["spec"].get("publishNotReadyAddresses"):
            fail(f"Service/{s['metadata']['name']}: publishNotReadyAddresses is not true")
        sel = s["spec"].get("selector")
        if not any(matches(sel, labels) for _, labels, _ in fleet_pods):
            fail(f"Service/{s['metadata']['name']}: selector {sel} matches no pgfleet pod")
    pooler_deployments = [w for w, _, spec in fleet_pods if w.startswith("Deployment/")
                          and any(not sc for _, sc in pgfleet_containers(spec))]
    if mode == "standalone":
        if not pooler_deployments:
            fail("standalone: no pooler Deployment")
        client = [s for s in services if s["spec"].get("clusterIP") != "None"
                  and any(p.get("targetPort") == "pgfleet-pg" for p in s["spec"]["ports"])]
        if len(client) != 1:
            fail(f"standalone: expected one client Service, found {len(client)}")
        for s in client:
            if not any(matches(s["spec"]["selector"], labels) for _, labels, _ in fleet_pods):
                fail(f"Service/{s['metadata']['name']}: selector matches no pooler pod")
        pdbs = by_kind.get("PodDisruptionBudget", [])
        if len(pdbs) != 1:
            fail(f"standalone: expected one PodDisruptionBudget, found {len(pdbs)}")
        for p in pdbs:
            if not any(matches(p["spec"]["selector"]["matchLabels"], labels)
                       for _, labels, _ in fleet_pods):
                fail(f"PodDisruptionBudget/{p['metadata']['name']}: selector matches no pod")
    else:
        if pooler_deployments:
            fail(f"sidecar: pooler Deployment(s) rendered: {pooler_deployments}")
    for pm in by_kind.get("PodMonitor", []):
        sel = pm["spec"]["selector"]["matchLabels"]
        if not any(matches(sel, labels) for _, labels, _ in fleet_pods):
            fail(f"PodMonitor/{pm['metadata']['name']}: selector matches no pgfleet pod")
        for ep in pm["spec"]["podMetricsEndpoints"]:
            if ep.get("port") != "pgfleet-metrics":
                fail(f"PodMonitor/{pm['metadata']['name']}: port {ep.get('port')}")
    for sm in by_kind.get("ServiceMonitor", []):
        sel = sm["spec"]["selector"]["matchLabels"]
        targets = [s for s in services if matches(sel, s["metadata"].get("labels", {}))]
        if not targets:
            fail(f"ServiceMonitor/{sm['metadata']['name']}: selector matches no Service")
        for s in targets:
            if not any(p.get("name") == "pgfleet-metrics" for p in s["spec"]["ports"]):
                fail(f"Service/{s['metadata']['name']}: no pgfleet-metrics port to scrape")
    for cm in configmaps.values():
        if "pgfleet.json" in (cm.get("data") or {}):
            json.loads(cm["data"]["pgfleet.json"])
            if cm["metadata"].get("labels", {}).get("grafana_dashboard") != "1":
                fail(f"ConfigMap/{cm['metadata']['name']}: no grafana_dashboard label")
    for d in docs:
        labels = d["metadata"].get("labels", {})
        if d["kind"] in ("Deployment", "Service", "ConfigMap") and \
                "app.kubernetes.io/name" not in labels:
            fail(f"{d['kind']}/{d['metadata']['name']}: no app.kubernetes.io/name label")
    print(f"{rendered}: {len(docs)} objects, {len(fleet_pods)} pgfleet container(s) checked")


def cmd_differs(a, b, key):
    def annotation(path):
        for where, meta, spec, doc in pod_specs(load_docs(path)):
            if pgfleet_containers(spec) and "test" not in where:
                return meta.get("annotations", {}).get(key)
        return None
    va, vb = annotation(a), annotation(b)
    if va is None or vb is None:
        fail(f"annotation {key} missing ({va!r}, {vb!r})")
    elif va == vb:
        fail(f"annotation {key} did not change: {va}")
    else:
        print(f"{key} changed")


def cmd_token(rendered):
    import hashlib
    docs = load_docs(rendered)
    secret = [d for d in docs if d["kind"] == "Secret" and "peering-token" in d.get("data", {})]
    pods = [meta for where, meta, spec, doc in pod_specs(docs)
            if doc["kind"] == "Deployment" and pgfleet_containers(spec)]
    if len(secret) != 1 or len(pods) != 1:
        fail(f"expected one Secret with a peering token and one pooler Deployment, "
             f"found {len(secret)} and {len(pods)}")
        return
    data = secret[0]["data"]
    userlist = base64.b64decode(data["userlist.txt"]).decode()
    token = base64.b64decode(data["peering-token"]).decode()
    if len(token) < 32:
        fail(f"generated peering token is only {len(token)} characters")
    want = hashlib.sha256(f"{userlist}\n{token}".encode()).hexdigest()
    got = pods[0].get("annotations", {}).get("checksum/secret")
    if got != want:
        fail(f"checksum/secret {got} is not the checksum of the rendered Secret ({want})")
    else:
        print(f"generated token of {len(token)} characters; checksum/secret matches it")


def cmd_values_doc(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    documented = set(re.findall(r"^\s*#\s*([A-Za-z0-9_.\-]+) -- ", text, re.M))
    values = yaml.safe_load(text)
    count = 0

    def walk(node, prefix):
        nonlocal count
        for key, value in node.items():
            path = f"{prefix}{key}"
            count += 1
            if path in documented:
                continue
            if isinstance(value, dict) and value:
                walk(value, path + ".")
            else:
                fail(f"{path} has no '# {path} -- ...' comment")
    walk(values, "")
    stale = [d for d in documented if not _has_path(values, d)]
    for d in sorted(stale):
        fail(f"comment documents {d}, which is not a key of values.yaml")
    print(f"{count} keys looked at, all documented")


def _has_path(values, dotted):
    node = values
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cmd, args = sys.argv[1], sys.argv[2:]
    {"extract-config": cmd_extract_config, "manifests": cmd_manifests,
     "dashboard": cmd_dashboard, "alerts": cmd_alerts, "differs": cmd_differs,
     "values-doc": cmd_values_doc, "token": cmd_token}[cmd](*args)
    for p in problems:
        print("PROBLEM:", p, file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
