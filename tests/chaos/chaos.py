#!/usr/bin/env python3
"""Chaos harness: real coordinator, workers and trainers, a seeded schedule of faults, and
the invariants recovery must keep.

Every scenario starts a fresh cluster under one temporary directory: a coordinator (gRPC +
HTTP on port 0, its own data dir), CPU workers (one rank each) that reach the coordinator
through a TCP proxy owned by this harness (so a connection can be cut, and a restarted
coordinator, which gets a new port, is reached at the same address), and a 2-node
FULL_SHARD job training the `tiny` preset that checkpoints every few steps. After the
first checkpoint a fault is injected; then the harness waits for the job and checks:

  terminal      every job is terminal within the bound (a job that cannot be placed any
                more is cancelled by the harness once it is seen waiting, QUEUED)
  weights       a SUCCEEDED job's export evaluates to the uninterrupted run's loss
                (llamafleet-train eval, within 1e-6 relative)
  slots         every worker is back to 0 busy slots (ListWorkers: gpus_allocated and
                running_task_ids)
  trainers      no llamafleet-train process of this cluster is left
  descriptors   the coordinator's open descriptors are back to their baseline (+2)
  events        the event history is consistent: seq 1..n without gaps, each event's
                from_state is the previous to_state, nothing leaves a terminal state

Scenarios marked needs=coord depend on the coordinator-side recovery fixes
(release of tasks of an ended attempt that a re-registered/lost worker does not report,
bounded log-store descriptors). They fail on a coordinator without them; `--without-coord-fixes`
leaves them out (for measuring an older build).

Usage (see run.sh): chaos.py --bin BUILD/bin [--scenarios a,b | --set ctest | --soak N]
                              [--seed S] [--keep]
Prints one table row per scenario: scenario, recovery time (fault -> new attempt RUNNING),
outcome, and the invariants that failed. Exit status 0 when every scenario passed.
"""

import argparse
import datetime
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import collective_hang  # noqa: E402
import gpu_health  # noqa: E402
import straggler  # noqa: E402
from proxy import Proxy  # noqa: E402

TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}
HEARTBEAT_TIMEOUT_S = 5
# 24 steps after the first checkpoint (where faults land): at 1 OpenMP thread a rank's step
# takes ~0.05 s, and a slowed rank must stay visible over several progress rounds.
STEPS = 32
CKPT_EVERY = 8
TERMINAL_BOUND_S = 240


