#!/usr/bin/env python3
"""Evaluates every PromQL expression of the Grafana dashboard and of the alert rules through a
running Prometheus's HTTP API, and fails when one does not parse or returns no series.

Used by tests/integration/metrics_test.cc (PrometheusEvaluatesEveryDashboardAndAlertQuery), which
starts Prometheus scraping a pgfleet under pgbench load. Grafana variables are replaced by the
values given with --var (the scrape config adds namespace and pod as target labels, as
Kubernetes service discovery would). Alert expressions are evaluated with every comparison turned
into a `bool` comparison, so a rule that is not firing still has to return its series: that proves
every metric and label it names exists, which is what a healthy pooler cannot show otherwise.

  promql_check.py --prometheus http://127.0.0.1:9090 --dashboard pgfleet.json \
      --alerts alerts.yaml --var namespace=test --var pod=pgfleet-0 --var database=postgres \
      --rate-interval 10s
Exit status 0 when every expression returned at least one series.
"""
import argparse
import json
import re
import sys
import urllib.parse
import urllib.request

import yaml


def dashboard_exprs(path):
    """(where, expr) for every panel target and every query variable of the dashboard."""
    with open(path, encoding="utf-8") as f:
        dash = json.load(f)
    out = []

    def walk(panels):
        for p in panels:
            walk(p.get("panels", []))
            for t in p.get("targets", []):
                if t.get("expr"):
                    out.append((f"panel {p.get('title')!r} {t.get('refId', '')}", t["expr"]))

    walk(dash.get("panels", []))
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        if q:
            out.append((f"variable {v['name']}", q))
    return out


def alert_exprs(path):
    with open(path, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    out = []
    for group in doc.get("groups", []):
        for rule in group.get("rules", []):
            name = rule.get("alert") or rule.get("record")
            out.append((f"rule {name}", str(rule["expr"])))
    return out


def label_values_to_promql(expr):
    """Grafana's label_values(metric, label) -> a PromQL query with the same series."""
    m = re.fullmatch(r"\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*", expr, re.S)
    if m:
        return f"count by ({m.group(2)}) ({m.group(1)})"
    return expr


def substitute(expr, variables, rate_interval):
    expr = re.sub(r"\$\{?__rate_interval\}?", rate_interval, expr)
    expr = re.sub(r"\$\{?__interval\}?", rate_interval, expr)
    expr = re.sub(r"\$\{?__range\}?", "1h", expr)
    for name, value in variables.items():
        expr = re.sub(r"\$\{" + name + r"(:[a-z]+)?\}|\$" + name + r"\b", value, expr)
    return expr


def comparisons_to_bool(expr):
    """Adds `bool` to every comparison outside label matchers and strings."""
    out = []
    i = 0
    depth = 0  # inside {...}
    quote = None
    while i < len(expr):
        c = expr[i]
        if quote:
            out.append(c)
            if c == "\\" and i + 1 < len(expr):
                out.append(expr[i + 1])
                i += 2
                continue
            if c == quote:
                quote = None
            i += 1
            continue
        if c in "\"'`":
            quote = c
            out.append(c)
            i += 1
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        if depth == 0:
            m = re.match(r"(==|!=|>=|<=|>|<)", expr[i:])
            if m:
                op = m.group(1)
                rest = expr[i + len(op):]
                out.append(op)
                i += len(op)
                if not re.match(r"\s*bool\b", rest):
                    out.append(" bool")
                continue
        out.append(c)
        i += 1
    return "".join(out)


def query(base, expr):
    url = base.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            body = json.load(r)
    except urllib.error.HTTPError as e:  # 400 = parse error, with a JSON body
        body = json.load(e)
    return body


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prometheus", required=True)
    ap.add_argument("--dashboard", required=True)
    ap.add_argument("--alerts", required=True)
    ap.add_argument("--var", action="append", default=[], help="NAME=VALUE")
    ap.add_argument("--rate-interval", default="10s")
    args = ap.parse_args()
    variables = dict(v.split("=", 1) for v in args.var)

    checks = [(w, label_values_to_promql(substitute(e, variables, args.rate_interval)))
              for w, e in dashboard_exprs(args.dashboard)]
    checks += [(w, comparisons_to_bool(substitute(e, variables, args.rate_interval)))
               for w, e in alert_exprs(args.alerts)]
    failed = 0
    for where, expr in checks:
        body = query(args.prometheus, expr)
        if body.get("status") != "success":
            failed += 1
            print(f"FAIL  {where}: {body.get('errorType')}: {body.get('error')}\n      {expr}")
            continue
        result = body["data"]["result"]
        if body["data"].get("resultType") in ("vector", "matrix") and not result:
            failed += 1
            print(f"FAIL  {where}: no series\n      {expr}")
            continue
        print(f"ok    {where}: {len(result) if isinstance(result, list) else 1} series")
    print(f"{len(checks) - failed} of {len(checks)} expressions returned series")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
