#!/usr/bin/env bash
# Many UDP flows through the TPROXY gateway (issue 27): a LAN client sends one datagram
# from each of --flows distinct (source address, source port) pairs to a UDP echo server
# beyond the tunnel, through ctcp-forward's transparent UDP listener, while a probe flow
# sends a datagram every 100 ms and times its echo. Reports both proxies' peak RSS
# (VmHWM) and RSS after the flood, the flows opened, evicted at the cap
# (`--udp-max-flows`) and closed idle (`--udp-idle-timeout`), and the probe's answered
# fraction and p50/p99/max round trip before, during and after the flood: whether memory
# stays bounded and the gateway responsive.
#
#   client ns ──veth── forward ns (A) ══ linkem ══ reverse ns (B): echo on 10.200.9.1:7007
#   10.200.1.2 (probe), 10.200.1.10.. (flood sources)
#
#   cargo build --release --locked -p ctcp-forward -p ctcp-reverse -p ctcp-linkem
#   sudo benches/udp-flows-bench.sh [--flows 100000] [--rate 5000] [--max-flows 1024]
#        [--idle 10s] [--rtt 20] [--link-rate 100] [--out FILE]
#
# --rate: new flows per second (the generator's pace). The link has no random loss and a
# queue of one BDP. Writes one JSON line to --out (default
# benches/results/udp-flows.json) and prints it. Needs root, ip, nft, curl, python3.
set -euo pipefail
cd "$(dirname "$0")/.."
FLOWS=100000 RATE=5000 MAX_FLOWS=1024 IDLE=10s RTT=20 LINK=100
OUT=benches/results/udp-flows.json
while [ $# -gt 0 ]; do
	case "$1" in
	--flows) FLOWS=$2; shift ;;
	--rate) RATE=$2; shift ;;
	--max-flows) MAX_FLOWS=$2; shift ;;
	--idle) IDLE=$2; shift ;;
	--rtt) RTT=$2; shift ;;
	--link-rate) LINK=$2; shift ;;
	--out) OUT=$2; shift ;;
	*) sed -n '2,21p' "$0"; exit 2 ;;
	esac
	shift
done
BIN=${BIN:-target/release}
PORT=12345 ECHO=7007
NS_C=ufb-c-$$ NS_A=ufb-a-$$ NS_B=ufb-b-$$
dir=$(mktemp -d /tmp/udp-flows-bench.XXXXXX)
pids=()
linkem=
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	[ -n "$linkem" ] && kill -TERM "$linkem" 2>/dev/null && wait "$linkem" 2>/dev/null || true
	ip netns del "$NS_C" 2>/dev/null || true
	[ -n "${KEEP:-}" ] && echo "logs kept in $dir" || rm -rf "$dir"
}
trap cleanup EXIT
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/key"; chmod 600 "$dir/key"

queue=$((LINK * 1000 * 1000 / 8 * RTT / 1000))
"$BIN/ctcp-linkem" --ns-a "$NS_A" --ns-b "$NS_B" --delay "$((RTT * 500))us" \
	--rate "${LINK}mbit" --queue "$queue" --ready-file "$dir/link.ready" --stats-interval 0 \
	> "$dir/linkem.log" 2>&1 &
linkem=$!
for _ in $(seq 200); do [ -f "$dir/link.ready" ] && break; sleep 0.05; done
[ -f "$dir/link.ready" ] || { cat "$dir/linkem.log" >&2; exit 1; }

# The LAN: the probe's address and 8 flood source addresses (8 × up to 40,000 ports).
ip netns add "$NS_C"; ip -n "$NS_C" link set lo up
ip link add c0 netns "$NS_C" type veth peer f0 netns "$NS_A"
ip -n "$NS_C" addr add 10.200.1.2/24 dev c0
for i in $(seq 10 17); do ip -n "$NS_C" addr add "10.200.1.$i/24" dev c0; done
ip -n "$NS_A" addr add 10.200.1.1/24 dev f0
ip -n "$NS_C" link set c0 up; ip -n "$NS_A" link set f0 up
ip -n "$NS_C" route add default via 10.200.1.1
ip -n "$NS_B" addr add 10.200.9.1/32 dev lo
ip netns exec "$NS_C" sysctl -qw net.ipv4.ip_local_port_range="1024 65000"

# The echo server beyond the tunnel.
ip netns exec "$NS_B" python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
s.bind(("10.200.9.1", int(sys.argv[1])))
while True:
    d, a = s.recvfrom(65535)
    s.sendto(d, a)
