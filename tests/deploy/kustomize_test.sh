#!/usr/bin/env bash
# deploy/k8s: `kubectl kustomize` renders each overlay (eks, kind), and the rendered objects
# are checked (check_manifests.py): kinds, the coordinator StatefulSet with its PVC and
# grpc.health.v1 probes, the worker DaemonSet's GPU/EFA requests, host networking,
# memory-backed /dev/shm and the shared volume at the coordinator's path root, Secrets,
# PDB, NetworkPolicy, ServiceMonitor, the Grafana dashboard, and that every image, port,
# program and flag the manifests name exists in the images build.sh makes and in the
# binaries of the build. make-secrets.sh's Secrets are checked too, and the probe the
# manifests run answers SERVING from a real coordinator serving TLS with those Secrets'
# certificate (and fails against plaintext and against a closed port).
#
#   tests/deploy/kustomize_test.sh BUILD_DIR/bin
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="$(cd "${1:?usage: kustomize_test.sh BUILD_DIR/bin}" && pwd)"
kubectl="${KUBECTL:-kubectl}"
command -v "$kubectl" >/dev/null || { echo "SKIP: no kubectl (Debian's kubernetes-client)"; exit 77; }
work="$(mktemp -d /tmp/llamafleet-kustomize.XXXXXX)"
coordinator_pid=""
trap '[ -z "$coordinator_pid" ] || kill "$coordinator_pid" 2>/dev/null; rm -rf "$work"' EXIT
"$kubectl" version --client 2>/dev/null | head -1 || true
for overlay in eks kind; do
  "$kubectl" kustomize "$root/deploy/k8s/overlays/$overlay" >"$work/$overlay.yaml" 2>"$work/$overlay.err" ||
    { cat "$work/$overlay.err" >&2; echo "FAIL: kubectl kustomize overlays/$overlay" >&2; exit 1; }
done
"$root/deploy/k8s/make-secrets.sh" --dir "$work/secrets" --dry-run >"$work/secrets.yaml" 2>/dev/null
for b in llamafleet-coordinator llamafleet-worker llamafleet-health-probe; do
  [ -x "$bin/$b" ] || { echo "FAIL: $bin/$b is not built" >&2; exit 1; }
done
"$bin/llamafleet-coordinator" --help >"$work/coordinator.help" 2>&1 || true
"$bin/llamafleet-worker" --help >"$work/worker.help" 2>&1 || true
"$bin/llamafleet-health-probe" --help >"$work/probe.help" 2>&1 || true
/usr/bin/python3 "$root/tests/deploy/check_manifests.py" --root "$root" --work "$work"

# The coordinator's probe, as the pod runs it (LLAMAFLEET_TLS_CA from the pod's env).
"$bin/llamafleet-coordinator" --listen 127.0.0.1:0 --data-dir "$work/coordinator" \
  --tls-cert "$work/secrets/tls.crt" --tls-key "$work/secrets/tls.key" \
  --join-token-file "$work/secrets/join-token" >"$work/coordinator.out" 2>"$work/coordinator.err" &
coordinator_pid=$!
address=""
for _ in $(seq 1 100); do
  address=$(sed -n 's/^listening on //p' "$work/coordinator.out")
  [ -n "$address" ] && break
  sleep 0.1
done
[ -n "$address" ] || { cat "$work/coordinator.err" >&2; echo "FAIL: the coordinator did not start" >&2; exit 1; }
LLAMAFLEET_TLS_CA="$work/secrets/ca.crt" "$bin/llamafleet-health-probe" --quiet --address="$address" \
  --server-name=llamafleet-coordinator --timeout=5 || { echo "FAIL: the probe does not pass against a TLS coordinator" >&2; exit 1; }
if "$bin/llamafleet-health-probe" --quiet --address="$address" --timeout=1 2>/dev/null; then
  echo "FAIL: a plaintext probe passed against a TLS coordinator" >&2; exit 1
fi
kill "$coordinator_pid"; wait "$coordinator_pid" || true; coordinator_pid=""
if "$bin/llamafleet-health-probe" --quiet --address="$address" --timeout=1 2>/dev/null; then
  echo "FAIL: the probe passed with the coordinator stopped" >&2; exit 1
fi
echo "health probe: SERVING over TLS; refused over plaintext and when stopped"
