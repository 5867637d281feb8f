#!/usr/bin/env python3
"""Issue 18 item 13: what a binding costs as one queue collects many of them.

Starts sluice (a child process on a fresh data dir, or attaches to one with --url
and --pid), declares one queue, binds it --bindings N times with distinct keys
(`k.<i>`) to a topic exchange and then N times to a direct exchange, one
queue.bind at a time waiting for bind-ok (as a client declaring topology does),
and prints for every --step bindings: bindings/s over that step and the broker's
CPU seconds (utime + stime from /proc/<pid>/stat) spent on it. Then it deletes
the queue (timed: it takes every binding with it) and, with --restart, stops the
broker (SIGTERM) and times a restart on the same data dir (with --durable the
bindings are replayed from definitions.log).

Speaks AMQP 0-9-1 over a raw socket (no client library needed). Asserts nothing
about speed: it prints figures for perf/RESULTS.md.

Usage:
  perf/bindings.py --sluice target/debug/sluice [--bindings 100000] [--step 10000]
                   [--shards 2] [--durable] [--restart] [--only topic|direct]
  perf/bindings.py --url 127.0.0.1:5672 --pid PID ...
"""

import argparse
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

FRAME_END = 0xCE


def shortstr(s):
    b = s.encode()
    return struct.pack("B", len(b)) + b


def longstr(b):
    return struct.pack(">I", len(b)) + b


EMPTY_TABLE = struct.pack(">I", 0)


class Conn:
    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.sock.sendall(b"AMQP\x00\x00\x09\x01")
        self.expect(10, 10)  # start
        self.method(0, 10, 11, EMPTY_TABLE + shortstr("PLAIN")
                    + longstr(b"\x00guest\x00guest") + shortstr("en_US"))
        args = self.expect(10, 30)  # tune
        channel_max, frame_max, _ = struct.unpack(">HIH", args[:8])
        self.method(0, 10, 31, struct.pack(">HIH", channel_max, frame_max, 0))
        self.method(0, 10, 40, shortstr("/") + shortstr("") + b"\x00")
        self.expect(10, 41)
        self.method(1, 20, 10, shortstr(""))
        self.expect(20, 11)

    def method(self, channel, class_id, method_id, args):
        payload = struct.pack(">HH", class_id, method_id) + args
        self.sock.sendall(struct.pack(">BHI", 1, channel, len(payload)) + payload
                          + bytes([FRAME_END]))

    def frame(self):
        while True:
            if len(self.buf) >= 7:
                kind, channel, size = struct.unpack(">BHI", self.buf[:7])
                if len(self.buf) >= 8 + size:
                    payload = self.buf[7:7 + size]
                    self.buf = self.buf[8 + size:]
                    return kind, channel, payload
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("broker closed the connection")
            self.buf += chunk

    def expect(self, class_id, method_id):
        while True:
            kind, _, payload = self.frame()
            if kind != 1:
                continue  # heartbeats
            got = struct.unpack(">HH", payload[:4])
            if got == (class_id, method_id):
                return payload[4:]
            if got in ((10, 50), (20, 40)):
                code = struct.unpack(">H", payload[4:6])[0]
                text = payload[7:7 + payload[6]].decode(errors="replace")
                raise RuntimeError(f"closed by broker: {code} {text}")
            raise RuntimeError(f"expected {class_id}.{method_id}, got {got}")

    def declare_exchange(self, name, kind, durable):
        self.method(1, 40, 10, struct.pack(">H", 0) + shortstr(name) + shortstr(kind)
                    + bytes([2 if durable else 0]) + EMPTY_TABLE)
        self.expect(40, 11)

    def declare_queue(self, name, durable):
        self.method(1, 50, 10, struct.pack(">H", 0) + shortstr(name)
                    + bytes([2 if durable else 0]) + EMPTY_TABLE)
        self.expect(50, 11)

    def bind(self, queue, exchange, key):
        self.method(1, 50, 20, struct.pack(">H", 0) + shortstr(queue) + shortstr(exchange)
                    + shortstr(key) + b"\x00" + EMPTY_TABLE)
        self.expect(50, 21)

    def delete_queue(self, name):
        self.method(1, 50, 40, struct.pack(">H", 0) + shortstr(name) + b"\x00")
        self.expect(50, 41)

    def close(self):
        self.method(0, 10, 50, struct.pack(">H", 200) + shortstr("bye") + struct.pack(">HH", 0, 0))
        try:
            self.expect(10, 51)
        except (EOFError, RuntimeError, OSError):
            pass
        self.sock.close()


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(binary, data_dir, shards, port, log):
    """Starts sluice; returns it and the seconds until it logged BRK-1004 (Ready)."""
    log_path = log.name
    seen = os.path.getsize(log_path)
    proc = subprocess.Popen(
        [binary, "--listen", f"127.0.0.1:{port}", "--shards", str(shards),
         "--data-dir", data_dir, "--http-listen", "off"],
        stdout=log, stderr=subprocess.STDOUT)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 600:
        if proc.poll() is not None:
            sys.exit(f"sluice exited with {proc.returncode} at start")
        with open(log_path, "rb") as f:
            f.seek(seen)
            if b"BRK-1004" in f.read():
                return proc, time.monotonic() - t0
        time.sleep(0.05)
    sys.exit("sluice was not ready (BRK-1004) within 600 s")


