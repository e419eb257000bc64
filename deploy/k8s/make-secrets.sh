#!/usr/bin/env bash
# Makes the Secrets deploy/k8s expects, with material generated here and never committed:
#   llamafleet-join-token  key join-token: a random shared secret for the workers
#   llamafleet-tls         keys tls.crt, tls.key, ca.crt: a private CA and the coordinator's
#                          certificate for its Service names, localhost and 127.0.0.1
#                          (kubectl port-forward)
# The CA certificate is kept in DIR for clients (LLAMAFLEET_TLS_CA=DIR/ca.crt); the CA key
# too, to renew the certificate; keep DIR private. Re-running keeps an existing CA and
# join token and renews the certificate.
#
#   deploy/k8s/make-secrets.sh --dir DIR [--namespace llamafleet] [--dry-run]
# --dry-run prints the Secrets as YAML instead of applying them with kubectl.
set -euo pipefail
dir=""
namespace=llamafleet
dry_run=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir="$2"; shift ;;
    --namespace) namespace="$2"; shift ;;
    --dry-run) dry_run=1 ;;
    -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
    *) echo "make-secrets.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$dir" ] || { echo "make-secrets.sh: --dir DIR is required (where the CA is kept)" >&2; exit 2; }
[[ "$namespace" =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] || { echo "make-secrets.sh: --namespace: not a namespace name" >&2; exit 2; }
umask 077
mkdir -p "$dir"
quiet() { "$@" >/dev/null 2>&1 || { echo "make-secrets.sh: failed: $*" >&2; exit 1; }; }

[ -s "$dir/join-token" ] || head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/join-token"
if [ ! -s "$dir/ca.key" ]; then
  quiet openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
    -subj "/CN=llamafleet CA" -keyout "$dir/ca.key" -out "$dir/ca.crt" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
fi
svc=llamafleet-coordinator
sans="DNS:$svc,DNS:$svc.$namespace,DNS:$svc.$namespace.svc,DNS:$svc.$namespace.svc.cluster.local"
sans="$sans,DNS:$svc-0.$svc.$namespace.svc.cluster.local,DNS:localhost,IP:127.0.0.1"
quiet openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$svc" \
  -keyout "$dir/tls.key" -out "$dir/tls.csr"
printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' \
  "$sans" >"$dir/tls.ext"
quiet openssl x509 -req -in "$dir/tls.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
  -days 825 -extfile "$dir/tls.ext" -out "$dir/tls.crt"
rm -f "$dir/tls.csr" "$dir/tls.ext"

secrets() {
  kubectl create secret generic llamafleet-join-token --namespace "$namespace" \
    --from-file=join-token="$dir/join-token" --dry-run=client -o yaml
  echo ---
  kubectl create secret generic llamafleet-tls --namespace "$namespace" \
    --from-file=tls.crt="$dir/tls.crt" --from-file=tls.key="$dir/tls.key" \
    --from-file=ca.crt="$dir/ca.crt" --dry-run=client -o yaml
}
if ((dry_run)); then
  secrets
else
  secrets | kubectl apply -f -
  echo "make-secrets.sh: Secrets applied in namespace $namespace; clients: LLAMAFLEET_TLS_CA=$dir/ca.crt" >&2
fi
