#!/usr/bin/env bash
# Installs the .debs from packaging/build-debs.sh and checks them as an operator would:
# the installed binaries run the packaged configurations (with a key made by keygen),
# the configurations are conffiles, the man pages the units point at are there, and
# `systemd-analyze verify` accepts the installed units. Removes the packages at the end.
# Needs root (dpkg -i).
set -euo pipefail
cd "$(dirname "$0")/.."

target="${CARGO_TARGET_DIR:-target}"
work="$(mktemp -d)"
cleanup() {
  dpkg --purge ctcp-forward ctcp-reverse >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

dpkg -i "$target"/debian/ctcp-forward_*.deb "$target"/debian/ctcp-reverse_*.deb >/dev/null

for role in forward reverse; do
  bin="ctcp-$role"
  test -x "/usr/bin/$bin"
  dpkg-query -W -f='${Conffiles}\n' "$bin" | grep -q "/etc/ctcp/$role.toml" \
    || { echo "/etc/ctcp/$role.toml is not a conffile of $bin" >&2; exit 1; }
  for page in "$bin" "$bin-status" "$bin-keygen"; do
    test -f "/usr/share/man/man1/$page.1.gz" || { echo "no man page $page(1)" >&2; exit 1; }
  done
  test -f "/usr/share/bash-completion/completions/$bin"
  grep -qx "Documentation=man:$bin(1)" "/usr/lib/systemd/system/$bin.service"
  grep -q "^ExecStart=/usr/bin/$bin " "/usr/lib/systemd/system/$bin.service"
done

# The gateway rulesets ship as examples (README "Gateway for a whole network").
for f in gateway-redirect.nft gateway-tproxy.nft gateway-tproxy.sh; do
  test -f "/usr/share/doc/ctcp-forward/examples/$f" || { echo "no example $f" >&2; exit 1; }
done
# The balancer ruleset for several reverse instances (README "Several reverse gateways
# behind one address").
for f in reverse-balancer.nft reverse-balancer.sh; do
  test -f "/usr/share/doc/ctcp-reverse/examples/$f" || { echo "no example $f" >&2; exit 1; }
done

# The packaged configurations, as the units run them, with a key from keygen.
/usr/bin/ctcp-forward keygen --out "$work/psk" >/dev/null
/usr/bin/ctcp-forward --check-config -c /etc/ctcp/forward.toml --psk-file "$work/psk"
/usr/bin/ctcp-reverse --check-config -c /etc/ctcp/reverse.toml --psk-file "$work/psk"
# status names the key to set when the packaged configuration has no metrics listener.
if out="$(/usr/bin/ctcp-forward status 2>&1)"; then
  echo "status succeeded without a metrics listener: $out" >&2; exit 1
fi
grep -q "no metrics listener configured: set metrics_listen" <<<"$out" || { echo "$out" >&2; exit 1; }

# Whether systemd-analyze can verify anything here (some containers cannot): a minimal
# valid unit must pass before ours are judged.
cat >"$work/ctcp-probe.service" <<'UNIT'
[Service]
Type=oneshot
ExecStart=/bin/true
UNIT
if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "systemd-analyze not available: unit verification skipped"
elif ! systemd-analyze verify "$work/ctcp-probe.service" >/dev/null 2>&1; then
  echo "systemd-analyze cannot verify units in this environment: unit verification skipped"
else
  # LoadCredential= names /etc/ctcp/psk: give verify one, as an operator would.
  made_psk=""
  if [ ! -e /etc/ctcp/psk ]; then cp "$work/psk" /etc/ctcp/psk; made_psk=1; fi
  set +e
  verify="$(systemd-analyze verify /usr/lib/systemd/system/ctcp-forward.service \
    /usr/lib/systemd/system/ctcp-reverse.service 2>&1)"
  rc=$?
  set -e
  [ -n "$made_psk" ] && rm -f /etc/ctcp/psk
  if [ $rc -ne 0 ]; then
    echo "$verify" >&2
    echo "systemd-analyze verify failed" >&2
    exit 1
  fi
  [ -z "$verify" ] || echo "$verify"
  echo "systemd-analyze verify: both units OK"
fi
echo "packages OK"
