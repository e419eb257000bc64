"""Checks the rendered deploy/k8s overlays (see kustomize_test.sh). Exit 1 with every
failure listed."""
import argparse
import base64
import json
import os
import re
import subprocess
import sys

import yaml

ap = argparse.ArgumentParser()
ap.add_argument("--root", required=True)
ap.add_argument("--work", required=True)
args = ap.parse_args()
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
    return ok


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def by_kind(docs, kind, name=None):
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs, kind, name, overlay):
    found = by_kind(docs, kind, name)
    check(len(found) == 1, f"{overlay}: expected one {kind} {name}, found {len(found)}")
    return found[0] if found else None


def flags(container):
    """--flag=value / --flag value arguments as {flag: value}."""
    out, argv = {}, container.get("args", []) + container.get("command", [])[1:]
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--"):
            if "=" in a:
                k, v = a.split("=", 1)
            else:
                k, v = a, argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else ""
            out[k] = v
        i += 1
    return out


def text(path):
    with open(path) as f:
        return f.read()


root, work = args.root, args.work
containers_dir = os.path.join(root, "deploy/containers")
build_sh = text(os.path.join(containers_dir, "build.sh"))
# What build.sh puts in each image, and what each Containerfile exposes.
staged = {
    "coordinator": re.search(r"coordinator_bins=\(([^)]*)\)", build_sh).group(1).split(),
    "worker": re.search(r"worker_bins=\(([^)]*)\)", build_sh).group(1).split(),
}
exposed = {
    "coordinator": set(re.findall(r"\d+", " ".join(re.findall(r"^EXPOSE (.*)$", text(os.path.join(containers_dir, "Containerfile.coordinator")), re.M)))),
}
image_names = {"llamafleet-coordinator": "coordinator", "llamafleet-worker": "worker", "llamafleet-worker-cuda": "worker"}
# Flags the binaries know. Flags newer than the binary here (--path-root)
# are allowed.
help_text = {
    "coordinator": text(os.path.join(work, "coordinator.help")),
    "worker": text(os.path.join(work, "worker.help")),
}
pending_flags = {"--path-root"}

