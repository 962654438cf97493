#!/usr/bin/env python3
"""Writes deploy/grafana/pgfleet.json (and the Helm chart's copy) from the panel list below.

Edit the panels here, then run `python3 deploy/grafana/generate_dashboard.py`; tests/helm/run.sh
fails when either JSON file differs from what this prints, or when a panel queries a metric that
pgfleet does not export.
"""
import json
import os
import sys

# Every panel narrows to the chosen namespace(s) and pod(s); per-database panels also to the
# chosen database(s). The labels `namespace` and `pod` come from Kubernetes service discovery
# (PodMonitor / ServiceMonitor), the others from pgfleet itself.
POD = 'namespace=~"$namespace", pod=~"$pod"'
DB = POD + ', database=~"$database"'
RATE = "$__rate_interval"
DS = {"type": "prometheus", "uid": "${datasource}"}

SERVER_STATES = ["active", "idle", "used", "testing", "login"]


def server_total(by):
    return " + ".join(
        f"sum by ({by}) (pgfleet_pools_server_{s}_connections{{{DB}}})" for s in SERVER_STATES)


def target(expr, legend, ref):
    return {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": ref,
            "range": True, "instant": False}


def quantiles(metric, by="database"):
    out = []
    for i, (q, name) in enumerate((("0.5", "p50"), ("0.95", "p95"), ("0.99", "p99"))):
        out.append(target(
            f"histogram_quantile({q}, sum by ({by}, le) (rate({metric}_bucket{{{DB}}}[{RATE}])))",
            f"{name} {{{{{by}}}}}", "ABC"[i]))
    return out


