#!/usr/bin/env python3
"""Hand-off latency of one pool per pod, measured from outside, for bench/pod_pool_compare.sh.

Runs against a pgfleet with `workers: 2` and `default_pool_size: 1`, so the pod has exactly one
server connection. Client A and clients on both workers log in; the admin console's SHOW CLIENTS
(its `worker` column, matched by the client's source port) tells which worker each client is on.
Clients never move between workers, only servers do, so this is done once.

Phases (each sample is one `SELECT 1` round trip of a client B, in microseconds, taken with
time.perf_counter_ns around sending the Query and reading ReadyForQuery):

  request   A runs SELECT 1, so the pod's only server is idle on A's worker. Then B runs SELECT 1:
            `handoff` samples use a B on the other worker (its worker asks the sibling, which
            sends the server over SCM_RIGHTS); `local` samples use a B on A's worker (the idle
            server is right there): the baseline. The two kinds alternate. Before each query that
            makes a worker ask its sibling the script sleeps --gap-ms (a worker asks at most once
            per 20 ms, pool_handoff.cc kAskAgainAfter; the gap keeps every sample a first ask).
  burst     like request/handoff but with no gap: the server ping-pongs between the workers as
            fast as the clients go, each worker asking its sibling again well within 20 ms of its
            last ask; a stall would show in p99 and max.
  release   the pod is full: A holds the server in a transaction (BEGIN; SELECT 1), B sends
            SELECT 1 and queues; after --gap-ms, A sends COMMIT. The sample is the time from A's
            ReadyForQuery for the COMMIT (the server was released just before) to B's
            ReadyForQuery. `handoff`: B on the other worker (the released server is given to the
            sibling whose client waits); `local`: B on A's worker.

With --metrics HOST:PORT the sum of pgfleet_server_handoffs_total is read before and after each
phase (after 1.2 s, as workers publish every 500 ms) and printed next to the number of hand-offs
the phase implies: a cross-check that `handoff` samples moved a server and `local` ones did not.
With server TLS a server is closed and the sibling opens its own (no hand-off is counted, so
`counted` stays 0 while `expected` says how many moves the phase asked for). The same reads give
pgfleet's own measure of issue 13's goal, the time from a queued client's query to its send: the
phase's server assignments (every query that got a server, waiting or not) and how many of them
waited over 1 ms (pgfleet_stats_wait_duration_seconds, bucket le=0.001), printed as
`WAITS phase waits=N over_1ms=M queued_on_purpose=K`: in the release phase K of the queries wait
--gap-ms behind A's transaction by design (over 1 ms when --gap-ms is at least 1, the default 25),
so only what is over 1 ms beyond those K counts.

Output: one line per phase and kind, `RESULT phase kind n p50_us p99_us max_us mean_us`, and
lines `HANDOFFS phase counted=N expected=M` and `WAITS ...` per phase (with --metrics). Raw protocol over TCP, no driver. Loopback
only. Every wait is bounded (--timeout per query).
"""

import argparse
import ipaddress
import select
import socket
import struct
import sys
import time
import urllib.request


class ProtocolError(Exception):
    pass


def error_text(body):
    fields = {}
    for part in body.split(b"\0"):
        if part:
            fields[chr(part[0])] = part[1:].decode(errors="replace")
    return f"{fields.get('S', 'ERROR')} {fields.get('C', '')}: {fields.get('M', '?')}"


