#!/usr/bin/env bash
# Gateway mode over an emulated link (issue 27): a LAN-client namespace with NO proxy
# settings downloads a file with curl (SHA-256 checked) and rsyncs a tree of files
# (diff -r checked) from servers beyond the tunnel, through ctcp-forward's transparent
# listener in `redirect` and in `tproxy` mode, over IPv4 and IPv6, with the shipped
# rulesets (configs/gateway-*.nft, only their `define` lines set). One SOCKS download
# (curl --socks5-hostname from the same client namespace) is the baseline of the run.
#
#   client ns ──veth── forward ns (ns A of ctcp-linkem) ══ link ══ reverse ns (ns B)
#   10.200.1.2         10.200.1.1 / 10.77.0.1                     10.77.0.2; servers on lo:
#   fd00:c7::2         fd00:c7::1                                 10.200.9.1, fd00:c9::1
#
# The link: RATE (10 Mbit/s), RTT (100 ms), Bernoulli LOSS (5 %) both ways, a drop-tail
# queue of one BDP, as netbench's cells. Efficiency = goodput / (rate × (1 − loss)).
#
#   cargo build --release --locked -p ctcp-forward -p ctcp-reverse -p ctcp-linkem
#   sudo benches/gateway-bench.sh [--mb 20] [--files 2000] [--rtt 100] [--loss 0.05]
#        [--rate 10] [--modes redirect,tproxy] [--families 4,6] [--seed 1] [--out FILE]
#        [--kernel-secs 20] [--workloads curl,rsync,dns] [--dns 1000] [--dns-parallel 10]
#        [--dns-warmup 0]
#
# DNS over UDP (tproxy only; --workloads dns, or add it to curl,rsync): dnsmasq in B answers
# a local zone, and the client runs --dns N `dig` queries (one try each, 3 s timeout,
# --dns-parallel at once) through the transparent UDP listener (--transparent-udp-listen):
# the fraction answered and the latency percentiles (dig's "Query time"). --dns-warmup W
# first sends W queries that are not counted (a session that has carried traffic for a
# while; without it the first queries ride a session whose loss estimate is still the
# handshake's). KEEP=1 keeps the run's directory, with both proxies' metrics after each
# family (dns-MODE-FAMILY.forward-metrics, .reverse-metrics: which direction lost a query,
# and whether it expired before it was sent); LOG=debug and RLOG=debug raise the
# forward's and the reverse's log levels; CAPTURE=1 (needs tcpdump) captures the client's
# veth on both sides during each family's queries.
#   sudo benches/gateway-bench.sh --modes tproxy --workloads dns --dns 1000 --rtt 500 \
#        --loss 0.10 --kernel-secs 0
#
# Last, the same download without ctcp (the gateway only routes; kernel TCP Cubic end to
# end), cut off after --kernel-secs (0 skips it): what the LAN gets otherwise.
# Needs root, ip, nft, curl, rsync, python3 (the HTTP server); dnsmasq and dig for dns.
# CTCP_ARGS="--datagram-deadline 100ms" passes flags to both proxies. Writes JSON lines to
# --out (default benches/results/gateway.json) and prints a table.
set -euo pipefail
cd "$(dirname "$0")/.."
MB=20 FILES=2000 RTT=100 LOSS=0.05 RATE=10 MODES=redirect,tproxy FAMILIES=4,6 SEED=1 KERNEL=20
WORKLOADS=curl,rsync DNS=1000 DNS_PAR=10 DNS_WARMUP=0
OUT=benches/results/gateway.json
while [ $# -gt 0 ]; do
	case "$1" in
	--mb) MB=$2; shift ;;
	--files) FILES=$2; shift ;;
	--rtt) RTT=$2; shift ;;
	--loss) LOSS=$2; shift ;;
	--rate) RATE=$2; shift ;;
	--modes) MODES=$2; shift ;;
	--families) FAMILIES=$2; shift ;;
	--seed) SEED=$2; shift ;;
	--kernel-secs) KERNEL=$2; shift ;;
	--workloads) WORKLOADS=$2; shift ;;
	--dns) DNS=$2; shift ;;
	--dns-parallel) DNS_PAR=$2; shift ;;
	--dns-warmup) DNS_WARMUP=$2; shift ;;
	--out) OUT=$2; shift ;;
	*) sed -n '2,36p' "$0"; exit 2 ;;
	esac
	shift
