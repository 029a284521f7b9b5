#!/usr/bin/env bash
# Issue 26's stuck session: one long `curl --socks5-hostname` download (a sparse 40 GB file
# from a Python HTTP origin) through one forward/reverse pair on loopback; after WARM s,
# PER `yes` busy loops per core (pinned with taskset, at nice NICE) for LOAD s; then AFTER
# s more. Prints each second the reverse's (the sender's) stream bytes sent, both proxies'
# CPU per 100 MiB and the session's srtt, min RTT, window and loss state from its metrics.
#   cargo build --release --locked -p ctcp-forward -p ctcp-reverse && \
#   NICE=-19 PER=3 WARM=4 LOAD=20 AFTER=15 benches/stuck-session.sh
# BIN=dir runs another build's binaries (default target/release).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release}
WARM=${WARM:-8}; LOAD=${LOAD:-20}; AFTER=${AFTER:-20}
dir=$(mktemp -d); pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$dir"; }
trap cleanup EXIT
truncate -s 40G $dir/file; echo hi > $dir/ready
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > $dir/key; chmod 600 $dir/key
fp() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
HTTP=$(fp); UDP=$(fp); SOCKS=$(fp); MR=$(fp); MF=$(fp)
(cd $dir && exec python3 -m http.server $HTTP --bind 127.0.0.1 >/dev/null 2>&1) & pids+=($!)
$BIN/ctcp-reverse --listen 127.0.0.1:$UDP --psk-file $dir/key --allow 127.0.0.1,$HTTP --metrics-listen 127.0.0.1:$MR --log-level warn & pids+=($!); rev=$!
$BIN/ctcp-forward --listen 127.0.0.1:$SOCKS --peer 127.0.0.1:$UDP --psk-file $dir/key --metrics-listen 127.0.0.1:$MF --log-level warn & pids+=($!); fwd=$!
url=http://localhost:$HTTP/file
for _ in $(seq 100); do curl -sf --socks5-hostname 127.0.0.1:$SOCKS -o /dev/null http://localhost:$HTTP/ready && break; sleep 0.1; done
curl -s --socks5-hostname 127.0.0.1:$SOCKS -o /dev/null $url & pids+=($!)
cpu() { awk '{print $14 + $15}' /proc/$1/stat; }
bytes() { curl -s -m 2 127.0.0.1:$MR/metrics | awk '/^ctcp_process_stream_bytes_sent_total/ {print $2}'; }
met() { curl -s -m 2 127.0.0.1:$MR/metrics | grep -E '^ctcp_(srtt_seconds|min_rtt_seconds|cwnd_packets|loss_estimate|repair_ratio|packets_lost_total)\{' | sed 's/{[^}]*}//; s/ctcp_//; s/_seconds//' | awk '{printf "%s=%.4g ", $1, $2}'; }
b0=$(bytes); c0=$(( $(cpu $fwd) + $(cpu $rev) )); t=0
for phase in warm:$WARM load:$LOAD after:$AFTER; do
  name=${phase%%:*}; n=${phase##*:}
  if [ $name = load ]; then
    for k in $(seq ${PER:-1}); do taskset -c 0 nice -n ${NICE:-0} timeout $LOAD yes > /dev/null & taskset -c 1 nice -n ${NICE:-0} timeout $LOAD yes > /dev/null & done
  fi
  for i in $(seq $n); do
    sleep 1; t=$((t+1))
    b1=$(bytes); c1=$(( $(cpu $fwd) + $(cpu $rev) ))
    awk -v b=$((b1-b0)) -v c=$((c1-c0)) -v n=$name -v t=$t 'BEGIN{printf "%-5s %3d s %7.1f MB/s cpu/100MiB %5.2f | ", n, t, b/1e6, (b>0? c/100*104857600/b : 0)}'
    met; echo
    b0=$b1; c0=$c1
  done
done