class Conn:
    """One blocking PostgreSQL protocol 3.0 connection (trust auth, simple Query only)."""

    def __init__(self, host, port, user, dbname, appname, timeout):
        self.timeout = timeout
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.local_port = self.sock.getsockname()[1]
        self.buf = bytearray()
        body = struct.pack("!I", 196608)
        for key, value in (("user", user), ("database", dbname), ("application_name", appname)):
            body += key.encode() + b"\0" + value.encode() + b"\0"
        body += b"\0"
        self.sock.sendall(struct.pack("!I", len(body) + 4) + body)
        while True:
            kind, payload = self.read_message()
            if kind == b"R":
                if struct.unpack("!I", payload[:4])[0] != 0:
                    raise ProtocolError("server asks for a password; the bench uses trust auth")
            elif kind == b"E":
                raise ProtocolError(error_text(payload))
            elif kind == b"Z":
                return

    def read_message(self):
        deadline = time.monotonic() + self.timeout
        while True:
            if len(self.buf) >= 5:
                length = struct.unpack("!I", self.buf[1:5])[0]
                if len(self.buf) >= 1 + length:
                    kind = bytes(self.buf[0:1])
                    payload = bytes(self.buf[5 : 1 + length])
                    del self.buf[: 1 + length]
                    return kind, payload
            left = deadline - time.monotonic()
            if left <= 0:
                raise ProtocolError(f"no answer within {self.timeout}s")
            ready, _, _ = select.select([self.sock], [], [], left)
            if not ready:
                continue
            data = self.sock.recv(65536)
            if not data:
                raise ProtocolError("connection closed by the pooler")
            self.buf += data

    def send_query(self, sql):
        data = sql.encode() + b"\0"
        self.sock.sendall(b"Q" + struct.pack("!I", len(data) + 4) + data)

    def wait_result(self):
        """Reads until ReadyForQuery; returns (columns, rows). Raises on ErrorResponse."""
        columns, rows, error = [], [], None
        while True:
            kind, payload = self.read_message()
            if kind == b"T":
                count = struct.unpack("!H", payload[:2])[0]
                pos = 2
                for _ in range(count):
                    end = payload.index(b"\0", pos)
                    columns.append(payload[pos:end].decode())
                    pos = end + 1 + 18
            elif kind == b"D":
                count = struct.unpack("!H", payload[:2])[0]
                pos, row = 2, []
                for _ in range(count):
                    n = struct.unpack("!i", payload[pos : pos + 4])[0]
                    pos += 4
                    if n < 0:
                        row.append(None)
                    else:
                        row.append(payload[pos : pos + n].decode(errors="replace"))
                        pos += n
                rows.append(row)
            elif kind == b"E":
                error = error_text(payload)
            elif kind == b"Z":
                if error:
                    raise ProtocolError(error)
                return columns, rows

    def query(self, sql):
        self.send_query(sql)
        return self.wait_result()

    def timed_query(self, sql):
        t0 = time.perf_counter_ns()
        self.send_query(sql)
        self.wait_result()
        return (time.perf_counter_ns() - t0) / 1000.0

    def close(self):
        try:
            self.sock.sendall(b"X\0\0\0\4")
        except OSError:
            pass
        self.sock.close()


def pooler_counters(metrics):
    """Sums over every pool of pgfleet_server_handoffs_total and of the client wait histogram
    (pgfleet_stats_wait_duration_seconds: how long a client's query waited for a server, from
    its arrival to the server being linked, pgfleet's own clock)."""
    if not metrics:
        return None
    time.sleep(1.2)  # workers publish their counters every 500 ms
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=5) as r:
        body = r.read().decode()
    totals = {"handoffs": 0.0, "waits": 0.0, "waits_within_1ms": 0.0}
    for line in body.splitlines():
        value = line.rsplit(" ", 1)[-1]
        if line.startswith("pgfleet_server_handoffs_total"):
            totals["handoffs"] += float(value)
        elif line.startswith("pgfleet_stats_wait_duration_seconds_count"):
            totals["waits"] += float(value)
        elif (line.startswith("pgfleet_stats_wait_duration_seconds_bucket")
              and 'le="0.001"' in line):
            totals["waits_within_1ms"] += float(value)
    return {k: int(v) for k, v in totals.items()}


def percentile(sorted_values, q):
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, int(round(q * len(sorted_values) + 0.5)) - 1))
    return sorted_values[index]


