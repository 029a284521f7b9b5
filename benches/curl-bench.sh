#!/usr/bin/env bash
# One `curl --socks5-hostname` download through the real ctcp-forward / ctcp-reverse
# binaries on loopback (embedded defaults: coding and AES-256-GCM on), from a local HTTP
# server; prints the rate, both proxies' CPU seconds per 100 MiB, and checks SHA-256.
#   cargo build --release --locked -p ctcp-forward -p ctcp-reverse && benches/curl-bench.sh [MB]
# RELAYS=N puts N relays (`ctcp-reverse --next-hop`) between them: forward → relay → … →
# reverse, one segment more per relay (each its own session; the same key on all of them).
# DIRECT=1 also fetches the file straight from the origin (loopback TCP, no proxies) in the
# same run, into a file as the tunnel's download is, and prints that rate and the tunnel's
# share of it.
# PERF=1 (root, perf installed) counts each proxy's CPU time, context switches and syscalls
# (UDP sends and receives, epoll waits, eventfd wake-ups, TCP reads and writes) during the
# download with `perf stat` and prints them per 100 MiB.
# BOUND=1 also measures the origin's and curl's CPU (the load generators share the machine
# with the proxies) and prints the rate that all the machine's cores could carry at the
# measured CPU per byte of the four processes (and of the two, for the direct fetch).
set -euo pipefail
cd "$(dirname "$0")/.."
MB=${1:-100}
RELAYS=${RELAYS:-0}
BIN=${BIN:-target/release}  # BIN=dir compares another build
DIRECT=${DIRECT:-0}
BOUND=${BOUND:-0}
PERF=${PERF:-0}  # PERF=1: perf stat on both proxies around the download (root), counts per 100 MiB
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT

head -c $((MB * 1000 * 1000)) /dev/urandom > "$dir/file"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/key"; chmod 600 "$dir/key"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
HTTP=$(free_port); UDP=$(free_port); SOCKS=$(free_port)

(cd "$dir" && exec python3 -m http.server "$HTTP" --bind 127.0.0.1 >/dev/null 2>&1) & pids+=($!); origin=$!
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
# CPU seconds of this shell's reaped children (curl, through the command substitution),
# into $children: `times` must run in this shell, not in a substitution's subshell.
children_cpu() {
  times > "$dir/times"
  children=$(awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); sub("s", "", a[2]); t += a[1] * 60 + a[2] } print t }' "$dir/times")
}
o0=$(cpu $origin); children_cpu; c0=$children
events=task-clock,context-switches,raw_syscalls:sys_enter,syscalls:sys_enter_sendmsg,syscalls:sys_enter_recvmmsg,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_write,syscalls:sys_enter_recvfrom,syscalls:sys_enter_sendto
perfs=()
if [ "$PERF" = 1 ]; then
  perf stat -x, -o "$dir/perf-fwd" -e "$events" -p "$fwd" & perfs+=($!)
  perf stat -x, -o "$dir/perf-rev" -e "$events" -p "$rev" & perfs+=($!)
  sleep 0.5 # attached before the download starts
fi
f0=$(cpu $fwd); r0=$(cpu $rev); m0=$(relay_cpu)
rate=$(curl -sf --socks5-hostname "127.0.0.1:$SOCKS" -o "$dir/got" -w '%{speed_download}' "$url")
f1=$(cpu $fwd); r1=$(cpu $rev); m1=$(relay_cpu)
if [ "$PERF" = 1 ]; then
  kill -INT "${perfs[@]}"; wait "${perfs[@]}" || true
  for side in fwd rev; do
    grep -v '^#' "$dir/perf-$side" | awk -F, -v mb="$MB" -v side="$side" 'NF > 2 {
      v[$3] = $1 } END { per = 104.8576 / mb;
      printf "perf %s per 100 MiB: task-clock %.0f ms, context switches %.0f, syscalls %.0f: UDP sendmsg %.0f, recvmmsg %.0f, epoll_wait %.0f, write %.0f, TCP recvfrom %.0f, sendto %.0f\n",
        side == "fwd" ? "forward" : "reverse", v["task-clock"] * per, v["context-switches"] * per, v["raw_syscalls:sys_enter"] * per,
        v["syscalls:sys_enter_sendmsg"] * per, v["syscalls:sys_enter_recvmmsg"] * per, v["syscalls:sys_enter_epoll_wait"] * per,
        v["syscalls:sys_enter_write"] * per, v["syscalls:sys_enter_recvfrom"] * per, v["syscalls:sys_enter_sendto"] * per }'
  done
fi
o1=$(cpu $origin); children_cpu; c1=$children
[ "$(sha256sum < "$dir/got")" = "$(sha256sum < "$dir/file")" ] || { echo "SHA-256 MISMATCH" >&2; exit 1; }
awk -v r="$rate" -v mb="$MB" -v f="$((f1 - f0))" -v v="$((r1 - r0))" -v m="$((m1 - m0))" -v n="$RELAYS" 'BEGIN {
  per = 104.8576 / mb / 100;   # ticks (1/100 s) -> s per 100 MiB
  relays = n > 0 ? sprintf(", %d relays %.2f s", n, m * per) : "";
  printf "curl --socks5-hostname: %d MB in %.2f s = %.1f MB/s; CPU per 100 MiB: forward %.2f s, reverse %.2f s%s, all %.2f s; SHA-256 ok\n",
    mb, mb * 1e6 / r, r / 1e6, f * per, v * per, relays, (f + v + m) * per }'
if [ "$BOUND" = 1 ]; then
  awk -v mb="$MB" -v f="$((f1 - f0))" -v v="$((r1 - r0))" -v m="$((m1 - m0))" -v o="$((o1 - o0))" -v c="$(awk -v a="$c0" -v b="$c1" 'BEGIN { print b - a }')" -v cores="$(nproc)" 'BEGIN {
    per = 104.8576 / mb;   # seconds -> s per 100 MiB
    all = (f + v + m) / 100 * per + o / 100 * per + c * per;
    printf "CPU per 100 MiB: origin %.2f s, curl %.2f s; all processes %.2f s: %d cores carry at most %.0f MB/s\n",
      o / 100 * per, c * per, all, cores, cores * 104.8576 / all }'
fi
if [ "$DIRECT" = 1 ]; then
  o0=$(cpu $origin); children_cpu; c0=$children
  # Written to a file like the tunnel's download (and checked), so both fetches do the
  # same client work: curl's writes to /dev/null cost less than a file's.
  rm -f "$dir/got"
  direct=$(curl -sf -o "$dir/got" -w '%{speed_download}' "$url")
  o1=$(cpu $origin); children_cpu; c1=$children
  [ "$(sha256sum < "$dir/got")" = "$(sha256sum < "$dir/file")" ] || { echo "SHA-256 MISMATCH (direct)" >&2; exit 1; }
  awk -v r="$rate" -v d="$direct" 'BEGIN { printf "direct loopback TCP: %.1f MB/s; tunnel / direct = %.2f\n", d / 1e6, r / d }'
  if [ "$BOUND" = 1 ]; then
    awk -v mb="$MB" -v o="$((o1 - o0))" -v c="$(awk -v a="$c0" -v b="$c1" 'BEGIN { print b - a }')" -v cores="$(nproc)" 'BEGIN {
      per = 104.8576 / mb; all = o / 100 * per + c * per;
      printf "direct CPU per 100 MiB: origin %.2f s, curl %.2f s: %d cores carry at most %.0f MB/s\n",
        o / 100 * per, c * per, cores, cores * 104.8576 / all }'
  fi
fi