done
BIN=${BIN:-target/release}
PORT=12345 HTTP=8080 RSYNC=8730
NS_C=gwb-c-$$ NS_A=gwb-a-$$ NS_B=gwb-b-$$
dir=$(mktemp -d /tmp/gateway-bench.XXXXXX)
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
# Background processes run as `ip netns exec NS PROG &` (never through a function), so
# that $! is the program itself (ip execs it) and killing it stops it.
in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

# The data: one MB-megabyte file; a tree of FILES files (0-10 kB, ~5 kB mean, in 40
# directories) plus one 1 MB file.
mkdir -p "$dir/www" "$dir/tree"
head -c $((MB * 1000 * 1000)) /dev/urandom > "$dir/www/file.bin"
want=$(sha256sum < "$dir/www/file.bin" | cut -d' ' -f1)
python3 - "$dir/tree" "$FILES" <<'EOF'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rnd = random.Random(27)
for i in range(n):
    d = os.path.join(root, f"d{i % 40}", f"e{i % 5}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i}.bin"), "wb") as f:
        f.write(rnd.randbytes(rnd.randrange(0, 10_000)))
with open(os.path.join(root, "big.bin"), "wb") as f:
    f.write(rnd.randbytes(1_000_000))
EOF
tree_bytes=$(find "$dir/tree" -type f -printf "%s\n" | awk "{ s += \$1 } END { print s }")
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/key"; chmod 600 "$dir/key"

# The link (A = forward, B = reverse and servers).
queue=$((RATE * 1000 * 1000 / 8 * RTT / 1000))
"$BIN/ctcp-linkem" --ns-a "$NS_A" --ns-b "$NS_B" --delay "$((RTT * 500))us" \
	--rate "${RATE}mbit" --queue "$queue" --loss "$LOSS" --seed "$SEED" \
	--ready-file "$dir/link.ready" --stats-interval 0 --stats-file "$dir/link.jsonl" \
	2> "$dir/linkem.log" &
linkem=$!
for _ in $(seq 200); do [ -f "$dir/link.ready" ] && break; sleep 0.05; done
[ -f "$dir/link.ready" ] || { cat "$dir/linkem.log" >&2; exit 1; }

# The LAN client and the servers' addresses.
ip netns add "$NS_C"; ip -n "$NS_C" link set lo up
ip link add c0 netns "$NS_C" type veth peer f0 netns "$NS_A"
ip -n "$NS_C" addr add 10.200.1.2/24 dev c0; ip -n "$NS_C" addr add fd00:c7::2/64 dev c0 nodad
ip -n "$NS_A" addr add 10.200.1.1/24 dev f0; ip -n "$NS_A" addr add fd00:c7::1/64 dev f0 nodad
ip -n "$NS_C" link set c0 up; ip -n "$NS_A" link set f0 up
ip -n "$NS_C" route add default via 10.200.1.1; ip -n "$NS_C" -6 route add default via fd00:c7::1
ip -n "$NS_B" addr add 10.200.9.1/32 dev lo; ip -n "$NS_B" addr add fd00:c9::1/128 dev lo nodad
# Until the fresh veth answers neighbour discovery, the client's first solicitation for its
# gateway goes unanswered and is retried a second later: without this wait, a workload
# started at once (the DNS one, on IPv6) measured that second as the tunnel's.
for gw in 10.200.1.1 fd00:c7::1; do
	for _ in $(seq 50); do ip netns exec "$NS_C" ping -c 1 -W 1 "$gw" > /dev/null 2>&1 && break; sleep 0.1; done
done

# Servers in B: HTTP (python's http.server, dual-stack on ::) and rsyncd.
(cd "$dir/www" && exec ip netns exec "$NS_B" python3 -m http.server "$HTTP" --bind :: >/dev/null 2>&1) &
pids+=($!)
cat > "$dir/rsyncd.conf" <<EOF
pid file = $dir/rsyncd.pid
use chroot = no
uid = root
gid = root
[data]
path = $dir/tree
read only = yes
EOF
ip netns exec "$NS_B" rsync --daemon --no-detach --config="$dir/rsyncd.conf" --port=$RSYNC 2> "$dir/rsyncd.log" &
pids+=($!)
# shellcheck disable=SC2086
ip netns exec "$NS_B" "$BIN/ctcp-reverse" ${CTCP_ARGS:-} --listen 10.77.0.2:7000 --psk-file "$dir/key" \
	--metrics-listen 127.0.0.1:9101 --log-level "${RLOG:-warn}" 2> "$dir/reverse.log" &
