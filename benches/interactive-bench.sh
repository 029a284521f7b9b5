#!/usr/bin/env bash
# An interactive stream behind bulk ones in the same tunnel session: K `curl` downloads
# through ctcp-forward while an echo client on another SOCKS stream sends a 64-byte
# request every 100 ms and times its echo (the reply rides the same direction as the
# downloads, so it waits in the reverse's turn order behind them). Prints the echo's
# p50 / p90 / p99 / max round trip without and with the downloads, and the downloads'
# total rate.
#
#   client side (ns A): forward, curl × K, echo client ══ linkem ══ ns B: reverse,
#   HTTP origin, echo server
#
#   cargo build --release --locked -p ctcp-forward -p ctcp-reverse -p ctcp-linkem
#   sudo benches/interactive-bench.sh [--rate 2] [--rtt 100] [--bulk 8] [--secs 20]
#
# --rate: the link's rate in Mbit/s (queue: one BDP); --bulk: the concurrent downloads;
# --secs: how long the echo runs beside them. BIN=dir runs another build's proxies.
# Needs root, ip, curl, python3.
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=2 RTT=100 BULK=8 SECS=20
while [ $# -gt 0 ]; do
	case "$1" in
	--rate) RATE=$2; shift ;;
	--rtt) RTT=$2; shift ;;
	--bulk) BULK=$2; shift ;;
	--secs) SECS=$2; shift ;;
	*) sed -n '2,17p' "$0"; exit 2 ;;
	esac
	shift
done
BIN=${BIN:-target/release}
LINKEM=${LINKEM:-target/release/ctcp-linkem}
NS_A=ib-a-$$ NS_B=ib-b-$$
A=10.77.0.1 B=10.77.0.2
dir=$(mktemp -d /tmp/interactive-bench.XXXXXX)
pids=()
linkem=
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	[ -n "$linkem" ] && kill -TERM "$linkem" 2>/dev/null && wait "$linkem" 2>/dev/null || true
	[ -n "${KEEP:-}" ] && echo "logs kept in $dir" || rm -rf "$dir"
}
trap cleanup EXIT
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/key"; chmod 600 "$dir/key"
# Big enough that no download ends during the measurement.
head -c $((RATE * SECS * 125000 * 2 / BULK + 1000000)) /dev/urandom > "$dir/file"
echo ready > "$dir/ready" # the readiness probe's (the origin ignores ranges)

queue=$((RATE * 125000 * RTT / 1000))
"$LINKEM" --ns-a "$NS_A" --ns-b "$NS_B" --addr-a "$A" --addr-b "$B" \
	--delay "$((RTT * 500))us" --rate "${RATE}mbit" --queue "$queue" \
	--ready-file "$dir/link.ready" --stats-interval 0 > "$dir/linkem.log" 2>&1 &
linkem=$!
for _ in $(seq 200); do [ -f "$dir/link.ready" ] && break; sleep 0.05; done
[ -f "$dir/link.ready" ] || { cat "$dir/linkem.log" >&2; exit 1; }
# Background processes are started with `ip netns exec` itself (it execs the command), so
# that the pid the cleanup kills is the process's.
inb() { ip netns exec "$NS_B" "$@"; }
ina() { ip netns exec "$NS_A" "$@"; }
inb ip link set lo up; ina ip link set lo up

cat > "$dir/echo.py" <<'EOF'
import asyncio, socket, struct, sys, time

async def serve(port):
    async def one(r, w):
        while data := await r.read(4096):
            w.write(data)
            await w.drain()
        w.close()
    s = await asyncio.start_server(one, "127.0.0.1", port)
    await s.serve_forever()

def socks(port, host, dport):
    c = socket.create_connection(("127.0.0.1", port))
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c.sendall(b"\x05\x01\x00")
    assert c.recv(2) == b"\x05\x00"
    c.sendall(b"\x05\x01\x00\x01" + socket.inet_aton(host) + struct.pack(">H", dport))
    reply = b""
    while len(reply) < 10:
        reply += c.recv(10 - len(reply))
    assert reply[1] == 0, reply
    return c

def probe(port, host, dport, secs, out):
    c = socks(port, host, dport)
    rtts = []
    end = time.monotonic() + secs
    while time.monotonic() < end:
        msg = b"x" * 64
        t = time.monotonic()
        c.sendall(msg)
        got = b""
        while len(got) < len(msg):
            got += c.recv(len(msg) - len(got))
        rtts.append((time.monotonic() - t) * 1000)
        time.sleep(max(0, 0.1 - (time.monotonic() - t)))
    with open(out, "w") as f:
        f.write("\n".join(f"{r:.2f}" for r in rtts))

if sys.argv[1] == "serve":
    asyncio.run(serve(int(sys.argv[2])))
else:
    probe(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), sys.argv[6])
EOF

# Server side: the reverse, an HTTP origin and the echo server, on loopback of ns B.
ip netns exec "$NS_B" "$BIN/ctcp-reverse" --listen "$B:7000" --psk-file "$dir/key" --allow 127.0.0.1 \
	--log-level warn > "$dir/reverse.log" 2>&1 & pids+=($!)
(cd "$dir" && exec ip netns exec "$NS_B" python3 -m http.server 8080 --bind 127.0.0.1 \
	> "$dir/http.log" 2>&1) & pids+=($!)
ip netns exec "$NS_B" python3 "$dir/echo.py" serve 7007 & pids+=($!)
ip netns exec "$NS_A" "$BIN/ctcp-forward" --listen 127.0.0.1:1080 --peer "$B:7000" --psk-file "$dir/key" \
	--log-level warn > "$dir/forward.log" 2>&1 & pids+=($!)
for _ in $(seq 100); do
	ina curl -sf --max-time 2 --socks5-hostname 127.0.0.1:1080 -o /dev/null \
		http://127.0.0.1:8080/ready && break
	sleep 0.2
done

stats() {
	sort -n "$1" | awk -v label="$2" '
		function q(p) { i = int(NR * p) + 1; return v[i > NR ? NR : i] }
		{ v[NR] = $1 }
		END { printf "%s: %d echoes, round trip p50 %.1f ms, p90 %.1f, p99 %.1f, max %.1f\n",
			label, NR, q(0.5), q(0.9), q(0.99), v[NR] }'
}
ina python3 "$dir/echo.py" probe 1080 127.0.0.1 7007 5 "$dir/idle.txt"
stats "$dir/idle.txt" "idle session"
curls=()
for i in $(seq "$BULK"); do
	ip netns exec "$NS_A" curl -s --socks5-hostname 127.0.0.1:1080 -o /dev/null -w '%{size_download}\n' \
		--max-time $((SECS + 4)) http://127.0.0.1:8080/file > "$dir/curl.$i" 2>/dev/null &
	curls+=($!)
done
sleep 3 # the downloads are under way and the window is open
ina python3 "$dir/echo.py" probe 1080 127.0.0.1 7007 "$SECS" "$dir/busy.txt"
stats "$dir/busy.txt" "behind $BULK downloads"
for p in "${curls[@]}"; do wait "$p" 2>/dev/null || true; done
total=$(cat "$dir"/curl.* | awk '{ s += $1 } END { print s + 0 }')
awk -v b="$total" -v s="$((SECS + 4))" -v r="$RATE" 'BEGIN {
	printf "downloads: %.2f Mbit/s together over %d s (link %d Mbit/s)\n", b * 8 / s / 1e6, s, r }'
