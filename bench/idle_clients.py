#!/usr/bin/env python3
"""Opens N PostgreSQL client connections that log in (startup, authentication, ReadyForQuery) and
then stay idle, for bench/idle_memory.sh.

Raw sockets, no driver: a startup packet, the answer to AuthenticationCleartextPassword or
AuthenticationMD5Password when the server asks (trust needs none), then reading until 'Z'. Each
connection binds to one of --sources loopback addresses (127.0.0.2, 127.0.0.3, ...) before it
connects, so the count is not limited by the ephemeral ports of one source address. The sockets
are split over processes of at most --per-process connections, each below the fd limit.

Protocol with the caller, on stdout (one line each, flushed):
  READY established=N failed=M seconds=S [error="first error"]   once every login finished
  CHECK alive=N dead=M                                            after each SIGUSR1
SIGUSR1 checks that every connection is still open and silent (a pooler that dropped or sent
anything to an idle client counts it dead); SIGTERM or SIGINT closes everything and exits; so
does --hold seconds after READY. Loopback only: --host must be a 127.0.0.0/8 address.
"""

import argparse
import asyncio
import hashlib
import ipaddress
import os
import select
import signal
import socket
import struct
import sys
import time


def startup_packet(user, dbname):
    body = struct.pack("!I", 196608)  # protocol 3.0
    for key, value in (("user", user), ("database", dbname), ("application_name", "idle_memory")):
        body += key.encode() + b"\0" + value.encode() + b"\0"
    body += b"\0"
    return struct.pack("!I", len(body) + 4) + body


def password_message(password):
    data = password.encode() + b"\0"
    return b"p" + struct.pack("!I", len(data) + 4) + data


def error_text(body):
    # ErrorResponse fields: a type byte, a C string; 'M' is the message.
    fields = {}
    for part in body.split(b"\0"):
        if part:
            fields[chr(part[0])] = part[1:].decode(errors="replace")
    return f"{fields.get('S', 'ERROR')} {fields.get('C', '')}: {fields.get('M', '?')}"


async def login(loop, args, index, sockets, errors):
    """Opens connection `index`; appends the socket to `sockets` once ReadyForQuery arrived."""
    source = f"127.0.0.{2 + index % args.sources}"
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        sock.bind((source, 0))
        await loop.sock_connect(sock, (args.host, args.port))
        await loop.sock_sendall(sock, startup_packet(args.user, args.dbname))
        buf = b""
        while True:
            # One message: type byte, int32 length (including itself), body.
            while len(buf) < 5 or len(buf) < 1 + struct.unpack("!I", buf[1:5])[0]:
                chunk = await loop.sock_recv(sock, 65536)
                if not chunk:
                    raise ConnectionError("server closed the connection during login")
                buf += chunk
            kind = buf[0:1]
            length = struct.unpack("!I", buf[1:5])[0]
            body = buf[5 : 1 + length]
            buf = buf[1 + length :]
            if kind == b"E":
                raise ConnectionError(error_text(body))
            if kind == b"R":
                code = struct.unpack("!I", body[:4])[0]
                if code == 3:  # cleartext
                    await loop.sock_sendall(sock, password_message(args.password))
                elif code == 5:  # md5: "md5" + md5(md5(password + user) + salt)
                    inner = hashlib.md5((args.password + args.user).encode()).hexdigest()
                    outer = hashlib.md5(inner.encode() + body[4:8]).hexdigest()
                    await loop.sock_sendall(sock, password_message("md5" + outer))
                elif code != 0:
                    raise ConnectionError(f"unsupported authentication request {code}")
            elif kind == b"Z":
                if buf:
                    raise ConnectionError("data after ReadyForQuery")
                sockets.append(sock)
                return
            # 'S' ParameterStatus, 'K' BackendKeyData, 'N' NoticeResponse: nothing to do.
    except (OSError, ConnectionError) as e:
        sock.close()
        if not errors:
            errors.append(f"connection {index} from {source}: {e}")
        else:
            errors.append(None)


async def open_all(args, first, count, sockets, errors):
    loop = asyncio.get_running_loop()
    limit = asyncio.Semaphore(args.concurrency)

    async def one(i):
        async with limit:
            try:
                await asyncio.wait_for(login(loop, args, i, sockets, errors), args.login_timeout)
            except asyncio.TimeoutError:
                errors.append(f"connection {i}: login timed out after {args.login_timeout}s")

    await asyncio.gather(*(one(i) for i in range(first, first + count)))