class Layout:
    def __init__(self):
        self.panels, self.y, self.x, self.row_h, self.next_id = [], 0, 0, 0, 1

    def row(self, title):
        self.newline()
        self.panels.append({"type": "row", "title": title, "collapsed": False, "panels": [],
                            "id": self.next_id, "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}})
        self.next_id += 1
        self.y += 1

    def newline(self):
        if self.x:
            self.y += self.row_h
            self.x, self.row_h = 0, 0

    def add(self, kind, title, description, targets, w, h, unit="short", extra=None):
        if self.x + w > 24:
            self.newline()
        panel = {
            "type": kind, "title": title, "description": description, "datasource": DS,
            "id": self.next_id, "gridPos": {"h": h, "w": w, "x": self.x, "y": self.y},
            "targets": targets,
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {},
        }
        if kind == "timeseries":
            panel["fieldConfig"]["defaults"]["custom"] = {
                "drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never",
                "spanNulls": False}
            panel["options"] = {"legend": {"displayMode": "table", "placement": "bottom",
                                           "calcs": ["mean", "max", "lastNotNull"]},
                                "tooltip": {"mode": "multi", "sort": "desc"}}
        elif kind == "stat":
            panel["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "",
                                                  "values": False},
                                "colorMode": "value", "graphMode": "area", "textMode": "auto"}
        if extra:
            for key, value in extra.items():
                panel[key] = value
        self.panels.append(panel)
        self.next_id += 1
        self.x += w
        self.row_h = max(self.row_h, h)


def build():
    L = Layout()
    L.row("Overview")
    L.add("stat", "Pods serving", "Pods whose pgfleet reports pgfleet_up = 1.",
          [target(f"sum(pgfleet_up{{{POD}}})", "pods", "A")], 4, 4)
    L.add("stat", "Workers", "Worker processes across the selected pods.",
          [target(f"sum(pgfleet_workers{{{POD}}})", "workers", "A")], 4, 4)
    L.add("stat", "Client connections", "Active, idle and waiting clients, all pools.",
          [target(" + ".join(f"sum(pgfleet_pools_client_{s}_connections{{{POD}}})"
                             for s in ("active", "idle", "waiting")), "clients", "A")], 4, 4)
    L.add("stat", "Waiting clients", "Clients queued for a server connection right now.",
          [target(f"sum(pgfleet_pools_client_waiting_connections{{{POD}}})", "waiting", "A")],
          4, 4, extra={"fieldConfig": {"defaults": {"unit": "short", "thresholds": {
              "mode": "absolute", "steps": [{"color": "green", "value": None},
                                            {"color": "orange", "value": 1},
                                            {"color": "red", "value": 20}]}}, "overrides": []}})
    L.add("stat", "max_client_conn", "The fleet-wide client connection limit.",
          [target(f"max(pgfleet_max_client_conn{{{POD}}})", "max_client_conn", "A")], 4, 4)
    L.add("stat", "Version", "pgfleet versions running, with their pod counts.",
          [target(f"count by (version) (pgfleet_build_info{{{POD}}})", "{{version}}", "A")],
          4, 4, extra={"options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "",
                                                      "values": False},
                                    "colorMode": "none", "graphMode": "none",
                                    "textMode": "value_and_name"}})

    L.row("Throughput")
    L.add("timeseries", "Transactions per second", "Completed transactions, by database.",
          [target(f"sum by (database) (rate(pgfleet_stats_transactions_total{{{DB}}}[{RATE}]))",
                  "{{database}}", "A")], 8, 8, "ops")
    L.add("timeseries", "Queries per second", "Completed queries, by database.",
          [target(f"sum by (database) (rate(pgfleet_stats_queries_total{{{DB}}}[{RATE}]))",
                  "{{database}}", "A")], 8, 8, "ops")
    L.add("timeseries", "Network traffic", "Bytes received from clients and sent to them.",
          [target(f"sum by (database) (rate(pgfleet_stats_received_bytes_total{{{DB}}}[{RATE}]))",
                  "received {{database}}", "A"),
           target(f"sum by (database) (rate(pgfleet_stats_sent_bytes_total{{{DB}}}[{RATE}]))",
                  "sent {{database}}", "B")], 8, 8, "Bps")

    L.row("Latency")
    L.add("timeseries", "Query duration", "Quantiles of query time, from the histogram.",
          quantiles("pgfleet_stats_query_duration_seconds"), 8, 8, "s")
    L.add("timeseries", "Transaction duration",
          "Quantiles of transaction time (first statement to commit or rollback).",
          quantiles("pgfleet_stats_transaction_duration_seconds"), 8, 8, "s")
    L.add("timeseries", "Client wait for a server",
          "Quantiles of the time clients waited for a server connection.",
          quantiles("pgfleet_stats_wait_duration_seconds"), 8, 8, "s")
    L.add("timeseries", "Average query duration", "Total query time over query count.",
          [target(f"sum by (database) (rate(pgfleet_stats_query_duration_seconds_sum{{{DB}}}[{RATE}]))"
                  f" / sum by (database) (rate(pgfleet_stats_query_duration_seconds_count{{{DB}}}[{RATE}]))",
                  "{{database}}", "A")], 12, 8, "s")
    L.add("timeseries", "Longest client wait", "The oldest waiting client's wait, per pool.",
          [target(f"max by (database, user) (pgfleet_pools_client_maxwait_seconds{{{DB}}})",
                  "{{database}}/{{user}}", "A")], 12, 8, "s")

    L.row("Connections and budget")
    L.add("timeseries", "Server connections vs budget",
          "Server connections open to each database across the selected pods, against its "
          "fleet-wide max_db_connections. At the line, clients queue.",
          [target(server_total("database"), "open {{database}}", "A"),
           target(f"max by (database) (pgfleet_budget_max_db_connections{{{DB}}})",
                  "budget {{database}}", "B")], 12, 8, "short",
          extra={"fieldConfig": {"defaults": {"unit": "short", "custom": {
              "drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never",
              "spanNulls": False}}, "overrides": [
              {"matcher": {"id": "byRegexp", "options": "budget .*"},
               "properties": [{"id": "custom.lineStyle",
                               "value": {"fill": "dash", "dash": [10, 10]}},
                              {"id": "custom.fillOpacity", "value": 0},
                              {"id": "color", "value": {"mode": "fixed",
                                                        "fixedColor": "red"}}]}]}})
    L.add("timeseries", "Budget share per pod",
          "Each pod's share of a database's budget (the sum over its workers), as the "
          "controller assigns it.",
          [target(f"sum by (pod, database) (pgfleet_budget_share{{{DB}}})",
                  "{{pod}} {{database}}", "A")], 12, 8)
    L.add("timeseries", "Client connections", "Clients by state, all pools.",
          [target(f"sum(pgfleet_pools_client_{s}_connections{{{DB}}})", s, "ABC"[i])
           for i, s in enumerate(("active", "idle", "waiting"))]
          + [target(f"max(pgfleet_max_client_conn{{{POD}}})", "max_client_conn", "D")],
          8, 8)
    L.add("timeseries", "Waiting clients", "Clients queued for a server, per pool.",
          [target(f"sum by (database, user) (pgfleet_pools_client_waiting_connections{{{DB}}})",
                  "{{database}}/{{user}}", "A")], 8, 8)
    L.add("timeseries", "Server connections by state", "Server connections by state.",
          [target(f"sum(pgfleet_pools_server_{s}_connections{{{DB}}})", s, "ABCDE"[i])
           for i, s in enumerate(SERVER_STATES)], 8, 8)
    L.add("timeseries", "New client connections", "Client connections accepted per second.",
          [target(f"sum by (pod) (rate(pgfleet_client_connections_total{{{POD}}}[{RATE}]))",
                  "{{pod}}", "A")], 12, 8, "ops")
    L.add("timeseries", "Server connections per pod", "Server connections each pod holds.",
          [target(" + ".join(f"sum by (pod) (pgfleet_pools_server_{s}_connections{{{DB}}})"
                             for s in SERVER_STATES), "{{pod}}", "A")], 12, 8)

    L.row("Cancels, restarts and errors")
    L.add("timeseries", "Cancel requests",
          "Cancels received, forwarded to the worker or pod that owns the session, and dropped "
          "(unknown or stale keys); queries cancelled while still queued (answered by pgfleet); "
          "cancels sent for abandoned queries (their client left mid-query), and the further "
          "cancels for abandoned work that still ran (repeated).",
          [target(f"sum(rate(pgfleet_cancel_{s}_total{{{POD}}}[{RATE}]))", s, "ABCDEF"[i])
           for i, s in enumerate(("received", "forwarded", "dropped", "queued", "abandoned",
                                  "repeated"))], 8, 8, "ops")
    L.add("timeseries", "Worker restarts", "Workers the supervisor restarted, per pod.",
          [target(f"sum by (pod) (increase(pgfleet_worker_restarts_total{{{POD}}}[{RATE}]))",
                  "{{pod}}", "A")], 8, 8)
    L.add("timeseries", "Errors by SQLSTATE class", "Errors sent to clients, by class.",
          [target(f"sum by (class) (rate(pgfleet_errors_total{{{POD}}}[{RATE}]))",
                  "{{class}}", "A")], 8, 8, "ops")
    L.add("timeseries", "Refused clients",
          "Clients refused before login, by reason: max_client_conn, max_concurrent_logins, hba, "
          "tls_required, tls_handshake, login_failed, protocol_error; and cancel requests "
          "ignored by pool.cancel_rate_limit.",
          [target(f"sum by (reason) (rate(pgfleet_clients_rejected_total{{{POD}}}[{RATE}]))",
                  "{{reason}}", "A"),
           target(f"sum(rate(pgfleet_cancel_rate_limited_total{{{POD}}}[{RATE}]))",
                  "cancel rate limited", "B")], 12, 8, "ops")
    L.add("timeseries", "Prepared statements",
          "Protocol-level prepared statement cache: prepared, hits, re-prepares, evictions.",
          [target(f"sum by (event) (rate(pgfleet_prepared_statements_total{{{POD}}}[{RATE}]))",
                  "{{event}}", "A")], 12, 8, "ops")
    return L.panels


