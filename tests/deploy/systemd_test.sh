#!/usr/bin/env bash
# deploy/systemd: install.sh puts the build and the units into a scratch root (--root), and
# `systemd-analyze verify` checks the installed units there: syntax, every key known (any
# warning fails the test), ExecStart programs present and executable. `systemd-analyze
# security --offline` guards the hardening: the coordinator must stay at exposure <= 2.0
# ("OK"), the worker (root, GPUs, EFA) at <= 6.0. It also checks that install.sh keeps an
# operator's existing configuration and refuses bad arguments.
#
#   tests/deploy/systemd_test.sh BUILD_DIR/bin
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="$(cd "${1:?usage: systemd_test.sh BUILD_DIR/bin}" && pwd)"
command -v systemd-analyze >/dev/null || { echo "SKIP: systemd-analyze is not installed"; exit 77; }
work="$(mktemp -d /tmp/llamafleet-systemd.XXXXXX)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

dest="$work/root"
"$root/deploy/systemd/install.sh" --build-dir "$(dirname "$bin")" --root "$dest" 2>"$work/install.log" ||
  { cat "$work/install.log" >&2; fail "install.sh failed"; }
for f in opt/llamafleet/bin/llamafleet opt/llamafleet/bin/llamafleet-coordinator \
  opt/llamafleet/bin/llamafleet-worker opt/llamafleet/bin/llamafleet-train \
  opt/llamafleet/bin/libllamafleet_spm.so opt/llamafleet/libexec/llamafleet-worker-start \
  etc/llamafleet/coordinator.yaml etc/llamafleet/coordinator.env etc/llamafleet/worker.env \
  etc/llamafleet/join-token; do
  [ -e "$dest/$f" ] || fail "install.sh did not install /$f"
done
[ "$(stat -c %a "$dest/etc/llamafleet/join-token")" = 600 ] || fail "join-token is not 0600 in a --root install"
[ "$(wc -c <"$dest/etc/llamafleet/join-token")" = 64 ] || fail "join-token is not 32 random bytes in hex"

# The units are verified against this machine's own systemd units (targets they name).
mkdir -p "$dest/usr/lib/systemd"
cp -a /lib/systemd/system "$dest/usr/lib/systemd/"
units=("$dest/etc/systemd/system/llamafleet-coordinator.service" "$dest/etc/systemd/system/llamafleet-worker.service")
out=$(cd "$dest" && systemd-analyze verify --root="$dest" "${units[@]}" 2>&1) || fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify warned: $out"
echo "systemd-analyze verify: both units clean"

exposure() {  # exposure UNIT: the overall exposure score, e.g. 1.2
  (cd "$dest" && systemd-analyze security --offline=true --root="$dest" "$1" 2>&1) |
    sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p'
}
c=$(exposure "${units[0]}")
w=$(exposure "${units[1]}")
echo "exposure: coordinator $c, worker $w"
[ -n "$c" ] && [ -n "$w" ] || fail "no exposure score from systemd-analyze security"
awk -v c="$c" -v w="$w" 'BEGIN { exit !(c <= 2.0 && w <= 6.0) }' ||
  fail "hardening regressed: coordinator $c (must be <= 2.0), worker $w (must be <= 6.0)"

# A verify that would catch a broken unit: a misspelt key is reported.
sed 's/^ProtectHome=/ProtectHom=/' "${units[0]}" >"$dest/etc/systemd/system/broken.service"
out=$(cd "$dest" && systemd-analyze verify --root="$dest" "$dest/etc/systemd/system/broken.service" 2>&1) || true
grep -q "Unknown key" <<<"$out" || fail "systemd-analyze verify did not notice a misspelt key: $out"

# Re-running keeps the operator's configuration and token.
echo "LLAMAFLEET_COORDINATOR=edited:50051" >"$dest/etc/llamafleet/worker.env"
token=$(cat "$dest/etc/llamafleet/join-token")
"$root/deploy/systemd/install.sh" --build-dir "$(dirname "$bin")" --root "$dest" 2>/dev/null
grep -q edited "$dest/etc/llamafleet/worker.env" || fail "install.sh overwrote worker.env"
[ "$(cat "$dest/etc/llamafleet/join-token")" = "$token" ] || fail "install.sh replaced the join token"

# Bad arguments are refused, naming the flag, and install nothing.
if "$root/deploy/systemd/install.sh" --root "$work/other" --role gpu 2>"$work/err"; then fail "--role gpu accepted"; fi
grep -q -- "--role" "$work/err" || fail "the error does not name --role: $(cat "$work/err")"
[ ! -e "$work/other" ] || fail "a refused install wrote files"
echo "passed"