for overlay in ("eks", "kind"):
    docs = load(os.path.join(work, overlay + ".yaml"))
    kinds = sorted({d["kind"] for d in docs})
    print(f"{overlay}: {len(docs)} objects: {', '.join(kinds)}")
    for d in docs:
        if d["kind"] in ("Namespace", "StorageClass", "PersistentVolume"):
            check("namespace" not in d["metadata"], f"{overlay}: cluster-scoped {d['kind']} has a namespace")
        else:
            check(d["metadata"].get("namespace") == "llamafleet", f"{overlay}: {d['kind']} {d['metadata']['name']} not in namespace llamafleet")
    required = ["Namespace", "Service", "StatefulSet", "DaemonSet", "PodDisruptionBudget", "NetworkPolicy", "ConfigMap", "PersistentVolumeClaim"]
    if overlay == "eks":
        required += ["ServiceMonitor", "StorageClass"]
    for k in required:
        check(by_kind(docs, k), f"{overlay}: no {k}")

    # --- the coordinator
    sts = one(docs, "StatefulSet", "llamafleet-coordinator", overlay)
    svc = one(docs, "Service", "llamafleet-coordinator", overlay)
    if not sts or not svc:
        continue
    spec = sts["spec"]
    pod = spec["template"]["spec"]
    check(spec["replicas"] == 1, f"{overlay}: coordinator replicas {spec['replicas']}, must be 1 (one SQLite writer)")
    check(spec.get("serviceName") == "llamafleet-coordinator", f"{overlay}: StatefulSet serviceName")
    vct = {v["metadata"]["name"]: v for v in spec.get("volumeClaimTemplates", [])}
    check("data" in vct, f"{overlay}: coordinator has no PVC template 'data'")
    c = pod["containers"][0]
    f = flags(c)
    mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
    check(mounts.get("data") == f.get("--data-dir"), f"{overlay}: the PVC is not mounted at --data-dir")
    check(pod.get("terminationGracePeriodSeconds", 30) > 15 + 15, f"{overlay}: coordinator grace period not longer than its shutdown")
    check(pod.get("securityContext", {}).get("runAsNonRoot") is True, f"{overlay}: coordinator may run as root")
    for probe in ("readinessProbe", "livenessProbe"):
        p = c.get(probe)
        if not check(p is not None, f"{overlay}: coordinator has no {probe}"):
            continue
        cmd = p.get("exec", {}).get("command", [])
        grpc_native = "grpc" in p
        check(grpc_native or (cmd and cmd[0] == "llamafleet-health-probe"), f"{overlay}: {probe} is not a grpc.health.v1 check: {p}")
        if cmd:
            check(cmd[0] in staged["coordinator"], f"{overlay}: {probe} runs {cmd[0]}, which build.sh does not put in the coordinator image")
            probe_port = next((a.split(":")[-1] for a in cmd if a.startswith("--address=")), None)
            check(probe_port == f.get("--listen", "").split(":")[-1], f"{overlay}: {probe} checks port {probe_port}, the coordinator listens on {f.get('--listen')}")
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    check(str(ports.get("grpc")) == f.get("--listen", "").split(":")[-1], f"{overlay}: container port grpc != --listen")
    check(str(ports.get("http")) == f.get("--http-listen", "").split(":")[-1], f"{overlay}: container port http != --http-listen")
    for name, port in ports.items():
        check(str(port) in exposed["coordinator"], f"{overlay}: port {name} {port} is not EXPOSEd by the coordinator image")
    for sp in svc["spec"]["ports"]:
        check(sp["targetPort"] in ports, f"{overlay}: Service port {sp['name']} targets unknown {sp['targetPort']}")
    for k in f:
        check(k in help_text["coordinator"] or k in pending_flags, f"{overlay}: the coordinator has no flag {k}")
    path_root = f.get("--path-root")
    check(path_root, f"{overlay}: the coordinator is given no --path-root")
    check(mounts.get("shared") == path_root, f"{overlay}: the shared volume is not mounted at the path root {path_root}")
    secrets = {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    check({"llamafleet-join-token", "llamafleet-tls"} <= secrets, f"{overlay}: coordinator secrets {secrets}")
    check(f.get("--tls-cert") and f.get("--tls-key"), f"{overlay}: the coordinator serves no TLS")
    cfg = one(docs, "ConfigMap", "llamafleet-coordinator-config", overlay)
    if cfg:
        config = yaml.safe_load(cfg["data"]["coordinator.yaml"])
        check(set(config) <= {"listen", "data_dir", "synchronous", "group_commit", "log_level", "http_listen", "queues"},
              f"{overlay}: coordinator config has keys the coordinator refuses: {sorted(config)}")

    # --- the workers
    ds = one(docs, "DaemonSet", "llamafleet-worker", overlay)
    if not ds:
        continue
    pod = ds["spec"]["template"]["spec"]
    c = pod["containers"][0]
    wf = flags(c)
    for k in wf:
        check(k in help_text["worker"], f"{overlay}: the worker has no flag {k}")
    check(pod.get("hostNetwork") is True or overlay == "kind", f"{overlay}: workers without host networking")
    check(wf.get("--address") == "$(NODE_IP)", f"{overlay}: workers do not advertise the node IP")
    vols = {v["name"]: v for v in pod["volumes"]}
    wm = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    shm = [n for n, p in wm.items() if p == "/dev/shm"]
    check(shm and vols[shm[0]].get("emptyDir", {}).get("medium") == "Memory", f"{overlay}: /dev/shm is not a memory-backed volume")
    check(wm.get("shared") == path_root, f"{overlay}: workers mount the shared volume at {wm.get('shared')}, not the path root {path_root}")
    check(vols.get("shared", {}).get("persistentVolumeClaim", {}).get("claimName") == "llamafleet-shared", f"{overlay}: shared volume is not the PVC")
    claims = by_kind(docs, "PersistentVolumeClaim", "llamafleet-shared")
    check(claims and "ReadWriteMany" in claims[0]["spec"]["accessModes"], f"{overlay}: llamafleet-shared is not ReadWriteMany")
    res = c.get("resources", {})
    if overlay == "eks":
        for r in ("nvidia.com/gpu", "vpc.amazonaws.com/efa"):
            check(r in res.get("requests", {}) and r in res.get("limits", {}), f"eks: the worker does not request {r}")
        sc = by_kind(docs, "StorageClass")
        check(sc and sc[0]["provisioner"] == "fsx.csi.aws.com", "eks: shared storage is not FSx for Lustre")
        check(claims and claims[0]["spec"].get("storageClassName") == sc[0]["metadata"]["name"], "eks: the PVC does not use the FSx StorageClass")
        check(wf.get("--instance-type") == "p5.48xlarge", "eks: workers do not report their instance type")
        check(wm.get("aws-efa") == "/opt/amazon" and vols.get("aws-efa", {}).get("hostPath", {}).get("path") == "/opt/amazon",
              "eks: workers do not mount the node's /opt/amazon (aws-ofi-nccl, which the CUDA image lacks)")
        sm = by_kind(docs, "ServiceMonitor")
        if sm:
            ep = sm[0]["spec"]["endpoints"][0]
            check(ep["port"] in ports and ep["path"] == "/metrics", "eks: ServiceMonitor does not scrape http /metrics")
    else:
        check("nvidia.com/gpu" not in json.dumps(res), "kind: CPU workers request GPUs")
        check(wf.get("--cpu-ranks"), "kind: workers are not CPU workers")

    # --- images: each one names an image build.sh (or the CUDA Containerfile) makes
    for d in (sts, ds):
        for cont in d["spec"]["template"]["spec"]["containers"]:
            base = cont["image"].rsplit("/", 1)[-1].split(":")[0]
            check(base in image_names, f"{overlay}: image {cont['image']} is not one deploy/containers builds")
            check(":" in cont["image"].rsplit("/", 1)[-1], f"{overlay}: image {cont['image']} has no tag")
    if overlay == "eks":
        check(ds["spec"]["template"]["spec"]["containers"][0]["image"].split(":")[0].endswith("llamafleet-worker-cuda"), "eks: workers do not use the CUDA image")

    # --- policy and monitoring
    pdb = one(docs, "PodDisruptionBudget", "llamafleet-coordinator", overlay)
    np_ = one(docs, "NetworkPolicy", "llamafleet-coordinator", overlay)
    if pdb:
        check(pdb["spec"]["selector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"], f"{overlay}: PDB does not select the coordinator")
    if np_:
        check(np_["spec"]["podSelector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"], f"{overlay}: NetworkPolicy does not select the coordinator")
        check(np_["spec"].get("policyTypes") == ["Ingress"] and np_["spec"]["ingress"], f"{overlay}: NetworkPolicy does not restrict ingress")
    dash = one(docs, "ConfigMap", "llamafleet-grafana-dashboard", overlay)
    if dash:
        with open(os.path.join(root, "deploy/grafana/llamafleet-dashboard.json")) as fjson:
            check(json.loads(dash["data"]["llamafleet-dashboard.json"]) == json.load(fjson),
                  f"{overlay}: the dashboard ConfigMap differs from deploy/grafana/llamafleet-dashboard.json (copy it to deploy/k8s/base/)")
        check(dash["metadata"].get("labels", {}).get("grafana_dashboard") == "1", f"{overlay}: dashboard ConfigMap lacks grafana_dashboard label")

# --- make-secrets.sh
secrets = {d["metadata"]["name"]: d for d in load(os.path.join(work, "secrets.yaml"))}
check(set(secrets) == {"llamafleet-join-token", "llamafleet-tls"}, f"make-secrets.sh made {sorted(secrets)}")
if "llamafleet-tls" in secrets:
    data = secrets["llamafleet-tls"]["data"]
    check(set(data) == {"tls.crt", "tls.key", "ca.crt"}, f"llamafleet-tls keys {sorted(data)}")
    crt = base64.b64decode(data["tls.crt"])
    out = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName"], input=crt, capture_output=True).stdout.decode()
    for name in ("DNS:llamafleet-coordinator", "DNS:llamafleet-coordinator.llamafleet.svc", "IP Address:127.0.0.1"):
        check(name in out, f"the coordinator certificate lacks {name}")
if "llamafleet-join-token" in secrets:
    token = base64.b64decode(secrets["llamafleet-join-token"]["data"]["join-token"])
    check(re.fullmatch(rb"[0-9a-f]{64}", token) is not None, "the join token is not 32 random bytes in hex")

if failures:
    print("FAIL:\n  " + "\n  ".join(failures), file=sys.stderr)
    sys.exit(1)
print("passed")
