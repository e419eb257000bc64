#!/usr/bin/env python3
"""Checks that a tests/gpu build used nothing but the kit and what a GPU machine has.

Run inside the trixie root of tests/cuda/build.sh after tests/gpu was built there with the
kit (tests/gpu/ci.sh does both). That root holds many more -dev packages than a GPU
machine; this proves the build did not use them:

- every header in the compiler's dependency files (*.o.d) lies in the checkout (sources,
  the kit, generated files) or belongs to an allowed package: the dependency closure of a
  C++ toolchain, CMake, libtorch-cuda-dev, libnccl-dev and nvcc (the GPU machine's pip
  torch, nvidia-nccl wheel and CUDA), plus the headers Debian's LibTorch includes from
  packages of their own that pip's torch ships inside torch/include (TORCH_UNBUNDLED);
- no header and no linked library comes from a package the kit replaces (KIT_PACKAGES),
  even where the closure holds it (libtorch-cuda-dev depends on libprotobuf-dev);
- every library on the link lines and every library the programs load (ldd) belongs to
  the closure, or is the kit's or the build's own.

  check_kit_deps.py --build DIR
Prints what it checked; exits 1 naming each file that breaks a rule.
"""
import argparse
import glob
import os
import re
import subprocess
import sys

SEEDS = ["libc6-dev", "gcc", "g++", "make", "dpkg-dev", "cmake", "libtorch-cuda-dev", "libnccl-dev",
         "nvidia-cuda-toolkit", "nvidia-cuda-toolkit-gcc"]
KIT_PACKAGES = {"libabsl-dev", "libcli11-dev", "nlohmann-json3-dev", "libprotobuf-dev", "libssl-dev",
                "libsentencepiece-dev", "libpcre2-dev"}
# Debian's LibTorch headers include these packages' headers; pip's torch carries its own
# copies (or does not need them) under torch/include.
TORCH_UNBUNDLED = {"libgoogle-glog-dev", "libgflags-dev", "libfmt-dev", "libgloo-cuda-dev", "libsleef-dev",
                   "libkineto-dev", "libfoxi-dev", "libonnx-dev", "libpthreadpool-dev", "libcpuinfo-dev",
                   "libxnnpack-dev", "libfp16-dev", "libpsimd-dev", "libfxdiv-dev", "libtensorpipe-dev",
                   "libdnnl-dev", "libnnpack-dev", "libqnnpack-dev", "libpybind11-dev", "pybind11-dev",
                   "libeigen3-dev", "libunwind-dev", "libgtest-dev"}


def read_status(path="/var/lib/dpkg/status"):
    """-> {package: {"depends": [[alternatives]], "provides": [names]}} of installed packages."""
    pkgs, cur = {}, {}

    def flush():
        if cur.get("Package") and "install ok installed" in cur.get("Status", ""):
            deps = []
            for field in ("Depends", "Pre-Depends"):
                for group in filter(None, (g.strip() for g in cur.get(field, "").split(","))):
                    deps.append([re.split(r"[ (:]", alt.strip())[0] for alt in group.split("|")])
            provides = [re.split(r"[ (]", p.strip())[0] for p in cur.get("Provides", "").split(",") if p.strip()]
            pkgs[cur["Package"]] = {"depends": deps, "provides": provides}

    key = None
    for line in open(path, encoding="utf-8", errors="replace"):
        if line == "\n":
            flush()
            cur, key = {}, None
        elif line[0] in " \t" and key:
            cur[key] += " " + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            cur[key] = value.strip()
    flush()
    return pkgs


def closure(pkgs, seeds):
    providers = {}
    for name, p in pkgs.items():
        for v in p["provides"]:
            providers.setdefault(v, set()).add(name)
    seen, todo = set(), [s for s in seeds if s in pkgs]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for group in pkgs[name]["depends"]:
            for alt in group:
                for cand in ({alt} if alt in pkgs else set()) | providers.get(alt, set()):
                    if cand not in seen:
                        todo.append(cand)
    return seen