def check(sockets):
    """Counts sockets that are still open and have nothing to read (an idle client hears nothing)."""
    alive = dead = 0
    poller = select.poll()
    by_fd = {}
    for s in sockets:
        if s.fileno() >= 0:
            poller.register(s.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
            by_fd[s.fileno()] = s
    ready = {fd for fd, _ in poller.poll(0)}
    for fd in by_fd:
        if fd in ready:
            dead += 1
        else:
            alive += 1
    return alive, dead


def child(args, first, count, results_w, control_r):
    """One process: opens its share, reports, then answers 'check' until told to exit."""
    sockets, errors = [], []
    start = time.monotonic()
    try:
        asyncio.run(open_all(args, first, count, sockets, errors))
    except Exception as e:  # report rather than hang the parent
        errors.append(f"client process failed: {e!r}")
    first_error = next((e for e in errors if e), "")
    os.write(
        results_w,
        f"done {len(sockets)} {count - len(sockets)} {time.monotonic() - start:.2f} {first_error}\n"
        .encode(),
    )
    control = os.fdopen(control_r, "r")
    for line in control:  # EOF: the parent is gone
        if line.strip() == "check":
            alive, dead = check(sockets)
            os.write(results_w, f"check {alive} {dead}\n".encode())
        else:
            break
    for s in sockets:
        s.close()
    os._exit(0)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--user", default="postgres")
    p.add_argument("--dbname", default="postgres")
    p.add_argument("--password", default="")
    p.add_argument("--clients", type=int, required=True)
    p.add_argument("--sources", type=int, default=16, help="source addresses 127.0.0.2...")
    p.add_argument("--per-process", type=int, default=15000)
    p.add_argument("--concurrency", type=int, default=128, help="logins in flight per process")
    p.add_argument("--login-timeout", type=float, default=30)
    p.add_argument("--timeout", type=float, default=600, help="all logins must finish by then")
    p.add_argument("--hold", type=float, default=1800, help="exit this long after READY")
    args = p.parse_args()
    if not ipaddress.ip_address(args.host).is_loopback:
        p.error("--host must be a loopback address")
    if not 1 <= args.sources <= 250:
        p.error("--sources must be 1..250")

    start = time.monotonic()
    kids = []  # (pid, results_r file, control_w fd)
    first = 0
    while first < args.clients:
        count = min(args.per_process, args.clients - first)
        results_r, results_w = os.pipe()
        control_r, control_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(results_r)
            os.close(control_w)
            for _, f, w in kids:  # siblings' pipes are not ours
                f.close()
                os.close(w)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            # The parent stops us through the pipe; stray signals must not.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGUSR1, signal.SIG_IGN)
            child(args, first, count, results_w, control_r)
        os.close(results_w)
        os.close(control_r)
        kids.append((pid, os.fdopen(results_r, "r"), control_w))
        first += count

    def stop(code):
        for pid, f, w in kids:
            try:
                os.write(w, b"exit\n")
            except OSError:
                pass
            os.close(w)
        deadline = time.monotonic() + 10
        for pid, _, _ in kids:
            while time.monotonic() < deadline:
                done, _ = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                time.sleep(0.05)
            else:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        sys.exit(code)

    def read_lines(prefix):
        lines = []
        deadline = start + args.timeout if prefix == "done" else time.monotonic() + 60
        for _, f, _ in kids:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([f], [], [], remaining)[0]:
                print(f"ERROR timed out waiting for the client processes ({prefix})", flush=True)
                stop(1)
            line = f.readline()
            if not line.startswith(prefix + " "):
                print(f"ERROR client process said {line.strip()!r}", flush=True)
                stop(1)
            lines.append(line.rstrip("\n").split(" ", 4))
        return lines

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, lambda *_: None)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGUSR1})

    done = read_lines("done")
    established = sum(int(d[1]) for d in done)
    failed = sum(int(d[2]) for d in done)
    first_error = next((d[4] for d in done if len(d) > 4 and d[4]), "")
    line = f"READY established={established} failed={failed} seconds={time.monotonic() - start:.1f}"
    if first_error:
        line += f' error="{first_error}"'
    print(line, flush=True)

    hold_until = time.monotonic() + args.hold
    while True:
        remaining = hold_until - time.monotonic()
        if remaining <= 0:
            stop(0)
        info = signal.sigtimedwait({signal.SIGTERM, signal.SIGINT, signal.SIGUSR1}, remaining)
        if info is None:
            continue
        if info.si_signo != signal.SIGUSR1:
            stop(0)
        for _, _, w in kids:
            os.write(w, b"check\n")
        checks = read_lines("check")
        alive = sum(int(c[1]) for c in checks)
        dead = sum(int(c[2]) for c in checks)
        print(f"CHECK alive={alive} dead={dead}", flush=True)


if __name__ == "__main__":
    main()