' "$ECHO" &
pids+=($!)
ip netns exec "$NS_B" "$BIN/ctcp-reverse" --listen 10.77.0.2:7000 --psk-file "$dir/key" \
	--udp-max-flows "$MAX_FLOWS" --udp-idle-timeout "$IDLE" --metrics-listen 127.0.0.1:9101 \
	--log-level warn 2> "$dir/reverse.log" &
rev=$!; pids+=($rev)

ip netns exec "$NS_A" sh configs/gateway-tproxy.sh add
sed -e 's|^define lan_if = .*|define lan_if = "f0"|' \
	-e "s|^define ctcp_port = .*|define ctcp_port = $PORT|" \
	-e 's|^define reverse_v4 = .*|define reverse_v4 = { 10.77.0.2 }|' \
	-e 's|^define reverse_v6 = .*|define reverse_v6 = { 2001:db8::7 }|' \
	-e 's|^define exempt_v4 = .*|define exempt_v4 = { 127.0.0.0/8, 169.254.0.0/16 }|' \
	-e 's|^define exempt_v6 = .*|define exempt_v6 = { ::1, fe80::/10 }|' \
	configs/gateway-tproxy.nft > "$dir/rules.nft"
ip netns exec "$NS_A" nft -f "$dir/rules.nft"
ip netns exec "$NS_A" "$BIN/ctcp-forward" --peer 10.77.0.2:7000 --psk-file "$dir/key" \
	--listen 10.200.1.1:1080 --transparent-listen "[::]:$PORT" --transparent-mode tproxy \
	--transparent-udp-listen "[::]:$PORT" --udp-max-flows "$MAX_FLOWS" \
	--udp-idle-timeout "$IDLE" --metrics-listen 127.0.0.1:9100 \
	--log-level info 2> "$dir/forward.log" &
fwd=$!; pids+=($fwd)
for _ in $(seq 200); do grep -q "tunnel session established" "$dir/forward.log" && break; sleep 0.05; done
grep -q "tunnel session established" "$dir/forward.log" || { cat "$dir/forward.log" >&2; exit 1; }

# RSS of both proxies every 0.5 s.
(while kill -0 "$fwd" 2>/dev/null; do
	echo "$(date +%s.%N) $(awk '/VmRSS/ {print $2}' "/proc/$fwd/status") $(awk '/VmRSS/ {print $2}' "/proc/$rev/status")"
	sleep 0.5
done) > "$dir/rss.txt" 2>/dev/null &
pids+=($!)

# The probe: a datagram every 100 ms from one flow, each echo awaited up to 1 s. Phases
# are marked by files the flood writes.
ip netns exec "$NS_C" python3 - "$dir" "$ECHO" > "$dir/probe.txt" <<'PY' &
import os, socket, sys, time
d, port = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("10.200.1.2", 0))
s.settimeout(1.0)
n = 0
while not os.path.exists(os.path.join(d, "probe.stop")):
    phase = "after" if os.path.exists(os.path.join(d, "flood.done")) else \
        "during" if os.path.exists(os.path.join(d, "flood.start")) else "before"
    n += 1
    msg = n.to_bytes(8, "big")
    t0 = time.monotonic()
    s.sendto(msg, ("10.200.9.1", port))
    got = None
    while True:
        try:
            data = s.recv(64)
        except socket.timeout:
            break
        if data == msg:
            got = (time.monotonic() - t0) * 1000
            break
    print(phase, "lost" if got is None else f"{got:.1f}", flush=True)
    time.sleep(max(0.0, 0.1 - (time.monotonic() - t0)))
PY
probe=$!; pids+=($probe)
sleep 3