def owners():
    """-> {path: package} from dpkg's file lists."""
    out = {}
    for lst in glob.glob("/var/lib/dpkg/info/*.list"):
        pkg = os.path.basename(lst)[:-5].split(":")[0]
        for line in open(lst, encoding="utf-8", errors="replace"):
            out[line.rstrip("\n")] = pkg
    return out


def owner_of(path, table):
    for cand in (os.path.normpath(path), os.path.realpath(path)):
        for variant in (cand, cand[4:] if cand.startswith("/usr/") else "/usr" + cand):
            if variant in table:
                return table[variant]
    return None


def depfile_headers(build):
    """Every file the compiler's dependency files name (relative ones against the folder the
    compiler ran in: the one holding CMakeFiles/)."""
    headers = set()
    for d in glob.glob(os.path.join(build, "**", "*.o.d"), recursive=True):
        cwd = d.split(os.sep + "CMakeFiles" + os.sep)[0]
        text = open(d, encoding="utf-8", errors="replace").read().replace("\\\n", " ")
        for rule in text.split("\n"):
            if ":" not in rule:
                continue
            for tok in rule.split(":", 1)[1].split():
                headers.add(tok if os.path.isabs(tok) else os.path.normpath(os.path.join(cwd, tok)))
    return headers


def link_libraries(build):
    """Absolute library paths on the link lines (also inside -Wl,...,"path")."""
    libs = set()
    for lt in glob.glob(os.path.join(build, "**", "link.txt"), recursive=True):
        for tok in open(lt).read().split():
            for m in re.finditer(r'(?:^|[,"=])(/[^,"]+\.(?:a|so(?:\.[0-9.]+)?))(?=$|[,"])', tok):
                libs.add(m.group(1))
    return libs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--src", default=os.getcwd())
    a = ap.parse_args()
    build, src = os.path.abspath(a.build), os.path.abspath(a.src)
    pkgs = read_status()
    allowed = closure(pkgs, SEEDS)
    table = owners()
    bad, used = [], {}

    def judge(path, what):
        if path.startswith(src + "/"):
            return
        pkg = owner_of(path, table)
        if pkg is None:
            bad.append(f"{what} {path}: belongs to no package")
        elif pkg in KIT_PACKAGES:
            bad.append(f"{what} {path}: from {pkg}, which the kit replaces (a GPU machine lacks it)")
        elif pkg not in allowed and not (what == "header" and pkg in TORCH_UNBUNDLED):
            bad.append(f"{what} {path}: from {pkg}, outside the allowed packages")
        else:
            used[pkg] = used.get(pkg, 0) + 1

    headers = depfile_headers(build)
    if not headers:
        bad.append(f"no dependency files (*.o.d) under {build}: nothing was checked")
    for h in sorted(headers):
        judge(h, "header")
    for lib in sorted(link_libraries(build)):
        judge(lib, "link")
    programs = glob.glob(os.path.join(build, "bin", "*"))
    for prog in programs:
        ldd = subprocess.run(["ldd", prog], capture_output=True, text=True).stdout
        for line in ldd.splitlines():
            if "not found" in line:
                bad.append(f"{os.path.basename(prog)} loads {line.strip()}")
            m = re.search(r"=> (/\S+)", line)
            if m:
                judge(m.group(1), f"{os.path.basename(prog)} loads")
    print(f"check_kit_deps: {len(headers)} headers, {len(programs)} programs; packages used: "
          + ", ".join(f"{p} ({n})" for p, n in sorted(used.items())))
    torch_extra = sorted(p for p in used if p in TORCH_UNBUNDLED and p not in allowed)
    if torch_extra:
        print("check_kit_deps: headers Debian's LibTorch takes from packages of their own: " + ", ".join(torch_extra))
    for b in bad:
        print(f"check_kit_deps: {b}")
    if bad:
        print(f"check_kit_deps: FAILED: {len(bad)} files from outside the kit and the allowed packages")
        sys.exit(1)
    print("check_kit_deps: ok: only the kit, the checkout and the allowed packages")


if __name__ == "__main__":
    main()