def bind_run(conn, pid, queue, exchange, n, step):
    print(f"\n{exchange}: {n:,} bindings of queue {queue}, {step:,} per row")
    print(f"{'bindings':>10} {'bindings/s':>11} {'broker CPU s':>13}")
    rows = []
    for start in range(0, n, step):
        c0, t0 = cpu_seconds(pid), time.monotonic()
        for i in range(start, min(start + step, n)):
            conn.bind(queue, exchange, f"k.{i}")
        dt, dc = time.monotonic() - t0, cpu_seconds(pid) - c0
        done = min(start + step, n)
        rows.append(((done - start) / dt, dc))
        print(f"{done:>10,} {rows[-1][0]:>11,.0f} {dc:>13.2f}", flush=True)
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sluice", help="the broker binary to start")
    p.add_argument("--url", help="host:port of a running broker (with --pid)")
    p.add_argument("--pid", type=int)
    p.add_argument("--bindings", type=int, default=100_000)
    p.add_argument("--step", type=int, default=10_000)
    p.add_argument("--shards", type=int, default=2)
    p.add_argument("--durable", action="store_true")
    p.add_argument("--restart", action="store_true")
    p.add_argument("--only", choices=["topic", "direct"])
    a = p.parse_args()
    if bool(a.sluice) == bool(a.url) or (a.url and not a.pid):
        p.error("give --sluice BINARY, or --url HOST:PORT with --pid PID")
    data_dir = tempfile.mkdtemp(prefix="sluice-bindings-")
    log = open(os.path.join(data_dir, "broker.log"), "wb")
    proc = None
    if a.sluice:
        port = free_port()
        proc, _ = start_broker(a.sluice, os.path.join(data_dir, "data"), a.shards, port, log)
        addr, pid = f"127.0.0.1:{port}", proc.pid
    else:
        addr, pid = a.url, a.pid
    cpu0, wall0 = cpu_seconds(pid), time.monotonic()
    conn = Conn(addr)
    queue = "bench.bindings"
    conn.declare_queue(queue, a.durable)
    summary = []
    for kind in ("topic", "direct"):
        if a.only and a.only != kind:
            continue
        exchange = f"bench.bindings.{kind}"
        conn.declare_exchange(exchange, kind, a.durable)
        rows = bind_run(conn, pid, queue, exchange, a.bindings, a.step)
        summary.append((kind, rows[0][0], rows[-1][0], sum(r[1] for r in rows)))
    if a.restart and proc:
        conn.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=600)
        proc, ready_s = start_broker(a.sluice, os.path.join(data_dir, "data"), a.shards,
                                     port, log)
        print(f"\nrestart: ready (BRK-1004) {ready_s:.2f} s after exec, broker CPU "
              f"{cpu_seconds(proc.pid):.2f} s")
        pid = proc.pid
        conn = Conn(addr)
    t0 = time.monotonic()
    conn.delete_queue(queue)
    delete_s = time.monotonic() - t0
    total_cpu, total_wall = cpu_seconds(pid) - cpu0, time.monotonic() - wall0
    conn.close()
    print("\nexchange  first step/s  last step/s  broker CPU s")
    for kind, first, last, cpu in summary:
        print(f"{kind:<8} {first:>13,.0f} {last:>12,.0f} {cpu:>13.2f}")
    print(f"queue.delete with every binding: {delete_s:.2f} s")
    if not a.restart:
        print(f"in all: {total_wall:.1f} s, broker CPU {total_cpu:.2f} s")
    if proc:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        log.close()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