pids+=($!)
has() { case ",$WORKLOADS," in *",$1,"*) return 0 ;; esac; return 1; }
if has dns; then
	ip netns exec "$NS_B" dnsmasq --keep-in-foreground --conf-file=/dev/null --no-resolv \
		--no-hosts --bind-interfaces --port=53 --user=root --listen-address=10.200.9.1 \
		--listen-address=fd00:c9::1 --local=/ctcp.test/ \
		--host-record=www.ctcp.test,10.77.9.9,fd00:77::9 --pid-file="$dir/dnsmasq.pid" \
		2> "$dir/dnsmasq.log" &
	pids+=($!)
	for _ in $(seq 200); do [ -n "$(ip netns exec "$NS_B" ss -Hlun 'sport = :53')" ] && break; sleep 0.05; done
fi
listening() { [ -n "$(in_ns "$NS_B" ss -Hltn "sport = :$1")" ]; }
for _ in $(seq 200); do listening $HTTP && listening $RSYNC && break; sleep 0.05; done
listening $HTTP && listening $RSYNC || { echo "servers did not start" >&2; exit 1; }
in_ns "$NS_A" sh configs/gateway-tproxy.sh add # the policy routing tproxy needs (redirect ignores it)

rules() { # FILE: the shipped ruleset with this topology's defines
	sed -e 's|^define lan_if = .*|define lan_if = "f0"|' \
		-e "s|^define ctcp_port = .*|define ctcp_port = $PORT|" \
		-e 's|^define reverse_v4 = .*|define reverse_v4 = { 10.77.0.2 }|' \
		-e 's|^define reverse_v6 = .*|define reverse_v6 = { 2001:db8::7 }|' \
		-e 's|^define exempt_v4 = .*|define exempt_v4 = { 127.0.0.0/8, 169.254.0.0/16 }|' \
		-e 's|^define exempt_v6 = .*|define exempt_v6 = { ::1, fe80::/10 }|' "configs/$1" > "$dir/$1"
	in_ns "$NS_A" nft -f "$dir/$1"
}

fwd=
start_forward() { # MODE
	[ -n "$fwd" ] && { kill "$fwd"; wait "$fwd" 2>/dev/null || true; }
	: > "$dir/forward-$1.log"
	local udp=()
	[ "$1" = tproxy ] && has dns && udp=(--transparent-udp-listen "[::]:$PORT")
	# shellcheck disable=SC2086 # CTCP_ARGS: extra flags for both proxies, split on spaces
	ip netns exec "$NS_A" "$BIN/ctcp-forward" ${CTCP_ARGS:-} --peer 10.77.0.2:7000 --psk-file "$dir/key" \
		--listen 10.200.1.1:1080 --transparent-listen "[::]:$PORT" --transparent-mode "$1" \
		"${udp[@]}" --metrics-listen 127.0.0.1:9100 \
		--log-level "${LOG:-info}" 2> "$dir/forward-$1.log" &
	fwd=$!; pids+=($fwd)
	for _ in $(seq 200); do grep -q "tunnel session established" "$dir/forward-$1.log" && return; sleep 0.05; done
	cat "$dir/forward-$1.log" >&2; exit 1
}

rate_bps=$((RATE * 1000 * 1000))
: > "$OUT.tmp"
row() { # mode family workload bytes secs ok
	awk -v m="$1" -v f="$2" -v w="$3" -v b="$4" -v s="$5" -v ok="$6" -v r="$rate_bps" \
		-v l="$LOSS" -v rtt="$RTT" -v seed="$SEED" 'BEGIN {
		g = b * 8 / s; e = g / (r * (1 - l));
		printf "{\"mode\":\"%s\",\"family\":\"%s\",\"workload\":\"%s\",\"bytes\":%d,\"secs\":%.3f,\"goodput_bps\":%.0f,\"efficiency\":%.3f,\"ok\":%s,\"rtt_ms\":%d,\"loss\":%s,\"rate_bps\":%d,\"seed\":%d}\n",
			m, f, w, b, s, g, e, ok, rtt, l, r, seed }' >> "$OUT.tmp"
	tail -1 "$OUT.tmp"
}

