#!/usr/bin/env bash
# One `curl --socks5-hostname` download through the real ctcp-forward / ctcp-reverse
# binaries on loopback (embedded defaults: coding and AES-256-GCM on), from a local HTTP
# server; prints the rate, both proxies' CPU seconds per 100 MiB, and checks SHA-256.
#   cargo build --release --locked -p ctcp-forward -p ctcp-reverse && benches/curl-bench.sh [MB]
# RELAYS=N puts N relays (`ctcp-reverse --next-hop`) between them: forward → relay → … →
# reverse, one segment more per relay (each its own session; the same key on all of them).
# DIRECT=1 also fetches the file straight from the origin (loopback TCP, no proxies) in the
# same run and prints that rate and the tunnel's share of it.
set -euo pipefail
cd "$(dirname "$0")/.."
MB=${1:-100}
RELAYS=${RELAYS:-0}
BIN=${BIN:-target/release}  # BIN=dir compares another build
DIRECT=${DIRECT:-0}
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT

head -c $((MB * 1000 * 1000)) /dev/urandom > "$dir/file"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/key"; chmod 600 "$dir/key"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
HTTP=$(free_port); UDP=$(free_port); SOCKS=$(free_port)

(cd "$dir" && exec python3 -m http.server "$HTTP" --bind 127.0.0.1 >/dev/null 2>&1) & pids+=($!)
# The origin is on loopback, which the reverse's default ACL denies: allow its port.
"$BIN/ctcp-reverse" --listen "127.0.0.1:$UDP" --psk-file "$dir/key" --allow "127.0.0.1,$HTTP" --log-level warn & pids+=($!); rev=$!
relays=()
for _ in $(seq "$RELAYS"); do
  NEXT=$UDP; UDP=$(free_port)
  "$BIN/ctcp-reverse" --listen "127.0.0.1:$UDP" --psk-file "$dir/key" --next-hop "127.0.0.1:$NEXT" --log-level warn & pids+=($!); relays+=($!)
done
"$BIN/ctcp-forward" --listen "127.0.0.1:$SOCKS" --peer "127.0.0.1:$UDP" --psk-file "$dir/key" --log-level warn & pids+=($!); fwd=$!

cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
url="http://localhost:$HTTP/file"
for _ in $(seq 100); do # readiness: the first fetch through the tunnel that works
  curl -sf --socks5-hostname "127.0.0.1:$SOCKS" -r 0-0 -o /dev/null "$url" && break
  sleep 0.1
done
relay_cpu() { local t=0; for p in "${relays[@]}"; do t=$((t + $(cpu "$p"))); done; echo $t; }
f0=$(cpu $fwd); r0=$(cpu $rev); m0=$(relay_cpu)
rate=$(curl -sf --socks5-hostname "127.0.0.1:$SOCKS" -o "$dir/got" -w '%{speed_download}' "$url")
f1=$(cpu $fwd); r1=$(cpu $rev); m1=$(relay_cpu)
[ "$(sha256sum < "$dir/got")" = "$(sha256sum < "$dir/file")" ] || { echo "SHA-256 MISMATCH" >&2; exit 1; }
awk -v r="$rate" -v mb="$MB" -v f="$((f1 - f0))" -v v="$((r1 - r0))" -v m="$((m1 - m0))" -v n="$RELAYS" 'BEGIN {
  per = 104.8576 / mb / 100;   # ticks (1/100 s) -> s per 100 MiB
  relays = n > 0 ? sprintf(", %d relays %.2f s", n, m * per) : "";
  printf "curl --socks5-hostname: %d MB in %.2f s = %.1f MB/s; CPU per 100 MiB: forward %.2f s, reverse %.2f s%s, all %.2f s; SHA-256 ok\n",
    mb, mb * 1e6 / r, r / 1e6, f * per, v * per, relays, (f + v + m) * per }'
if [ "$DIRECT" = 1 ]; then
  direct=$(curl -sf -o /dev/null -w '%{speed_download}' "$url")
  awk -v r="$rate" -v d="$direct" 'BEGIN { printf "direct loopback TCP: %.1f MB/s; tunnel / direct = %.2f\n", d / 1e6, r / d }'
fi