def log(msg):
    sys.stderr.write("[chaos %s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


# --------------------------------------------------------------------------- cluster


def http(method, url, body=None, content_type="application/json", timeout=10):
    data = None
    if body is not None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        raise RuntimeError("%s %s: HTTP %d %s" % (method, url, e.code, e.read()[:500]))


def parse_time(s):
    # RFC 3339 with up to nanoseconds; Python takes microseconds.
    s = s.replace("Z", "+00:00")
    m = re.match(r"(.*\.\d{6})\d*(.*)", s)
    if m:
        s = m.group(1) + m.group(2)
    return datetime.datetime.fromisoformat(s).timestamp()


class Cluster:
    def __init__(self, bin_dir, root, help_text):
        self.bin = bin_dir
        self.root = root
        self.coord = None
        self.http_addr = None
        self.grpc_addr = None
        self.workers = {}  # name -> Popen
        self.proxies = {}  # name -> Proxy
        self.help = help_text
        self.mounts = []
        self.coord_args = []  # the scenario's own coordinator flags
        self.worker_args = lambda root, name: []  # the scenario's own worker flags, per worker
        with open(os.path.join(root, "join-token"), "w") as f:
            f.write("chaos-secret\n")
        os.chmod(os.path.join(root, "join-token"), 0o600)

    def path(self, *p):
        return os.path.join(self.root, *p)

    def start_coordinator(self):
        args = [os.path.join(self.bin, "llamafleet-coordinator"), "--listen", "127.0.0.1:0",
                "--http-listen", "127.0.0.1:0", "--insecure-no-auth", "--data-dir", self.path("coord"),
                "--join-token-file", self.path("join-token"), "--heartbeat-timeout", str(HEARTBEAT_TIMEOUT_S),
                "--cancel-grace", "5"]
        if "--path-root" in self.help["coordinator"]:
            args += ["--path-root", self.root]
        if "--no-check-paths" in self.help["coordinator"]:
            args += ["--no-check-paths"]
        args += self.coord_args
        err = open(self.path("coordinator.log"), "a")
        self.coord = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, start_new_session=True, text=True)
        deadline = time.time() + 30
        self.grpc_addr = self.http_addr = None
        while time.time() < deadline and not (self.grpc_addr and self.http_addr):
            line = self.coord.stdout.readline()
            if not line:
                raise RuntimeError("coordinator exited: see %s" % self.path("coordinator.log"))
            if line.startswith("listening on "):
                self.grpc_addr = line.split()[-1]
            elif line.startswith("http listening on "):
                self.http_addr = line.split()[-1]
        # Keep draining stdout so the coordinator never blocks on a full pipe.
        threading.Thread(target=lambda p=self.coord: [None for _ in p.stdout], daemon=True).start()
        for p in self.proxies.values():
            p.retarget(self.grpc_addr)

    def start_worker(self, name):
        if name not in self.proxies:
            self.proxies[name] = Proxy(self.grpc_addr)
        args = [os.path.join(self.bin, "llamafleet-worker"), "--coordinator", self.proxies[name].address(),
                "--join-token-file", self.path("join-token"), "--data-dir", self.path("worker-" + name),
                "--cpu-ranks", "1", "--name", name, "--address", "127.0.0.1",
                "--trainer", os.path.join(self.bin, "llamafleet-train"), "--heartbeat-interval", "0.5"]
        if "--run-as" in self.help["worker"]:
            # Trainers write under this harness's directory, owned by the current user.
            import pwd
            args += ["--run-as", pwd.getpwuid(os.getuid()).pw_name]
        args += self.worker_args(self.root, name)
        env = dict(os.environ, OMP_NUM_THREADS="1")
        err = open(self.path("worker-%s.log" % name), "a")
        self.workers[name] = subprocess.Popen(args, stdout=err, stderr=err, env=env, start_new_session=True)

    def kill_worker(self, name):
        p = self.workers.pop(name)
        os.kill(p.pid, signal.SIGKILL)
        p.wait()

    def kill_coordinator(self):
        os.kill(self.coord.pid, signal.SIGKILL)
        self.coord.wait()

    def api(self, method, path, body=None, content_type="application/json"):
        return http(method, "http://%s/api/v1/%s" % (self.http_addr, path), body, content_type)

    def wait_workers(self, n, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            ws = [w for w in self.api("GET", "workers").get("workers", []) if w.get("state") == "WORKER_READY"]
            if len(ws) >= n:
                return
            time.sleep(0.2)
        raise RuntimeError("only %d of %d workers registered" % (len(ws), n))

    def submit(self, name, ckpt_dir, export_dir, max_restarts=3):
        spec = (
            "name: %s\nmodel: {preset: tiny}\n"
            "data: {train_path: %s, format: tokens}\n"
            "training: {max_steps: %d, micro_batch_size: 2, seq_len: 32, lr: 3.0e-3, log_every: 1, seed: 11}\n"
            "fsdp: {sharding: FULL_SHARD, mixed_precision: fp32, activation_checkpointing: false}\n"
            "resources: {nodes: 2, gpus_per_node: 1}\n"
            "checkpoint: {dir: %s, every_steps: %d}\n"
            "output: {export_dir: %s, export_dtype: fp32}\n"
            "run_policy: {max_restarts: %d, restart_backoff_seconds: 1}\n"
            % (name, self.path("train.jsonl"), STEPS, ckpt_dir, CKPT_EVERY, export_dir, max_restarts))
        r = self.api("POST", "jobs", spec, "application/yaml")
        return r["job"]["id"]

    def job(self, job_id):
        return self.api("GET", "jobs/%s" % job_id)

    def events(self, job_id):
        return self.api("GET", "jobs/%s/events" % job_id).get("events", [])

    def checkpoints(self, job_id):
        return self.api("GET", "jobs/%s/checkpoints" % job_id).get("checkpoints", [])

    def trainer_pids(self):
        """llamafleet-train processes started by this cluster's workers."""
        out = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"llamafleet-train") and any(self.root.encode() in a for a in argv):
                try:
                    with open("/proc/%s/stat" % pid) as f:
                        if f.read().split(")")[-1].split()[0] == "Z":
                            continue
                except OSError:
                    continue
                out.append(int(pid))
        return out

    def trainer_of(self, worker_name):
        """A trainer process of the worker: its working directory is a task directory inside
        the worker's data dir (the agent starts it there with relative --spec paths)."""
        marker = "worker-%s/" % worker_name
        for pid in self.trainer_pids():
            try:
                cwd = os.readlink("/proc/%d/cwd" % pid) + "/"
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    argv = f.read()
            except OSError:
                continue
            if marker in cwd or marker.encode() in argv:
                return pid
        return None

    def coordinator_fds(self):
        """What the coordinator's descriptors point at (one entry each)."""
        out = []
        d = "/proc/%d/fd" % self.coord.pid
        for fd in os.listdir(d):
            try:
                out.append(os.readlink(os.path.join(d, fd)))
            except OSError:
                pass
        return out

    def mount_tmpfs(self, path, size_bytes):
        os.makedirs(path, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d" % size_bytes, "tmpfs", path], check=True)
        self.mounts.append(path)

    def stop(self):
        for p in self.workers.values():
            try:
                os.kill(p.pid, signal.SIGTERM)
            except OSError:
                pass
        for p in self.workers.values():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.workers = {}
        if self.coord and self.coord.poll() is None:
            os.kill(self.coord.pid, signal.SIGTERM)
            try:
                self.coord.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(self.coord.pid, signal.SIGKILL)
                self.coord.wait()
        for p in self.proxies.values():
            p.close()
        for pid in self.trainer_pids():  # the invariant already failed; leave nothing behind
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for m in self.mounts:
            subprocess.run(["umount", "-l", m], check=False)


# --------------------------------------------------------------------------- scenarios


def write_data(path):
    rng = random.Random(7)
    with open(path, "w") as f:
        for _ in range(48):
            f.write(json.dumps({"input_ids": [3 + rng.randrange(500) for _ in range(33)]}) + "\n")


class Baseline:
    """The uninterrupted run: eval loss of its export and its checkpoint size."""
    loss = None
    ckpt_bytes = None


def eval_loss(bin_dir, model_dir, data):
    p = subprocess.run([os.path.join(bin_dir, "llamafleet-train"), "eval", "--model", model_dir, "--data", data,
                        "--format", "tokens", "--seq-len", "33"], capture_output=True, text=True, timeout=180,
                       env=dict(os.environ, OMP_NUM_THREADS="2"))
    if p.returncode != 0:
        raise RuntimeError("eval of %s failed: %s" % (model_dir, p.stderr[-2000:]))
    for line in reversed(p.stdout.splitlines()):
        try:
            j = json.loads(line)
        except ValueError:
            continue
        if "loss" in j:
            return j["loss"]
    raise RuntimeError("eval printed no loss")


class Scenario:
    """One run: cluster up, job submitted, fault injected after the first checkpoint,
    invariants checked."""

    def __init__(self, name, needs, workers, fault, rng):
        self.name = name
        self.needs = needs
        self.worker_names = workers
        self.fault = fault
        self.rng = rng
        self.recovery_s = None
        self.problems = []
        self.notes = []
        self.coord_fixes = False
        self.outcome = "?"
        self.fault_time = None
        self.fault_attempt = None
        self.cancel_when_waiting = False
        self.ckpt_dir = None

    # Helpers the faults use ------------------------------------------------------
    def wait_job(self, c, job_id, pred, timeout, what):
        deadline = time.time() + timeout
        j = None
        while time.time() < deadline:
            j = c.job(job_id)
            if pred(j):
                return j
            time.sleep(0.1)
        raise TimeoutError("%s: job %s still %s (%s) after %ds" % (
            what, job_id, j.get("state"), j.get("status_reason"), timeout))

    def run(self, bin_dir, help_text, keep):
        root = tempfile.mkdtemp(prefix="lf-chaos-")
        c = Cluster(bin_dir, root, help_text)
        c.coord_args = COORD_ARGS.get(self.fault, [])
        if callable(c.coord_args):
            c.coord_args = c.coord_args(root)
        c.worker_args = WORKER_ARGS.get(self.fault, c.worker_args)
        try:
            write_data(c.path("train.jsonl"))
            c.start_coordinator()
            for w in self.worker_names:
                c.start_worker(w)
            c.wait_workers(len(self.worker_names))
            time.sleep(0.5)
            if Baseline.loss is None:
                self.establish_baseline(c)
            fd_baseline = c.coordinator_fds()
            self.ckpt_dir = c.path("ckpt")
            if self.fault == "fs_full":
                # Room for every checkpoint of the run (the trainer deletes none) once the
                # filler the fault writes is gone.
                # The job's directory inside the mount, made by its job: a job may claim only
                # a directory that does not exist yet or its own identity's (not root's mount).
                c.mount_tmpfs(c.path("ckpt-tmpfs"), int(Baseline.ckpt_bytes * (STEPS // CKPT_EVERY + 1.5)) + (256 << 10))
                self.ckpt_dir = os.path.join(c.path("ckpt-tmpfs"), "ckpt")
            job_id = c.submit(self.name, self.ckpt_dir, c.path("export"))
            self.wait_job(c, job_id, lambda j: len(c.checkpoints(job_id)) > 0 or j.get("state") in TERMINAL,
                          120, "first checkpoint")
            time.sleep(self.rng.uniform(0, 0.3))
            before = c.job(job_id)
            self.fault_attempt = before.get("attempts", 0)
            self.fault_time = time.time()
            if before.get("state") in TERMINAL:
                # A fast machine can finish the job before the fault lands: nothing to test.
                self.notes.append("fault missed: the job had already ended %s" % before.get("state"))
            else:
                getattr(self, "fault_" + self.fault)(c, job_id)
            try:
                j = self.wait_job(c, job_id, lambda j: j.get("state") in TERMINAL or
                                  (self.cancel_when_waiting and j.get("state") == "QUEUED"),
                                  TERMINAL_BOUND_S, "terminal")
                if j.get("state") == "QUEUED":
                    # Nowhere to run any more (no spare): waiting is the right answer; end it.
                    self.check_waiting(c, job_id)
                    c.api("POST", "jobs/%s:cancel" % job_id, {"reason": "chaos: no capacity left"})
                    j = self.wait_job(c, job_id, lambda j: j.get("state") in TERMINAL, 60, "cancel")
            except TimeoutError as e:
                self.problems.append("terminal: %s" % e)
                j = c.job(job_id)
            self.outcome = j.get("state")
            self.measure_recovery(c, job_id)
            self.check_invariants(c, job_id, j, fd_baseline)
            if self.fault in CHECKS:
                CHECKS[self.fault](self, c, job_id, parse_time)
        except Exception as e:  # a harness step failed: report, never hang
            self.problems.append("harness: %s: %s" % (type(e).__name__, e))
        finally:
            c.stop()
            if self.problems or keep:
                log("%s: logs kept in %s" % (self.name, root))
            else:
                shutil.rmtree(root, ignore_errors=True)

    def establish_baseline(self, c):
        log("baseline: an uninterrupted run of the same job")
        job_id = c.submit("baseline", c.path("ckpt-baseline"), c.path("export-baseline"))
        j = self.wait_job(c, job_id, lambda j: j.get("state") in TERMINAL, TERMINAL_BOUND_S, "baseline")
        if j.get("state") != "SUCCEEDED":
            raise RuntimeError("baseline run ended %s: %s" % (j.get("state"), j.get("status_reason")))
        Baseline.loss = eval_loss(c.bin, c.path("export-baseline"), c.path("train.jsonl"))
        Baseline.ckpt_bytes = max(int(ck.get("bytes", 0)) for ck in c.checkpoints(job_id))
        log("baseline: eval loss %.9g, checkpoint %d bytes" % (Baseline.loss, Baseline.ckpt_bytes))
        # The workers must be idle again before the scenario's own job.
        deadline = time.time() + 30
        while time.time() < deadline and self.busy(c):
            time.sleep(0.2)

    @staticmethod
    def busy(c):
        out = []
        for w in c.api("GET", "workers").get("workers", []):
            if int(w.get("gpus_allocated", 0)) != 0 or w.get("running_task_ids"):
                out.append("%s %s/%s" % (w.get("name"), w.get("gpus_allocated"), ",".join(w.get("running_task_ids", []))))
        return out

    def check_waiting(self, c, job_id):
        # While the job waits for capacity, no worker holds a slot for it.
        deadline = time.time() + 30
        while time.time() < deadline and self.busy(c):
            time.sleep(0.2)
        if self.busy(c):
            self.problems.append("slots: held while the job waits: %s" % self.busy(c))

    def measure_recovery(self, c, job_id):
        # Fault -> the first RUNNING after it (a new attempt, or the same one carrying on
        # after a reconnect).
        for e in c.events(job_id):
            if e.get("to_state") == "RUNNING" and e.get("from_state") != "RUNNING":
                t = parse_time(e["time"])
                if t >= self.fault_time:
                    self.recovery_s = t - self.fault_time
                    return

    def check_invariants(self, c, job_id, j, fd_baseline):
        if j.get("state") not in TERMINAL:
            # Already reported; say what holds it (the stranded restart: slots of a dead attempt).
            if self.busy(c):
                self.problems.append("slots: held while the job is %s: %s" % (j.get("state"), "; ".join(self.busy(c))))
            return
        expected = "CANCELLED" if self.cancel_when_waiting else "SUCCEEDED"
        if j.get("state") != expected:
            self.problems.append("outcome: %s, expected %s (%s)" % (j.get("state"), expected, j.get("status_reason")))
        if j.get("state") == "SUCCEEDED":
            loss = eval_loss(c.bin, c.path("export"), c.path("train.jsonl"))
            if abs(loss - Baseline.loss) > 1e-6 * abs(Baseline.loss):
                self.problems.append("weights: eval loss %.9g, uninterrupted %.9g" % (loss, Baseline.loss))
        deadline = time.time() + 30
        while time.time() < deadline and self.busy(c):
            time.sleep(0.2)
        if self.busy(c):
            self.problems.append("slots: busy after the job ended: %s" % "; ".join(self.busy(c)))
        deadline = time.time() + 15
        while time.time() < deadline and c.trainer_pids():
            time.sleep(0.2)
        if c.trainer_pids():
            self.problems.append("trainers: left running: %s" % c.trainer_pids())
        deadline = time.time() + 10
        fds = c.coordinator_fds()
        while time.time() < deadline and len(fds) > len(fd_baseline) + 2:
            time.sleep(0.5)
            fds = c.coordinator_fds()
        if len(fds) > len(fd_baseline) + 2:
            extra = sorted(set(fds) - set(fd_baseline))
            logs = [f for f in extra if re.search(r"/attempt-\d+/rank-\d+\.log$", f)]
            msg = "descriptors: coordinator holds %d, baseline %d (%d more are rank log files)" % (
                len(fds), len(fd_baseline), len(logs))
            if self.coord_fixes or len(extra) > len(logs) + 2:
                self.problems.append(msg + ": " + ", ".join(extra[:6]))
            else:
                # The log store keeping rank log files open is fixed on the coordinator side
                # (rank logs closed when an attempt ends); without --coord-fixes it is noted, not failed.
                self.notes.append(msg)
        self.check_events(c.events(job_id))

    def check_events(self, events):
        prev_seq, prev_state = 0, None
        for e in events:
            seq = int(e.get("seq", 0))
            if seq != prev_seq + 1:
                self.problems.append("events: seq %d after %d" % (seq, prev_seq))
            frm, to = e.get("from_state"), e.get("to_state")
            if prev_state in TERMINAL and to != prev_state:
                self.problems.append("events: %s -> %s after terminal (%s)" % (prev_state, to, e.get("reason")))
            if prev_state is not None and frm != prev_state and e.get("type") != "submitted":
                self.problems.append("events: seq %d from %s but the job was %s" % (seq, frm, prev_state))
            prev_seq, prev_state = seq, to

    # Faults ------------------------------------------------------------------------
    def victim(self, c, job_id):
        ws = c.job(job_id).get("workers", [])
        return ws[1] if len(ws) > 1 else ws[0]

    def victim_trainer(self, c, job_id, done_to_it):
        """(worker, pid) of the victim's trainer rank; None, with a note, when the job ended
        before its rank could be `done_to_it` ("killed", "stopped", ...)."""
        victim = self.victim(c, job_id)
        pid = c.trainer_of(victim)
        if pid is None:
            if c.job(job_id).get("state") in TERMINAL:
                self.notes.append("fault missed: the job ended before its rank could be %s" % done_to_it)
                return None
            raise RuntimeError("no trainer of %s found" % victim)
        return victim, pid

    def fault_kill_worker_restart_now(self, c, job_id):
        v = self.victim(c, job_id)
        c.kill_worker(v)
        c.start_worker(v)

    def fault_kill_worker_restart_later(self, c, job_id):
        v = self.victim(c, job_id)
        c.kill_worker(v)
        time.sleep(HEARTBEAT_TIMEOUT_S + 3)  # lost first, then back under the same name
        c.start_worker(v)

    def fault_kill_worker_spare(self, c, job_id):
        c.kill_worker(self.victim(c, job_id))

    def fault_kill_worker_never(self, c, job_id):
        self.cancel_when_waiting = True
        c.kill_worker(self.victim(c, job_id))

    def fault_kill_coordinator(self, c, job_id):
        c.kill_coordinator()
        time.sleep(self.rng.uniform(0.5, 2.0))
        c.start_coordinator()

    def fault_kill_rank_mid_checkpoint(self, c, job_id):
        # SIGKILL rank 1 while a checkpoint's background write is in flight (a step-N.partial
        # directory exists): the job must resume from the previous complete checkpoint.
        found = self.victim_trainer(c, job_id, "killed")
        if found is None:
            return
        _, pid = found
        deadline = time.time() + 20
        while time.time() < deadline:
            if any(n.endswith(".partial") for n in os.listdir(self.ckpt_dir)):
                break
            time.sleep(0.002)
        else:
            self.notes.append("no write in flight seen within 20 s: killed between saves")
        os.kill(pid, signal.SIGKILL)

    def fault_sigstop_rank(self, c, job_id):
        found = self.victim_trainer(c, job_id, "stopped")
        if found is None:
            return
        _, pid = found
        os.kill(pid, signal.SIGSTOP)
        time.sleep(6)  # longer than a heartbeat timeout; shorter than the collective timeout
        os.kill(pid, signal.SIGCONT)

    def fault_hang_in_collective(self, c, job_id):
        collective_hang.fault(self, c, job_id)

    def fault_straggler_restart_without(self, c, job_id):
        straggler.fault(self, c, job_id)

    def fault_gpu_health_drain(self, c, job_id):
        gpu_health.fault(self, c, job_id)

    def fault_fs_full(self, c, job_id):
        st = os.statvfs(self.ckpt_dir)
        free = st.f_bavail * st.f_frsize
        filler = os.path.join(self.ckpt_dir, "filler")
        with open(filler, "wb") as f:
            try:
                f.write(b"\0" * max(0, free - 4096))
            except OSError:
                pass
        # The next save fails (no space); once that attempt has ended the operator frees
        # the space, and the job resumes from its checkpoint.
        self.wait_job(c, job_id, lambda j: j.get("attempts", 0) > self.fault_attempt or
                      j.get("state") in TERMINAL | {"RESTARTING", "QUEUED"}, 120, "a failed save")
        os.remove(filler)

    def fault_cut_connection_short(self, c, job_id):
        c.proxies[self.victim(c, job_id)].cut(refuse_s=1.0)

    def fault_cut_connection_long(self, c, job_id):
        c.proxies[self.victim(c, job_id)].cut(refuse_s=HEARTBEAT_TIMEOUT_S + 3)


# Coordinator flags of a scenario (beyond the cluster's own).
COORD_ARGS = {"hang_in_collective": collective_hang.COORD_ARGS,
              "straggler_restart_without": straggler.coord_args}  # a function of the cluster's root
# Worker flags of a scenario: a function of the cluster's root and the worker's name.
WORKER_ARGS = {"gpu_health_drain": gpu_health.worker_args}
# A scenario's own checks, after the harness's invariants.
CHECKS = {"hang_in_collective": collective_hang.check,
          "straggler_restart_without": straggler.check,
          "gpu_health_drain": gpu_health.check}

# name -> (needs, workers)
SCENARIOS = {
    "kill_worker_spare": ("", ["w0", "w1", "w2"]),
    "kill_worker_never": ("", ["w0", "w1"]),
    "kill_worker_restart_now": ("coord", ["w0", "w1"]),
    "kill_worker_restart_later": ("coord", ["w0", "w1"]),
    "kill_coordinator": ("", ["w0", "w1"]),
    "sigstop_rank": ("", ["w0", "w1"]),
    "hang_in_collective": ("", ["w0", "w1", "w2"]),
    "straggler_restart_without": ("", ["w0", "w1", "w2"]),
    "gpu_health_drain": ("", ["w0", "w1", "w2"]),
    "kill_rank_mid_checkpoint": ("", ["w0", "w1"]),
    "fs_full": ("", ["w0", "w1"]),
    "cut_connection_short": ("", ["w0", "w1"]),
    "cut_connection_long": ("coord", ["w0", "w1"]),
}
# What ctest runs (bounded to a few minutes on 2 cores); the "coord" set needs the
# coordinator-side fixes.
SETS = {
    "ctest": ["kill_worker_spare", "kill_coordinator", "fs_full"],
    "coord": ["kill_worker_restart_now", "kill_worker_restart_later", "cut_connection_long"],
}


def main():
    global TERMINAL_BOUND_S
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="directory of the built executables")
    ap.add_argument("--scenarios", default="", help="comma-separated scenario names")
    ap.add_argument("--set", default="", help="a named set: %s" % ", ".join(SETS))
    ap.add_argument("--soak", type=int, default=0, help="run N scenarios drawn at random")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="keep every scenario's directory")
    ap.add_argument("--coord-fixes", dest="coord_fixes", action="store_true", default=True,
                    help="the coordinator has the recovery fixes (the default since they are on main): "
                         "run the scenarios that need them, and fail on rank log files left open")
    ap.add_argument("--without-coord-fixes", dest="coord_fixes", action="store_false",
                    help="an older coordinator: leave out the scenarios that need the fixes, only note open log files")
    ap.add_argument("--bound", type=int, default=TERMINAL_BOUND_S, help="seconds a job has to end after the fault (default %(default)s)")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    a.bin = os.path.abspath(a.bin)
    if a.list:
        for n, (needs, ws) in SCENARIOS.items():
            print("%-28s workers %-10s %s" % (n, ",".join(ws), "needs the coordinator fixes" if needs else ""))
        return 0
    TERMINAL_BOUND_S = a.bound
    rng = random.Random(a.seed)
    if a.soak:
        pool = sorted(n for n, (needs, _) in SCENARIOS.items() if a.coord_fixes or not needs)
        names = [rng.choice(pool) for _ in range(a.soak)]
    elif a.set:
        names = SETS[a.set]
    else:
        names = [n for n in a.scenarios.split(",") if n] or sorted(SCENARIOS)
    for n in names:
        if n not in SCENARIOS:
            ap.error("unknown scenario %s (--list)" % n)
    help_text = {}
    for k, exe in (("coordinator", "llamafleet-coordinator"), ("worker", "llamafleet-worker")):
        p = subprocess.run([os.path.join(a.bin, exe), "--help"], capture_output=True, text=True)
        help_text[k] = p.stdout + p.stderr

    results = []
    print("%-4s %-28s %-6s %10s  %-10s %s" % ("#", "scenario", "needs", "recovery_s", "outcome", "problems"))
    sys.stdout.flush()
    for i, n in enumerate(names):
        needs, workers = SCENARIOS[n]
        s = Scenario(n, needs, workers, n, random.Random(rng.random()))
        s.coord_fixes = a.coord_fixes
        t0 = time.time()
        log("%d/%d %s" % (i + 1, len(names), n))
        s.run(a.bin, help_text, a.keep)
        rec = "%.2f" % s.recovery_s if s.recovery_s is not None else "-"
        print("%-4d %-28s %-6s %10s  %-10s %s" % (i + 1, n, needs or "-", rec, s.outcome,
                                                  "ok" if not s.problems else " | ".join(s.problems)))
        for note in s.notes:
            print("     note: %s" % note)
        sys.stdout.flush()
        log("%s done in %.0fs" % (n, time.time() - t0))
        results.append(s)
    failed = [s for s in results if s.problems]
    rec = [s.recovery_s for s in results if s.recovery_s is not None and s.name.startswith("kill_worker")]
    print("\n%d scenarios, %d passed, %d failed" % (len(results), len(results) - len(failed), len(failed)))
    if rec:
        print("recovery time (worker killed -> RUNNING again), %d kills: median %.2f s, max %.2f s" % (
            len(rec), statistics.median(rec), max(rec)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
