"""Starting llamafleet-train ranks by hand, as the worker does, and reading what they wrote.

Shared by the trainer's Python tests and benchmarks: each rank is a separate process with
the torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) on loopback and one OpenMP thread.
"""
import json
import os
import socket
import struct
import subprocess


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def rank_env(rank, world, port, local_world=None, extra=None):
    """The environment of one rank. A world of 1 gets no rendezvous variables (a single
    process, as the trainer runs without a launcher)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if world > 1:
        lw = local_world or world
        env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank % lw),
                   LOCAL_WORLD_SIZE=str(min(world, lw)), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    env.update(extra or {})
    return env


def launch_ranks(argv, world, local_world=None, env_extra=None):
    """Starts `world` processes of argv (a list, or a function of the rank giving one)."""
    port = free_port()
    procs = []
    for r in range(world):
        args = argv(r) if callable(argv) else argv
        procs.append(subprocess.Popen(args, env=rank_env(r, world, port, local_world, env_extra),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs


def wait_ranks(procs, timeout=300):
    """(return codes, [(stdout, stderr)]) of every rank."""
    outs = [p.communicate(timeout=timeout) for p in procs]
    return [p.returncode for p in procs], outs


def train_ranks(test, bin_dir, spec, world, env_extra=None, check=True):
    """`llamafleet-train train --spec spec` on `world` ranks (two per simulated host) with
    ATen's GEMM; with `check`, `test` fails on a rank that did not exit 0, showing its
    stderr's end. Returns (return codes, [(stdout, stderr)])."""
    env = {"LLAMAFLEET_CPU_GEMM": "aten"}
    env.update(env_extra or {})
    procs = launch_ranks([os.path.join(bin_dir, "llamafleet-train"), "train", "--spec", spec], world,
                         local_world=2, env_extra=env)
    codes, outs = wait_ranks(procs)
    if check:
        for code, (_, err) in zip(codes, outs):
            test.assertEqual(code, 0, err[-3000:])
    return codes, outs


def json_lines(text):
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def read_weights(d):
    """Every FP32 tensor of the .safetensors files in d, by name."""
    import torch
    t = {}
    for f in sorted(os.listdir(d)):
        if not f.endswith(".safetensors"):
            continue
        with open(os.path.join(d, f), "rb") as fh:
            b = fh.read()
        n = struct.unpack("<Q", b[:8])[0]
        h = json.loads(b[8:8 + n])
        for k, v in h.items():
            if k != "__metadata__":
                s, e = v["data_offsets"]
                t[k] = torch.frombuffer(bytearray(b[8 + n + s:8 + n + e]), dtype=torch.float32).reshape(v["shape"])
    return t


def max_rel(a, b):
    """The largest difference of any tensor, relative to that tensor's largest magnitude."""
    return max(float((a[k] - b[k]).abs().max() / b[k].abs().max()) for k in b)
