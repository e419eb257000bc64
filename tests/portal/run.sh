#!/usr/bin/env bash
# Browser test of the portal (portal_test.mjs) against a real llamafleet-coordinator and
# a real llamafleet-worker with one CPU rank (and, when the test asks, a second one running
# samples_trainer.sh), started here on free ports with a fresh data directory, and stopped
# on every exit path. Screenshots (and the process logs) go
# to $ARTIFACT_DIR (default build/test-artifacts/portal).
#
#   tests/portal/run.sh BIN_DIR          # BIN_DIR holds llamafleet-coordinator, -worker, -train
#   tests/portal/run.sh --install        # only install the npm dependency (tests/run.sh does)
#
# Needs node + npm (playwright-core is installed from package-lock.json with `npm ci` into
# tests/portal/node_modules on first use) and Debian's chromium ($CHROMIUM to override).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
fail() { echo "portal test: $*" >&2; exit 1; }

# playwright-core, exactly as package-lock.json says, into tests/portal/node_modules (git-
# ignored); again whenever the lock file changed since the last install.
install_npm_deps() {
  command -v npm >/dev/null || fail "npm is missing (deploy/local/install-deps.sh installs it)"
  if [ ! -d "$here/node_modules/playwright-core" ] ||
     ! cmp -s "$here/package-lock.json" "$here/node_modules/.installed-package-lock.json"; then
    (cd "$here" && npm ci --no-audit --no-fund --loglevel=error) || fail "npm ci failed"
    cp "$here/package-lock.json" "$here/node_modules/.installed-package-lock.json"
  fi
}
if [ "${1:-}" = --install ]; then
  install_npm_deps
  exit 0
fi

bin="$(cd "${1:?usage: tests/portal/run.sh BIN_DIR}" && pwd)"
artifacts="${ARTIFACT_DIR:-$repo/build/test-artifacts/portal}"
chromium="${CHROMIUM:-/usr/bin/chromium}"

for tool in node npm; do
  command -v "$tool" >/dev/null || fail "$tool is missing (deploy/local/install-deps.sh installs it)"
done
[ -x "$chromium" ] || fail "$chromium is missing (apt-get install chromium, or set CHROMIUM)"
for b in llamafleet-coordinator llamafleet-worker llamafleet-train; do
  [ -x "$bin/$b" ] || fail "$bin/$b is missing; build it first"
done
install_npm_deps
mkdir -p "$artifacts"
artifacts="$(cd "$artifacts" && pwd)"
rm -f "$artifacts"/*.png "$artifacts"/*.log

tmp="$(mktemp -d "${TMPDIR:-/tmp}/llamafleet-portal.XXXXXX")"
pids=()
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[$i]}" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  cp "$tmp"/*.log "$artifacts"/ 2>/dev/null || true
  if [ "$rc" -ne 0 ]; then
    for f in "$tmp"/*.log; do
      [ -f "$f" ] || continue
      echo "---- tail of $(basename "$f")" >&2
      tail -n 30 "$f" >&2
    done
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Pre-tokenized data (data.format TOKENS: no tokenizer needed), made now: ROWS rows of 33
# ids from a seeded generator. train.jsonl to train on, eval.jsonl for data.eval_path.
make_tokens() {
  node -e '
    let seed = Number(process.argv[3]);
    const rand = () => (seed = (seed * 48271) % 2147483647) / 2147483647;
    const rows = [];
    for (let r = 0; r < Number(process.argv[2]); r++) rows.push(JSON.stringify({input_ids: Array.from({length: 33}, () => 3 + Math.floor(rand() * 500))}));
    require("fs").writeFileSync(process.argv[1], rows.join("\n") + "\n");
  ' "$1" "$2" "$3"
}
make_tokens "$tmp/train.jsonl" 64 7
make_tokens "$tmp/eval.jsonl" 8 11
# Tokens, when the coordinator has `token create`; otherwise auth is off for this run.
coord_dir="$tmp/coordinator"
auth_flag=(--insecure-no-auth)
user_token="" viewer_token=""
if user_token="$(timeout 30 "$bin/llamafleet-coordinator" token create --data-dir "$coord_dir" --user alice --role user 2>>"$tmp/token.log")" &&
   viewer_token="$(timeout 30 "$bin/llamafleet-coordinator" token create --data-dir "$coord_dir" --user victor --role viewer 2>>"$tmp/token.log")" &&
   [ -n "$user_token" ] && [ -n "$viewer_token" ]; then
  auth_flag=()
  echo "portal test: tokens created; auth on"
else
  user_token="" viewer_token=""
  echo "portal test: no 'token create' in this coordinator; running with --insecure-no-auth"
fi

# --no-check-paths: the worker runs jobs as this script's user (root in CI), which no
# submission-time check counts as a job's identity; the trainer checks the paths itself.
no_check=(--no-check-paths)
"$bin/llamafleet-coordinator" --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 --data-dir "$coord_dir" \
  --join-token portal-secret --heartbeat-timeout 10 --cancel-grace 5 --path-root "$tmp" "${auth_flag[@]}" "${no_check[@]}" \
  >"$tmp/coordinator.out" 2>"$tmp/coordinator.log" &
pids+=($!)
grpc="" http=""
for _ in $(seq 1 150); do
  grpc="$(sed -n 's/^listening on //p' "$tmp/coordinator.out" | head -n1)"
  http="$(sed -n 's/^http listening on //p' "$tmp/coordinator.out" | head -n1)"
  [ -n "$grpc" ] && [ -n "$http" ] && break
  kill -0 "${pids[0]}" 2>/dev/null || fail "the coordinator exited early"
  sleep 0.1
done
[ -n "$grpc" ] && [ -n "$http" ] || fail "the coordinator did not print both listening lines: $(cat "$tmp/coordinator.out")"
echo "portal test: coordinator gRPC $grpc, HTTP $http"

OMP_NUM_THREADS=1 "$bin/llamafleet-worker" --coordinator "$grpc" --join-token portal-secret \
  --data-dir "$tmp/w1" --cpu-ranks 1 --name w1 --address 127.0.0.1 --trainer "$bin/llamafleet-train" \
  --heartbeat-interval 1 --run-as "$(id -u)" 2>"$tmp/worker-w1.log" &
pids+=($!)

# A second worker, w2 (label role=samples), whose trainer is a script printing samples and
# DPO rewards (samples_trainer.sh): started once the test creates $tmp/start-w2, after the
# jobs that must run on w1; only a job asking for role=samples goes to it.
(
  while [ ! -e "$tmp/start-w2" ]; do sleep 0.2; done
  exec "$bin/llamafleet-worker" --coordinator "$grpc" --join-token portal-secret \
    --data-dir "$tmp/w2" --cpu-ranks 1 --name w2 --address 127.0.0.1 --trainer "$here/samples_trainer.sh" \
    --labels role=samples --heartbeat-interval 1 --run-as "$(id -u)" 2>"$tmp/worker-w2.log"
) &
pids+=($!)

PORTAL_URL="http://$http" ARTIFACT_DIR="$artifacts" TRAIN_DATA="$tmp/train.jsonl" EVAL_DATA="$tmp/eval.jsonl" PATH_ROOT="$tmp" \
  CHROMIUM="$chromium" \
  TOKEN_USER="$user_token" TOKEN_VIEWER="$viewer_token" \
  node "$here/portal_test.mjs"
echo "portal test: screenshots in $artifacts"
