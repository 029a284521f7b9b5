#!/usr/bin/env python3
"""Repairs on a clean path: the real ctcp-forward / ctcp-reverse binaries on loopback.

Runs curl --socks5-hostname downloads (full speed and --limit-rate) and request/response
exchanges on one stream through the pair, and reads both proxies' metrics before and
after each run: repair datagrams per data (source) datagram by kind, and IP bytes on the
wire per delivered byte (UDP payload + 28 bytes of IPv4/UDP header per datagram, both
directions, ACKs included), and each proxy's CPU seconds per 100 MiB delivered.

  cargo build --release --locked -p ctcp-forward -p ctcp-reverse
  benches/repair-bench.py [--bin DIR] [--mb 100] [--rates full,20M,1M] [--small-mb 5 \
      --small-rates 100K] [--exchanges 1000] [--size 1000]
"""

import argparse
import functools
import http.server
import os
import re
import socket
import socketserver
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request


def free_port(kind=socket.SOCK_STREAM):
    s = socket.socket(socket.AF_INET, kind)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def scrape(port):
    """Process totals and per-kind repair counters from one proxy's metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"ctcp_process_(\w+?)(?:_total)?(\{[^}]*\})? ([0-9.e+-]+)$", line)
        if m:
            name, labels, v = m.group(1), m.group(2) or "", float(m.group(3))
            kind = re.search(r'kind="(\w+)"', labels)
            key = f"{name}:{kind.group(1)}" if kind else name
            out[key] = out.get(key, 0.0) + v
    return out


def diff(a, b):
    return {k: b.get(k, 0.0) - a.get(k, 0.0) for k in set(a) | set(b)}


def socks_connect(socks_port, host, port):
    s = socket.create_connection(("127.0.0.1", socks_port))
    s.sendall(b"\x05\x01\x00")
    assert s.recv(2) == b"\x05\x00"
    name = host.encode()
    s.sendall(b"\x05\x01\x00\x03" + bytes([len(name)]) + name + struct.pack(">H", port))
    head = recv_exact(s, 4)
    assert head[1] == 0, f"SOCKS reply {head[1]}"
    recv_exact(s, {1: 4, 4: 16}.get(head[3], 0) or recv_exact(s, 1)[0])
    recv_exact(s, 2)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class Echo(socketserver.BaseRequestHandler):
    """Answers every `size`-byte request with `size` bytes."""

    size = 1000

    def handle(self):
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                req = recv_exact(self.request, self.size)
                self.request.sendall(bytes(reversed(req)))
        except (EOFError, ConnectionError):
            pass


def cpu_seconds(pid):
    """User + system CPU seconds of a process (USER_HZ 100)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0


