#!/bin/sh
# Points the buckets of configs/reverse-balancer.nft at ctcp-reverse instances: run it on
# the balancer host when an instance goes down or comes back (by hand, or from whatever
# health check watches the instances).
#
#   reverse-balancer.sh show              the buckets and the instance each goes to
#   reverse-balancer.sh set BUCKET ADDR   send bucket BUCKET's sessions to ADDR
#
# `set` replaces one map element in one nft transaction: datagrams of other buckets are
# not disturbed, and those of BUCKET go to ADDR from the next one on. Sessions that lived
# on BUCKET's previous instance are answered by ADDR with a stateless RESET (every
# instance shares the key) and their forwards reconnect at once.
# TABLE and MAP must match the ruleset (defaults: ctcp_balancer, backends).
set -eu
TABLE=${TABLE:-ctcp_balancer}
MAP=${MAP:-backends}
case "${1:-}" in
show)
	nft list map ip "$TABLE" "$MAP"
	;;
set)
	[ $# -eq 3 ] || { echo "usage: $0 set BUCKET ADDR" >&2; exit 2; }
	nft -f - <<NFT
delete element ip $TABLE $MAP { $2 }
add element ip $TABLE $MAP { $2 : $3 }
NFT
	;;
*)
	echo "usage: $0 show | set BUCKET ADDR" >&2
	exit 2
	;;
esac