def report(phase, kind, samples):
    s = sorted(samples)
    if not s:
        print(f"RESULT {phase} {kind} 0 n/a n/a n/a n/a", flush=True)
        return
    mean = sum(s) / len(s)
    print(f"RESULT {phase} {kind} {len(s)} {percentile(s, 0.5):.0f} {percentile(s, 0.99):.0f} "
          f"{s[-1]:.0f} {mean:.0f}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--user", required=True)
    p.add_argument("--dbname", required=True)
    p.add_argument("--admin-user", required=True)
    p.add_argument("--metrics", default="", help="HOST:PORT of /metrics (cross-check)")
    p.add_argument("--samples", type=int, default=300, help="samples per phase and kind")
    p.add_argument("--burst-samples", type=int, default=100)
    p.add_argument("--gap-ms", type=float, default=25.0)
    p.add_argument("--phases", default="request,burst,release")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per query at most")
    args = p.parse_args()
    if not ipaddress.ip_address(args.host).is_loopback:
        sys.exit("loopback only: --host must be a 127.0.0.0/8 address")
    gap = args.gap_ms / 1000.0

    admin = Conn(args.host, args.port, args.admin_user, "pgfleet", "handoff_admin", args.timeout)
    clients = []
    by_worker = {}

    def classify():
        columns, rows = admin.query("SHOW CLIENTS")
        port_col, worker_col = columns.index("port"), columns.index("worker")
        where = {int(r[port_col]): r[worker_col] for r in rows if r[port_col] not in (None, "")}
        by_worker.clear()
        for c in clients:
            w = where.get(c.local_port)
            if w is None:
                raise ProtocolError(f"client port {c.local_port} not in SHOW CLIENTS")
            c.worker = w
            by_worker.setdefault(w, []).append(c)

    # Open clients until A's worker has a second client and the other worker has one (the kernel
    # spreads connections over the workers' SO_REUSEPORT sockets), at most 64.
    while True:
        for _ in range(4):
            clients.append(Conn(args.host, args.port, args.user, args.dbname,
                                f"handoff_{len(clients)}", args.timeout))
        classify()
        a = clients[0]
        others = [w for w in by_worker if w != a.worker]
        if len(by_worker[a.worker]) >= 2 and others:
            break
        if len(clients) >= 64:
            sys.exit(f"64 clients all on worker(s) {sorted(by_worker)}: is workers: 2 set?")
    b_local = by_worker[a.worker][1]
    b_other = by_worker[others[0]][0]
    print(f"INFO clients={len(clients)} per_worker="
          + ",".join(f"{w}:{len(v)}" for w, v in sorted(by_worker.items()))
          + f" A_worker={a.worker} B_local_worker={b_local.worker} B_other_worker={b_other.worker}",
          flush=True)
    # Every client runs once, so the pool's server exists and every worker knows the pool.
    for c in (a, b_local, b_other, a):
        c.query("SELECT 1")

    for phase in args.phases.split(","):
        before = pooler_counters(args.metrics)
        samples = {"handoff": [], "local": []}
        expected = 0
        queued_on_purpose = 0  # queries that wait behind A's transaction by design (release)
        if phase == "request":
            for _ in range(args.samples):
                time.sleep(gap)
                a.query("SELECT 1")  # the server is back on A's worker (a hand-off after the
                expected += 1         # previous `handoff` sample)
                samples["local"].append(b_local.timed_query("SELECT 1"))
                time.sleep(gap)
                samples["handoff"].append(b_other.timed_query("SELECT 1"))
                expected += 1
        elif phase == "burst":
            for _ in range(args.burst_samples):
                a.query("SELECT 1")
                samples["handoff"].append(b_other.timed_query("SELECT 1"))
                expected += 2
        elif phase == "release":
            for i in range(args.samples):
                for kind, b in (("local", b_local), ("handoff", b_other)):
                    a.query("BEGIN")  # may take the server back from B's worker (a hand-off)
                    a.query("SELECT 1")
                    b.send_query("SELECT 1")  # queues: the pod's only server is A's
                    queued_on_purpose += 1
                    time.sleep(gap)
                    if b.buf or select.select([b.sock], [], [], 0)[0]:
                        raise ProtocolError("B was answered while A held the pod's only server")
                    a.query("COMMIT")
                    t0 = time.perf_counter_ns()
                    b.wait_result()
                    samples[kind].append((time.perf_counter_ns() - t0) / 1000.0)
                    if kind == "handoff":
                        expected += 2  # to B's worker, and back for the next BEGIN
        else:
            sys.exit(f"unknown phase {phase}")
        after = pooler_counters(args.metrics)
        for kind in ("handoff", "local"):
            if samples[kind]:
                report(phase, kind, samples[kind])
        if before is not None and after is not None:
            delta = {k: after[k] - before[k] for k in after}
            print(f"HANDOFFS {phase} counted={delta['handoffs']} expected={expected}", flush=True)
            print(f"WAITS {phase} waits={delta['waits']} "
                  f"over_1ms={delta['waits'] - delta['waits_within_1ms']} "
                  f"queued_on_purpose={queued_on_purpose}", flush=True)

    for c in clients:
        c.close()
    admin.close()


if __name__ == "__main__":
    try:
        main()
    except (ProtocolError, OSError) as e:
        sys.exit(f"handoff_latency: {e}")
