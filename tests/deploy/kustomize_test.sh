#!/usr/bin/env bash
# deploy/k8s: `kubectl kustomize` renders each overlay (eks, kind), and the rendered objects
# are checked (check_manifests.py): kinds, the coordinator StatefulSet with its PVC and
# grpc.health.v1 probes, the worker DaemonSet's GPU/EFA requests, host networking,
# memory-backed /dev/shm and the shared volume at the coordinator's path root, Secrets,
# PDB, NetworkPolicy, ServiceMonitor, the Grafana dashboard, and that every image, port,
# program and flag the manifests name exists in the images build.sh makes and in the
# binaries of the build. make-secrets.sh's Secrets are checked too.
#
#   tests/deploy/kustomize_test.sh BUILD_DIR/bin
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="$(cd "${1:?usage: kustomize_test.sh BUILD_DIR/bin}" && pwd)"
kubectl="${KUBECTL:-kubectl}"
command -v "$kubectl" >/dev/null || { echo "SKIP: no kubectl (Debian's kubernetes-client)"; exit 77; }
work="$(mktemp -d /tmp/llamafleet-kustomize.XXXXXX)"
trap 'rm -rf "$work"' EXIT
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