curl_row() { # mode family url [curl args...]
	local mode=$1 fam=$2 url=$3; shift 3
	rm -f "$dir/got"
	local w
	w=$(in_ns "$NS_C" curl -sS --max-time "${MAX_TIME:-300}" "$@" -o "$dir/got" -w '%{size_download} %{time_total}' "$url")
	local ok=false
	[ "$(sha256sum < "$dir/got" | cut -d' ' -f1)" = "$want" ] && ok=true
	row "$mode" "$fam" curl $w $ok
}

rsync_row() { # mode family host
	rm -rf "$dir/copy"
	local t0 t1 ok=false
	t0=$(date +%s.%N)
	in_ns "$NS_C" rsync -a --timeout=300 "rsync://$3:$RSYNC/data/" "$dir/copy/"
	t1=$(date +%s.%N)
	diff -r "$dir/tree" "$dir/copy" > /dev/null && ok=true
	row "$1" "$2" rsync "$tree_bytes" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" $ok
}

host() { [ "$1" = 4 ] && echo 10.200.9.1 || echo "[fd00:c9::1]"; }

dns_row() { # mode family server: DNS queries through the gateway, one try each
	local mode=$1 fam=$2 server=$3 kind=A src=10.200.1.2
	[ "$fam" = ipv6 ] && kind=AAAA src=fd00:c7::2
	export NS_C server kind src
	[ "$DNS_WARMUP" -gt 0 ] && seq "$DNS_WARMUP" | xargs -P "$DNS_PAR" -I{} \
		ip netns exec "$NS_C" dig +tries=1 +time=3 +notcp "@$server" www.ctcp.test "$kind" > /dev/null 2>&1 || true
	# CAPTURE=1: packet captures of the LAN veth on both sides ($dir/c0-FAMILY.pcap,
	# f0-FAMILY.pcap; with KEEP=1), started CAPTURE_WAIT seconds (0.5) before the queries.
	if [ -n "${CAPTURE:-}" ]; then
		ip netns exec "$NS_C" tcpdump -i c0 -n -tt -w "$dir/c0-$fam.pcap" > /dev/null 2>&1 & pids+=($!)
		ip netns exec "$NS_A" tcpdump -i f0 -n -tt -w "$dir/f0-$fam.pcap" > /dev/null 2>&1 & pids+=($!)
		sleep ${CAPTURE_WAIT:-0.5}
	fi
	# One line per query: its number and latency in ms, or "lost" (no answer within 3 s).
	# Each query asks from a source port of its own: dig's random ports repeat (19 in 1,000),
	# and two digs on one port at once (their sockets allow it) had the first one's answer
	# delivered to the second, which dropped it, so the first counted as lost.
	seq "$DNS" | xargs -P "$DNS_PAR" -I{} sh -c \
		'out=$(ip netns exec "$NS_C" dig -b "$src#$((20000 + {} % 40000))" +tries=1 +time=3 +notcp "@$server" www.ctcp.test "$kind" 2>&1)
		 case "$out" in *"status: NOERROR"*"ANSWER SECTION"*) echo "{} $(echo "$out" | sed -n "s/^;; Query time: \([0-9]*\) msec.*/\1/p")" ;; *) echo "{} lost" ;; esac' \
		> "$dir/dns-$mode-$fam.txt"
	# Both ends' full metrics (KEEP=1 keeps them): which direction lost a query, and where.
	in_ns "$NS_A" curl -s http://127.0.0.1:9100/metrics > "$dir/dns-$mode-$fam.forward-metrics" || true
	in_ns "$NS_B" curl -s http://127.0.0.1:9101/metrics > "$dir/dns-$mode-$fam.reverse-metrics" || true
	grep '^ctcp_udp_' "$dir/dns-$mode-$fam.forward-metrics" > "$dir/dns-$mode-$fam.metrics" || true
	python3 - "$dir/dns-$mode-$fam.txt" "$mode" "$fam" "$RTT" "$LOSS" "$SEED" "$DNS_PAR" "$DNS_WARMUP" >> "$OUT.tmp" <<'PY'