def report(label, rev, fwd, delivered, secs, cpu=None):
    def g(d, k):
        return d.get(k, 0.0)

    kinds = ["proactive", "tail", "reactive", "stall", "margin"]
    line = [f"{label}: {delivered / 1e6:.1f} MB in {secs:.2f} s"]
    for side, d in (("reverse", rev), ("forward", fwd)):
        src = g(d, "source_symbols_sent")
        rep = g(d, "repair_symbols_sent")
        by = " ".join(f"{k} {int(g(d, 'repairs_sent:' + k))}" for k in kinds)
        pct = 100 * rep / src if src else 0.0
        line.append(
            f"  {side}: {int(g(d, 'datagrams_sent'))} datagrams, {int(src)} source, "
            f"{int(rep)} repair ({pct:.2f} % of source; {by}), "
            f"useless received {int(g(d, 'repairs_useless'))}, lost {int(g(d, 'packets_lost'))}"
        )
    wire = sum(g(d, "bytes_sent") + 28 * g(d, "datagrams_sent") for d in (rev, fwd))
    line.append(f"  IP bytes on the wire per delivered byte: {wire / delivered:.4f}")
    if cpu:
        per = 104.8576e6 / delivered
        line.append(f"  CPU per 100 MiB: reverse {cpu[0] * per:.2f} s, forward {cpu[1] * per:.2f} s")
    print("\n".join(line), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release")
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--rates", default="full,20M,1M")
    ap.add_argument("--small-mb", type=int, default=5)
    ap.add_argument("--small-rates", default="")
    ap.add_argument("--exchanges", type=int, default=1000)
    ap.add_argument("--size", type=int, default=1000)
    a = ap.parse_args()

    d = tempfile.mkdtemp()
    procs = []
    try:
        big = os.path.join(d, "big")
        small = os.path.join(d, "small")
        with open(big, "wb") as f:
            f.write(os.urandom(a.mb * 1000 * 1000))
        with open(small, "wb") as f:
            f.write(os.urandom(a.small_mb * 1000 * 1000))
        key = os.path.join(d, "key")
        with open(key, "w") as f:
            f.write(os.urandom(32).hex())
        os.chmod(key, 0o600)
        http_port, udp, socks = free_port(), free_port(socket.SOCK_DGRAM), free_port()
        m_rev, m_fwd = free_port(), free_port()
        Echo.size = a.size
        echo = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
        echo_port = echo.server_address[1]
        threading.Thread(target=echo.serve_forever, daemon=True).start()
        handler = functools.partial(Quiet, directory=d)
        web = http.server.ThreadingHTTPServer(("127.0.0.1", http_port), handler)
        threading.Thread(target=web.serve_forever, daemon=True).start()
        procs.append(subprocess.Popen([
            f"{a.bin}/ctcp-reverse", "--listen", f"127.0.0.1:{udp}", "--psk-file", key,
            "--allow", "127.0.0.1", "--metrics-listen", f"127.0.0.1:{m_rev}",
            "--log-level", "warn"]))
        procs.append(subprocess.Popen([
            f"{a.bin}/ctcp-forward", "--listen", f"127.0.0.1:{socks}", "--peer",
            f"127.0.0.1:{udp}", "--psk-file", key, "--metrics-listen",
            f"127.0.0.1:{m_fwd}", "--log-level", "warn"]))
        url = f"http://localhost:{http_port}"
        for _ in range(100):
            r = subprocess.run(["curl", "-sf", "--socks5-hostname", f"127.0.0.1:{socks}",
                                "-r", "0-0", "-o", "/dev/null", f"{url}/small"])
            if r.returncode == 0:
                break
            time.sleep(0.1)

        def run(label, fn):
            r0, f0 = scrape(m_rev), scrape(m_fwd)
            c0 = [cpu_seconds(p.pid) for p in procs]
            t0 = time.monotonic()
            delivered = fn()
            secs = time.monotonic() - t0
            time.sleep(0.5)  # let the last ACKs and any tail settle into the counters
            cpu = [cpu_seconds(p.pid) - c for p, c in zip(procs, c0)]
            report(label, diff(r0, scrape(m_rev)), diff(f0, scrape(m_fwd)), delivered, secs, cpu)

        def download(name, size, rate):
            def fn():
                cmd = ["curl", "-sf", "--socks5-hostname", f"127.0.0.1:{socks}", "-o",
                       os.path.join(d, "got"), f"{url}/{name}"]
                if rate != "full":
                    cmd[1:1] = ["--limit-rate", rate]
                subprocess.run(cmd, check=True)
                got = os.path.getsize(os.path.join(d, "got"))
                assert got == size, f"got {got} of {size}"
                return got
            return fn

        for rate in filter(None, a.rates.split(",")):
            run(f"download {a.mb} MB at {rate}", download("big", a.mb * 1000 * 1000, rate))
        for rate in filter(None, a.small_rates.split(",")):
            run(f"download {a.small_mb} MB at {rate}",
                download("small", a.small_mb * 1000 * 1000, rate))

        def exchanges():
            s = socks_connect(socks, "127.0.0.1", echo_port)
            req = os.urandom(a.size)
            for _ in range(a.exchanges):
                s.sendall(req)
                assert recv_exact(s, a.size) == bytes(reversed(req))
            s.close()
            return 2 * a.size * a.exchanges

        if a.exchanges:
            run(f"{a.exchanges} request/response exchanges of {a.size} B", exchanges)
    finally:
        for p in procs:
            p.terminate()
            p.wait()


if __name__ == "__main__":
    sys.exit(main())
