# Sourced by deploy/containers/build.sh, deploy/podman/*.sh and tests/deploy: the podman
# options every container and build here needs.
#  - The OCI runtime: runc where installed (crun refuses some kernels' hybrid cgroup
#    layouts); LLAMAFLEET_OCI_RUNTIME overrides.
#  - Resource limits at or below this machine's hard limits: podman's defaults ask for
#    more than an unprivileged-limits host permits, and raising a hard limit is refused.
podman_runtime_opts=()
oci_runtime="${LLAMAFLEET_OCI_RUNTIME:-}"
if [ -z "$oci_runtime" ] && command -v runc >/dev/null 2>&1; then oci_runtime=runc; fi
[ -z "$oci_runtime" ] || podman_runtime_opts+=(--runtime "$oci_runtime")

podman_ulimit_opts=()
_lf_limit() {  # _lf_limit HARD WANT: the smaller, "unlimited" counting as infinite
  if [ "$1" = unlimited ] || [ "$1" -gt "$2" ]; then echo "$2"; else echo "$1"; fi
}
_lf_nofile=$(_lf_limit "$(ulimit -Hn)" 65536)
_lf_nproc=$(_lf_limit "$(ulimit -Hu)" 32768)  # more fails here although below -Hu
podman_ulimit_opts+=(--ulimit "nofile=$_lf_nofile:$_lf_nofile" --ulimit "nproc=$_lf_nproc:$_lf_nproc")
unset _lf_nofile _lf_nproc