import json, sys
path, mode, fam, rtt, loss, seed, par, warm = sys.argv[1:]
vals = [l.split()[-1] for l in open(path) if l.strip()]
ms = sorted(float(v) for v in vals if v != "lost")
n = len(vals)
allv = ms + [float("inf")] * (n - len(ms))  # a lost query is slower than any answer
def pct(p):
    return allv[min(n - 1, int(p * n))] if n else None
row = {"mode": mode, "family": fam, "workload": "dns", "warmup": int(warm), "queries": n, "answered": len(ms),
       "answered_frac": round(len(ms) / n, 4) if n else 0,
       "p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_answered_ms": ms[-1] if ms else None,
       "parallel": int(par), "rtt_ms": int(rtt), "loss": float(loss), "seed": int(seed)}
print(json.dumps(row).replace("Infinity", "null"))
PY
	tail -1 "$OUT.tmp"
}

for mode in ${MODES//,/ }; do
	rules "gateway-$mode.nft"
	start_forward "$mode"
	for fam in ${FAMILIES//,/ }; do
		h=$(host "$fam")
		has curl && curl_row "$mode" "ipv$fam" "http://$h:$HTTP/file.bin" --noproxy '*'
		has rsync && rsync_row "$mode" "ipv$fam" "$h"
		[ "$mode" = tproxy ] && has dns && dns_row "$mode" "ipv$fam" "$(host "$fam" | tr -d '[]')"
	done
	if [ "$mode" = "${MODES%%,*}" ] && has curl; then
		# Baseline: the same download through the SOCKS listener (exempted by the rules:
		# the forward's own address).
		curl_row socks ipv4 "http://10.200.9.1:$HTTP/file.bin" --socks5-hostname 10.200.1.1:1080
	fi
done
if [ "$KERNEL" -gt 0 ]; then
	# What the LAN gets without ctcp: the gateway routes, kernel TCP (Cubic, the sender in
	# B) runs end to end over the lossy link. Cut off after KERNEL seconds, as netbench's
	# kernel cells are: the row's goodput is that of the bytes received by then.
	in_ns "$NS_A" nft delete table inet ctcp_gateway
	in_ns "$NS_A" sysctl -qw net.ipv4.ip_forward=1
	ip -n "$NS_A" route add 10.200.9.0/24 dev linkem0
	ip -n "$NS_B" route add 10.200.1.0/24 dev linkem0
	for ns in "$NS_C" "$NS_B"; do
		in_ns "$ns" sysctl -qw net.ipv4.tcp_congestion_control=cubic
		in_ns "$ns" sysctl -qw net.ipv4.tcp_rmem="4096 131072 16777216"
		in_ns "$ns" sysctl -qw net.ipv4.tcp_wmem="4096 131072 16777216"
	done
	rm -f "$dir/got"
	w=$(in_ns "$NS_C" curl -sS --max-time "$KERNEL" --noproxy '*' -o "$dir/got" \
		-w '%{size_download} %{time_total}' "http://10.200.9.1:$HTTP/file.bin" 2>/dev/null || true)
	ok=false
	[ "$(sha256sum < "$dir/got" | cut -d' ' -f1)" = "$want" ] && ok=true
	row routed-cubic ipv4 curl ${w:-0 1} $ok
fi
mkdir -p "$(dirname "$OUT")"
mv "$OUT.tmp" "$OUT"
echo
echo "link: ${RATE} Mbit/s, RTT ${RTT} ms, loss ${LOSS} (both ways), queue ${queue} B, seed ${SEED}; file ${MB} MB; tree ${FILES} files + 1 MB (${tree_bytes} B)"
printf '%-13s %-5s %-6s %10s %8s %12s %6s %s\n' mode fam work bytes secs Mbit/s eff ok
python3 - "$OUT" <<'EOF'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["workload"] == "dns":
        print(f"{r['mode']:<13} {r['family']:<5} dns    {r['answered']}/{r['queries']} answered ({r['answered_frac']:.4f}), p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms, max answered {r['max_answered_ms']} ms")
        continue
    print(f"{r['mode']:<13} {r['family']:<5} {r['workload']:<6} {r['bytes']:>10} {r['secs']:>8.2f} {r['goodput_bps']/1e6:>12.2f} {r['efficiency']:>6.3f} {r['ok']}")
EOF
