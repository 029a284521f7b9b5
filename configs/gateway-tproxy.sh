#!/bin/sh
# Policy routing for ctcp-forward's TPROXY mode (configs/gateway-tproxy.nft): packets the
# nftables rules mark are delivered to the local transparent listener instead of being
# forwarded. Run once per boot (e.g. from a systemd ExecStartPre= or the network
# configuration); `gateway-tproxy.sh del` removes it. MARK and TABLE must match
# tproxy_mark in gateway-tproxy.nft.
set -eu
MARK=${MARK:-0x1}
TABLE=${TABLE:-100}
case "${1:-add}" in
add)
	ip rule add fwmark "$MARK" lookup "$TABLE"
	ip route add local 0.0.0.0/0 dev lo table "$TABLE"
	ip -6 rule add fwmark "$MARK" lookup "$TABLE"
	ip -6 route add local ::/0 dev lo table "$TABLE"
	;;
del)
	ip rule del fwmark "$MARK" lookup "$TABLE" || true
	ip route flush table "$TABLE" || true
	ip -6 rule del fwmark "$MARK" lookup "$TABLE" || true
	ip -6 route flush table "$TABLE" || true
	;;
*)
	echo "usage: $0 [add|del]" >&2
	exit 2
	;;
esac