def variable(name, label, query, multi=True):
    return {
        "name": name, "label": label, "type": "query", "datasource": DS,
        "query": {"query": query, "refId": name}, "definition": query,
        "refresh": 2, "sort": 1, "multi": multi, "includeAll": multi,
        "allValue": ".*" if multi else None, "current": {}, "hide": 0, "regex": "", "options": [],
    }


def dashboard():
    return {
        "__inputs": [],
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts", "type": "dashboard"}]},
        "description": "pgfleet: throughput, latency, connections against the fleet-wide budget, "
                       "cancels, worker restarts and errors.",
        "editable": True,
        "graphTooltip": 1,
        "links": [],
        "panels": build(),
        "refresh": "30s",
        "schemaVersion": 39,
        "tags": ["pgfleet", "postgresql", "pooler"],
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource",
             "query": "prometheus", "current": {}, "hide": 0, "refresh": 1, "regex": "",
             "options": []},
            variable("namespace", "Namespace", "label_values(pgfleet_up, namespace)"),
            variable("pod", "Pod", 'label_values(pgfleet_up{namespace=~"$namespace"}, pod)'),
            variable("database", "Database",
                     'label_values(pgfleet_stats_queries_total{namespace=~"$namespace", '
                     'pod=~"$pod"}, database)'),
        ]},
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "title": "pgfleet",
        "uid": "pgfleet-overview",
        "version": 1,
    }


def render():
    return json.dumps(dashboard(), indent=2, sort_keys=False) + "\n"


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    text = render()
    if "--check" in sys.argv:
        bad = [p for p in ("deploy/grafana/pgfleet.json", "helm/pgfleet/dashboards/pgfleet.json")
               if open(os.path.join(root, p), encoding="utf-8").read() != text]
        if bad:
            sys.exit("stale, rerun deploy/grafana/generate_dashboard.py: " + ", ".join(bad))
        return
    for p in ("deploy/grafana/pgfleet.json", "helm/pgfleet/dashboards/pgfleet.json"):
        with open(os.path.join(root, p), "w", encoding="utf-8") as f:
            f.write(text)
        print("wrote", p)


if __name__ == "__main__":
    main()