# The flood: one 64-byte datagram from each of FLOWS distinct (address, port) pairs.
ip netns exec "$NS_C" python3 - "$dir" "$ECHO" "$FLOWS" "$RATE" <<'PY'
import os, socket, sys, time
d, port, flows, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
open(os.path.join(d, "flood.start"), "w").close()
t0 = time.monotonic()
sent = 0
for i in range(flows):
    src = (f"10.200.1.{10 + i % 8}", 20000 + i // 8)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(src)
        s.sendto(i.to_bytes(8, "big") * 8, ("10.200.9.1", port))
        sent += 1
    except OSError:
        pass
    s.close()
    ahead = (i + 1) / rate - (time.monotonic() - t0)
    if ahead > 0:
        time.sleep(ahead)
print(f"flood: {sent} flows in {time.monotonic() - t0:.1f} s", file=sys.stderr)
open(os.path.join(d, "flood.sent"), "w").write(str(sent))
PY
# "during" lasts until the gateway has had a few seconds to drain what the flood queued.
sleep 3
touch "$dir/flood.done"
metrics() { ip netns exec "$1" curl -s "http://127.0.0.1:$2/metrics" | grep '^ctcp_udp_' || true; }
metrics "$NS_A" 9100 > "$dir/fwd-flood.metrics"
metrics "$NS_B" 9101 > "$dir/rev-flood.metrics"
rss_flood="$(awk '/VmRSS/ {print $2}' "/proc/$fwd/status") $(awk '/VmRSS/ {print $2}' "/proc/$rev/status")"
# Past the idle timeout every flood flow is closed; the probe's stays (it keeps sending).
idle_s=$(echo "$IDLE" | sed -e 's/ms$/ \/ 1000/' -e 's/s$//' -e 's/m$/ * 60/' | bc)
sleep "$(echo "$idle_s + 3" | bc)"
metrics "$NS_A" 9100 > "$dir/fwd-end.metrics"
metrics "$NS_B" 9101 > "$dir/rev-end.metrics"
touch "$dir/probe.stop"
wait "$probe" 2>/dev/null || true
hwm_f=$(awk '/VmHWM/ {print $2}' "/proc/$fwd/status")
hwm_r=$(awk '/VmHWM/ {print $2}' "/proc/$rev/status")
rss_end="$(awk '/VmRSS/ {print $2}' "/proc/$fwd/status") $(awk '/VmRSS/ {print $2}' "/proc/$rev/status")"
kill -0 "$fwd" && kill -0 "$rev" || { echo "a proxy died" >&2; exit 1; }

mkdir -p "$(dirname "$OUT")"
python3 - "$dir" "$FLOWS" "$RATE" "$MAX_FLOWS" "$IDLE" "$RTT" "$LINK" "$hwm_f" "$hwm_r" \
	"$rss_flood" "$rss_end" <<'PY' | tee -a "$OUT"
import json, sys
d, flows, rate, cap, idle, rtt, link, hwm_f, hwm_r, rss_flood, rss_end = sys.argv[1:]
def metric(path, name, label=None):
    total = 0
    for l in open(path):
        if l.startswith(name) and (label is None or label in l):
            total += float(l.split()[-1])
    return int(total)
def side(tag):
    out = {}
    for when in ("flood", "end"):
        p = f"{d}/{tag}-{when}.metrics"
        out[when] = {
            "flows_opened": metric(p, "ctcp_udp_flows_opened_total"),
            "closed_idle": metric(p, "ctcp_udp_flows_closed_total", 'reason="idle"'),
            "closed_evicted": metric(p, "ctcp_udp_flows_closed_total", 'reason="evicted"'),
            "to_tunnel": metric(p, "ctcp_udp_relayed_total", 'direction="to_tunnel"'),
            "from_tunnel": metric(p, "ctcp_udp_relayed_total", 'direction="from_tunnel"'),
            "dropped": metric(p, "ctcp_udp_dropped_total"),
        }
    return out
probe = {}
for l in open(f"{d}/probe.txt"):
    phase, v = l.split()
    probe.setdefault(phase, []).append(None if v == "lost" else float(v))
def summary(vals):
    ms = sorted(v for v in vals if v is not None)
    n = len(vals)
    allv = ms + [float("inf")] * (n - len(ms))
    pct = lambda q: allv[min(n - 1, int(q * n))] if n else None
    return {"probes": n, "answered_frac": round(len(ms) / n, 4) if n else 0,
            "p50_ms": pct(0.5), "p99_ms": pct(0.99), "max_answered_ms": ms[-1] if ms else None}
rf, rr = rss_flood.split()
ef, er = rss_end.split()
row = {"flows": int(flows), "rate": float(rate), "sent": int(open(f"{d}/flood.sent").read()),
       "udp_max_flows": int(cap), "udp_idle_timeout": idle, "rtt_ms": int(rtt), "link_mbit": int(link),
       "forward_hwm_mb": round(int(hwm_f) / 1024, 1), "reverse_hwm_mb": round(int(hwm_r) / 1024, 1),
       "forward_rss_after_flood_mb": round(int(rf) / 1024, 1), "reverse_rss_after_flood_mb": round(int(rr) / 1024, 1),
       "forward_rss_end_mb": round(int(ef) / 1024, 1), "reverse_rss_end_mb": round(int(er) / 1024, 1),
       "forward": side("fwd"), "reverse": side("rev"),
       "probe": {k: summary(v) for k, v in probe.items()}}
print(json.dumps(row).replace("Infinity", "null"))
PY
