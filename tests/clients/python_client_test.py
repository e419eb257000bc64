#!/usr/bin/env python3
"""The Python client (clients/python) against real processes: a coordinator with tokens
on, two CPU workers running the real llamafleet-train, and clients/python/examples/
finetune.py run as written. Then every reading method on the job it trained, the errors
(a bad spec's field violations, a bad token), paging, cancel and wait's timeout, TLS, and
`pip install` of the package offline. SpecReadingTest, without processes: how job files and
dicts are read (every deploy/examples file among them).

    python_client_test.py BIN_DIR PYTHON_DIR SOURCE_DIR [unittest args]

BIN_DIR holds the built binaries, PYTHON_DIR the built package (<build>/python), SOURCE_DIR
the checkout.
"""

import os
import pty
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

BIN_DIR, PYTHON_DIR, SOURCE_DIR = (os.path.abspath(a) for a in sys.argv[1:4])
del sys.argv[1:4]
sys.path.insert(0, PYTHON_DIR)

import llamafleet  # noqa: E402
from llamafleet import job_pb2, worker_pb2  # noqa: E402

JOIN_TOKEN = "python-client-test-join"


def start_coordinator(root, name, extra=()):
    """A coordinator on a free port with its own data dir under root; (process, address)."""
    args = [os.path.join(BIN_DIR, "llamafleet-coordinator"), "--listen", "127.0.0.1:0",
            "--data-dir", os.path.join(root, name), "--join-token", JOIN_TOKEN,
            "--path-root", root, "--cancel-grace", "2", "--no-check-paths", *extra]
    with open(os.path.join(root, name + ".log"), "a") as log:
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        line = p.stdout.readline()
        if not line:
            raise RuntimeError("coordinator exited; see %s.log" % name)
        if line.startswith("listening on "):
            threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
            return p, line.split()[-1]
    raise RuntimeError("coordinator did not listen within 30 s")


def create_token(root, name, user, role):
    out = subprocess.run([os.path.join(BIN_DIR, "llamafleet-coordinator"), "token", "create",
                          "--data-dir", os.path.join(root, name), "--user", user, "--role", role],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def stop(p):
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            p.wait()
    if p.stdout is not None:
        p.stdout.close()


def queued_spec(name, nodes=5, **labels):
    """A job no 2-worker cluster can place: it stays QUEUED until cancelled."""
    return {"name": name, "labels": labels, "model": {"preset": "tiny"},
            "data": {"train_path": os.path.join(PythonClientTest.root, "never-read.jsonl"), "format": "tokens"},
            "training": {"max_steps": 1, "seq_len": 32},
            "fsdp": {"mixed_precision": "fp32"}, "resources": {"nodes": nodes, "gpus_per_node": 1}}


class PythonClientTest(unittest.TestCase):
    root = None
    processes = []

    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="llamafleet-python-client-")
        os.chmod(cls.root, 0o755)
        os.makedirs(os.path.join(cls.root, "coordinator"))
        cls.token = create_token(cls.root, "coordinator", "alice", "user")
        # The workers say they are a priced instance type: cost is GPU time x its price.
        config = os.path.join(cls.root, "coordinator.yaml")
        with open(config, "w") as f:
            f.write("pricing: {cpu-test.large: 3.6}\n")
        cls.coordinator, cls.address = start_coordinator(cls.root, "coordinator", ["--config", config])
        cls.processes = [cls.coordinator]
        for n in (1, 2):
            with open(os.path.join(cls.root, "worker-%d.log" % n), "a") as log:
                cls.processes.append(subprocess.Popen(
                    [os.path.join(BIN_DIR, "llamafleet-worker"), "--coordinator", cls.address,
                     "--join-token", JOIN_TOKEN, "--data-dir", os.path.join(cls.root, "worker-%d" % n),
                     "--cpu-ranks", "1", "--name", "w%d" % n, "--address", "127.0.0.1",
                     "--instance-type", "cpu-test.large",
                     "--trainer", os.path.join(BIN_DIR, "llamafleet-train"), "--heartbeat-interval", "0.5",
                     "--run-as", str(os.geteuid())],
                    stdout=log, stderr=log, env=dict(os.environ, OMP_NUM_THREADS="1"), start_new_session=True))
        cls.client = llamafleet.Client(cls.address, cls.token)
        deadline = time.time() + 30
        while time.time() < deadline:
            if sum(w.state == worker_pb2.WORKER_READY for w in cls.client.workers()) == 2:
                break
            time.sleep(0.2)
        else:
            raise RuntimeError("the workers did not register")

    @classmethod
    def tearDownClass(cls):
        for p in reversed(cls.processes):
            stop(p)
        if os.environ.get("KEEP_TEST_DIR"):
            print("kept", cls.root, file=sys.stderr)
        else:
            shutil.rmtree(cls.root, ignore_errors=True)

    def dump_logs(self):
        for name in sorted(os.listdir(self.root)):
            if name.endswith(".log"):
                with open(os.path.join(self.root, name), errors="replace") as f:
                    sys.stderr.write("---- %s (last lines)\n%s\n" % (name, "".join(f.readlines()[-30:])))

    def test_example_trains_and_every_reader_sees_the_job(self):
        env = dict(os.environ, LLAMAFLEET_COORDINATOR=self.address, LLAMAFLEET_TOKEN=self.token,
                   PYTHONPATH=PYTHON_DIR)
        example = os.path.join(SOURCE_DIR, "clients", "python", "examples", "finetune.py")
        data_dir = os.path.join(self.root, "example")
        run = subprocess.run([sys.executable, example, data_dir], env=env, capture_output=True,
                             text=True, timeout=600)
        sys.stderr.write(run.stdout + run.stderr)
        if run.returncode != 0:
            self.dump_logs()
        self.assertEqual(run.returncode, 0)
        self.assertIn("calling as alice (USER)", run.stdout)
        self.assertRegex(run.stdout, r"job \d+ SUCCEEDED")
        self.assertRegex(run.stdout, r"GPU time: \d+\.\d GPU-seconds \(failed attempts 0\.0\)")
        # 3.6 per instance-hour of 1 CPU rank: a cost of 0.001 per GPU-second.
        self.assertRegex(run.stdout, r"cost: \d+\.\d{4}")
        # wait()'s progress through a pipe: a line per change, with step/total, loss, tok/s (the
        # last one always: the final state with the final metrics).
        self.assertRegex(run.stderr, r"job \d+ SUCCEEDED step 30/30 loss \d+\.\d{4} [\d,]+ tok/s")

        jobs = list(self.client.list(label={"example": "finetune-py"}))
        self.assertEqual(len(jobs), 1)
        job = self.client.get(jobs[0].id)
        self.assertEqual(job.state, job_pb2.SUCCEEDED)
        self.assertEqual(job.owner, "alice")
        self.assertEqual(job.spec.resources.nodes, 2)
        self.assertEqual(list(self.client.list(state="succeeded", label="example=finetune-py"))[0].id, job.id)

        points = self.client.metrics(job.id, as_frame=False)
        self.assertTrue(points and all(isinstance(p, llamafleet.MetricsPoint) for p in points))
        self.assertEqual(points[-1].step, 30)
        self.assertEqual(points[-1].total_steps, 30)
        self.assertGreater(points[-1].tokens_per_second, 0)
        self.assertEqual([p.step for p in points], sorted(p.step for p in points))
        default = self.client.metrics(job.id)
        try:
            import pandas  # noqa: F401
            self.assertEqual(list(default["step"]), [p.step for p in points])
        except ImportError:
            self.assertEqual(default, points)

        lines = list(self.client.logs(job.id, follow=True))
        self.assertTrue(lines)
        self.assertEqual({line.rank for line in lines}, {0, 1})
        rank1 = list(self.client.logs(job.id, follow=False, rank=1))
        self.assertTrue(rank1 and all(line.rank == 1 for line in rank1))
        self.assertEqual(len(list(self.client.logs(job.id, follow=False, rank=0, tail_lines=3))), 3)

        events = list(self.client.events(job.id))
        self.assertEqual([e.seq for e in events], list(range(1, len(events) + 1)))
        self.assertEqual(events[0].type, "submitted")
        self.assertEqual(events[-1].to_state, job_pb2.SUCCEEDED)
        # Following a terminal job's events ends after the one that made it terminal.
        followed = list(self.client.events(job.id, after_seq=events[-2].seq, follow=True))
        self.assertEqual([e.seq for e in followed], [events[-1].seq])

        checkpoints = self.client.checkpoints(job.id)
        self.assertEqual([c.step for c in checkpoints], [30, 20])  # keep_last 2, newest first
        attempts = self.client.attempts(job.id)
        self.assertEqual(len(attempts), 1)
        self.assertEqual(attempts[0].state, job_pb2.ATTEMPT_SUCCEEDED)
        self.assertEqual(sorted(t.worker for t in attempts[0].tasks), ["w1", "w2"])

        # GPU time: 2 CPU ranks from placement to the end, the job's the same as its one
        # attempt's; unpriced. The totals per user and queue hold at least this job.
        usage = llamafleet.usage_of(job)
        self.assertIsInstance(usage, llamafleet.Usage)
        self.assertGreater(usage.gpu_seconds, 0)
        self.assertEqual(usage.gpu_seconds, attempts[0].gpu_seconds)
        self.assertEqual(usage.failed_gpu_seconds, 0)
        self.assertAlmostEqual(usage.cost, usage.gpu_seconds * 3.6 / 3600, places=9)
        self.assertEqual(llamafleet.usage_of(attempts[0]), usage)
        rows = self.client.usage(user="alice")
        self.assertTrue(rows and all(isinstance(r, llamafleet.UsageRow) and r.user == "alice" for r in rows))
        default = [r for r in rows if r.queue == "default"]
        self.assertEqual(len(default), 1)
        self.assertGreaterEqual(default[0].jobs, 1)
        self.assertGreaterEqual(default[0].usage.gpu_seconds, usage.gpu_seconds)
        self.assertEqual(self.client.usage(user="nobody-here"), [])

    def test_the_readme_example_runs_as_written(self):
        # README.md's Python block, unchanged, in a directory with a job.yaml, on a terminal
        # (a pseudo-terminal): wait() shows its tqdm bar there.
        readme = open(os.path.join(SOURCE_DIR, "README.md")).read()
        block = re.search(r"## Python\n.*?```python\n(.*?)```", readme, re.S)
        self.assertIsNotNone(block, "README.md has no python block under ## Python")
        work = os.path.join(self.root, "readme")
        os.makedirs(work)
        train = os.path.join(work, "train.jsonl")
        with open(train, "w") as f:
            for i in range(32):
                f.write('{"input_ids": [%s]}\n' % ", ".join(str(3 + (i * 7 + j) % 500) for j in range(33)))
        with open(os.path.join(work, "job.yaml"), "w") as f:
            f.write("name: readme-example\nmodel: {preset: tiny}\n"
                    "data: {train_path: %s, format: tokens}\n"
                    "training: {max_steps: 12, micro_batch_size: 2, seq_len: 32, log_every: 2}\n"
                    "fsdp: {mixed_precision: fp32}\nresources: {nodes: 1, gpus_per_node: 1}\n" % train)
        with open(os.path.join(work, "readme_example.py"), "w") as f:
            f.write(block.group(1))
        env = dict(os.environ, LLAMAFLEET_COORDINATOR=self.address, LLAMAFLEET_TOKEN=self.token,
                   PYTHONPATH=PYTHON_DIR, COLUMNS="120")
        leader, follower = pty.openpty()
        p = subprocess.Popen([sys.executable, "readme_example.py"], cwd=work, env=env, stdin=subprocess.DEVNULL,
                             stdout=follower, stderr=follower, start_new_session=True)
        os.close(follower)
        out = b""
        deadline = time.time() + 300
        while time.time() < deadline:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the process closed its end
                break
            if not chunk:
                break
            out += chunk
        os.close(leader)
        code = p.wait(timeout=max(1, deadline - time.time()))
        text = out.decode(errors="replace")
        sys.stderr.write(text[-3000:])
        self.assertEqual(code, 0)
        # tqdm's bar was drawn (steps done of the total, the loss), and the logs followed.
        self.assertRegex(text, r"SUCCEEDED.*12/12 \[.*step.*loss=\d+\.\d{4}")
        self.assertIn('"type":"metrics"', text)

    def test_early_stopping_ends_the_job_with_the_reason_and_keeps_the_best(self):
        # min_delta 10: no evaluation after the first counts as an improvement, so the run
        # stops at the third evaluation (step 15 of 100), deterministically.
        rng = __import__("random").Random(11)
        paths = {}
        for name, rows in (("train", 32), ("eval", 8)):
            paths[name] = os.path.join(self.root, "es-%s.jsonl" % name)
            with open(paths[name], "w") as f:
                for _ in range(rows):
                    f.write('{"input_ids": [%s]}\n' % ", ".join(str(3 + rng.randrange(200)) for _ in range(33)))
        export = os.path.join(self.root, "es-export")
        spec = {"name": "early-stop", "model": {"preset": "tiny"},
                "data": {"train_path": paths["train"], "eval_path": paths["eval"], "format": "tokens"},
                "training": {"max_steps": 100, "micro_batch_size": 2, "seq_len": 32, "lr": 3e-3, "log_every": 5,
                             "eval_every_steps": 5, "early_stopping": {"patience": 2, "min_delta": 10}},
                "fsdp": {"mixed_precision": "fp32", "activation_checkpointing": False},
                "resources": {"nodes": 2, "gpus_per_node": 1},
                "checkpoint": {"every_steps": 5, "keep_last": 1},
                "output": {"export_dir": export, "export": "best", "export_dtype": "fp32"}}
        job = self.client.wait(self.client.submit(spec).id, timeout=600, progress=False)
        if job.state != job_pb2.SUCCEEDED:
            self.dump_logs()
        self.assertEqual(job.state, job_pb2.SUCCEEDED, job.status_reason)
        self.assertRegex(job.status_reason, r"^stopped early at step 15: eval loss did not improve by 10 for 2 "
                                            r"evaluations \(best \d+\.\d{4} at step (5|10|15)\)$")
        self.assertIn("stopped_early", [e.type for e in self.client.events(job.id)])
        evals = self.client.evals(job.id, as_frame=False)
        self.assertEqual([e.step for e in evals], [5, 10, 15])
        self.assertTrue(all(isinstance(e, llamafleet.EvalPoint) and e.attempt == 1 for e in evals))
        best = min(evals, key=lambda e: e.loss)
        self.assertAlmostEqual(job.latest_metrics.best_eval_loss, best.loss, places=12)
        self.assertEqual(job.latest_metrics.eval_step, 15)
        # keep_last 1 keeps the newest and the best eval loss; the best is the minimum recorded.
        checkpoints = self.client.checkpoints(job.id)
        self.assertIn(15, [c.step for c in checkpoints])
        recorded = [c for c in checkpoints if c.HasField("eval_loss")]
        self.assertEqual(min(c.eval_loss for c in recorded), best.loss)
        self.assertIn(best.step, [c.step for c in checkpoints])
        self.assertTrue(os.path.exists(os.path.join(export, "config.json")))
        # TensorBoard: the attempt's run holds every metrics point and evaluation.
        sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "testing"))
        import tensorboard_events
        job_dir = os.path.dirname(checkpoints[0].path)  # the job's (default) checkpoint dir
        run = tensorboard_events.read_events(os.path.join(job_dir, "tensorboard", "attempt-1"))
        self.assertEqual([step for step, _, _ in run.scalars["eval/loss"]], [5, 10, 15])
        self.assertEqual([step for step, _, _ in run.scalars["train/loss"]],
                         [p.step for p in self.client.metrics(job.id, as_frame=False)])

    def test_whoami_workers_queues(self):
        me = self.client.whoami()
        self.assertEqual((me.user, me.role, me.auth_enabled), ("alice", job_pb2.USER, True))
        self.assertEqual(sorted(w.name for w in self.client.workers()), ["w1", "w2"])
        self.assertIsInstance(self.client.queues(), list)

    def test_bad_token_and_no_token_are_unauthenticated(self):
        with self.assertRaises(llamafleet.Unauthenticated) as bad:
            llamafleet.Client(self.address, token="not-a-token").whoami()
        self.assertIn("invalid or revoked token", str(bad.exception))
        with self.assertRaises(llamafleet.Unauthenticated):
            llamafleet.Client(self.address, token="").get("1")
        self.assertTrue(issubclass(llamafleet.Unauthenticated, llamafleet.LlamafleetError))

    def test_bad_spec_names_the_field(self):
        bad = queued_spec("bad-lr")
        bad["training"]["lr"] = -1
        with self.assertRaises(llamafleet.InvalidArgument) as server_side:
            self.client.submit(bad)
        self.assertIn("spec.training.lr", server_side.exception.fields)
        self.assertIn("spec.training.lr", str(server_side.exception))
        # Noticed before sending: the same exception, the same naming.
        typo = queued_spec("typo")
        typo["training"]["lrr"] = 1e-3
        with self.assertRaises(llamafleet.InvalidArgument) as client_side:
            self.client.submit(typo)
        self.assertEqual(client_side.exception.fields, ["spec.training.lrr"])
        self.assertIn("did you mean lr?", str(client_side.exception))
        # A batch names the job too, and stores nothing.
        with self.assertRaises(llamafleet.InvalidArgument) as batch:
            self.client.submit_many([queued_spec("ok-1", batch="bad"), bad])
        self.assertIn("jobs[1].spec.training.lr", batch.exception.fields)
        self.assertEqual(list(self.client.list(label="batch=bad")), [])
        with self.assertRaises(llamafleet.NotFound):
            self.client.get("999999")

    def test_yaml_file_dry_run_and_idempotency(self):
        path = os.path.join(self.root, "queued.yaml")
        with open(path, "w") as f:
            f.write("name: from-yaml\nlabels: {suite: yaml}\nmodel: {preset: tiny}\n"
                    "data: {train_path: %s, format: TOKENS}\n"
                    "training: {max_steps: 1, seq_len: 32, lr: 1e-4}\n"
                    "fsdp: {sharding: full_shard, mixed_precision: fp32}\n"
                    "resources: {nodes: 5, gpus_per_node: 1}\n" % os.path.join(self.root, "never-read.jsonl"))
        preview = self.client.submit(path, dry_run=True)
        self.assertEqual(preview.id, "")
        self.assertEqual(preview.spec.queue, "default")  # defaults filled in
        self.assertAlmostEqual(preview.spec.training.lr, 1e-4)
        self.assertEqual(list(self.client.list(label="suite=yaml")), [])
        first = self.client.submit(path, idempotency_key="yaml-once")
        again = self.client.submit(path, idempotency_key="yaml-once")
        self.assertEqual(first.id, again.id)
        self.assertEqual(len(list(self.client.list(label="suite=yaml"))), 1)
        self.client.cancel(first.id, reason="test over")

    def test_list_pages_and_filters(self):
        jobs = self.client.submit_many([queued_spec("page-%d" % i, suite="paging") for i in range(5)])
        ids = [j.id for j in jobs]
        self.assertEqual(len(set(ids)), 5)
        listed = [j.id for j in self.client.list(label={"suite": "paging"}, page_size=2)]
        self.assertEqual(listed, list(reversed(ids)))  # newest first, across 3 pages
        self.assertEqual(len(list(self.client.list(label="suite=paging", limit=3, page_size=2))), 3)
        self.assertEqual(list(self.client.list(label="suite=paging", state=["running", "failed"])), [])
        self.assertEqual(len(list(self.client.list(label="suite=paging", queue="default", state="QUEUED"))), 5)
        full = next(self.client.list(label="suite=paging", full=True))
        self.assertEqual(full.spec.model.preset, "tiny")
        for job_id in ids:
            self.client.cancel(job_id)

    def test_a_sweep_is_one_job_per_point(self):
        spec = queued_spec("py-sweep")
        spec["sweep"] = {"parameters": {"training.lr": [1e-4, 3e-4], "training.seed": [1, 2]}, "max_concurrent": 1}
        with self.assertRaises(llamafleet.InvalidArgument) as single:
            self.client.submit(spec)
        self.assertIn("submit_many", str(single.exception))
        jobs = self.client.submit_many([spec], idempotency_keys=["py-sweep-once"])
        self.assertEqual([j.spec.name for j in jobs], ["py-sweep-%d" % i for i in range(4)])
        self.assertEqual(jobs[1].spec.labels["training.seed"], "2")
        self.assertAlmostEqual(jobs[2].spec.training.lr, 3e-4)
        self.assertEqual(jobs[3].spec.sweep.point.points, 4)
        again = self.client.submit_many([spec], idempotency_keys=["py-sweep-once"])
        self.assertEqual([j.id for j in again], [j.id for j in jobs])
        self.assertEqual(len(list(self.client.list(label="sweep=py-sweep"))), 4)
        for job in jobs:
            self.client.cancel(job.id)

    def test_wait_times_out_then_cancel_ends_it(self):
        job = self.client.submit(queued_spec("never-placed"))
        start = time.monotonic()
        with self.assertRaises(llamafleet.DeadlineExceeded) as timed_out:
            self.client.wait(job.id, timeout=1.5, progress=False, poll_interval=0.2)
        self.assertIsInstance(timed_out.exception, TimeoutError)
        self.assertLess(time.monotonic() - start, 10)
        self.assertIn("QUEUED", str(timed_out.exception))
        cancelled = self.client.cancel(job.id, reason="python test")
        self.assertIn(cancelled.state, (job_pb2.CANCELLED,))
        self.assertEqual(self.client.wait(job, progress=False).state, job_pb2.CANCELLED)
        self.assertEqual(self.client.cancel(job.id).state, job_pb2.CANCELLED)  # idempotent

    def test_unreachable_address_is_named(self):
        with self.assertRaises(llamafleet.Unavailable) as e:
            llamafleet.Client("127.0.0.1:1", timeout=5).whoami()
        self.assertIn("cannot reach coordinator at 127.0.0.1:1", str(e.exception))
        with self.assertRaises(llamafleet.InvalidArgument):
            llamafleet.Client("no-port")

    def test_tls(self):
        tls = os.path.join(self.root, "tls")
        os.makedirs(tls)
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", os.path.join(tls, "key.pem"), "-out", os.path.join(tls, "cert.pem")],
                       check=True, capture_output=True)
        p, address = start_coordinator(self.root, "tls-coordinator", [
            "--insecure-no-auth", "--tls-cert", os.path.join(tls, "cert.pem"),
            "--tls-key", os.path.join(tls, "key.pem")])
        try:
            me = llamafleet.Client(address, tls_ca_file=os.path.join(tls, "cert.pem"), user="bob").whoami()
            self.assertEqual((me.user, me.auth_enabled), ("bob", False))
            old = os.environ.get("LLAMAFLEET_TLS_CA")
            os.environ["LLAMAFLEET_TLS_CA"] = os.path.join(tls, "cert.pem")
            try:
                self.assertEqual(llamafleet.Client(address, user="carol").whoami().user, "carol")
            finally:
                os.environ.pop("LLAMAFLEET_TLS_CA") if old is None else os.environ.update(LLAMAFLEET_TLS_CA=old)
            with self.assertRaises(llamafleet.Unavailable):  # plaintext to a TLS port
                llamafleet.Client(address, timeout=5).whoami()
        finally:
            stop(p)

    def test_pip_install_offline(self):
        # A copy of the two directories setup.py reads, so the checkout gets no build/.
        work = os.path.join(self.root, "pip")
        shutil.copytree(os.path.join(SOURCE_DIR, "clients", "python"), os.path.join(work, "clients", "python"),
                        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        shutil.copytree(os.path.join(SOURCE_DIR, "api"), os.path.join(work, "api"))
        venv = os.path.join(work, "venv")
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv], check=True)
        pip = subprocess.run([os.path.join(venv, "bin", "pip"), "install", "--no-index", "--no-build-isolation",
                              os.path.join(work, "clients", "python")], capture_output=True, text=True)
        self.assertEqual(pip.returncode, 0, pip.stdout + pip.stderr)
        check = subprocess.run(
            [os.path.join(venv, "bin", "python"), "-c",
             "import llamafleet, sys; print(llamafleet.__file__); print(llamafleet.Client().whoami().user)"],
            cwd=work, capture_output=True, text=True,
            env=dict(os.environ, LLAMAFLEET_COORDINATOR=self.address, LLAMAFLEET_TOKEN=self.token,
                     PYTHONPATH=""))
        self.assertEqual(check.returncode, 0, check.stderr)
        where, user = check.stdout.split()
        self.assertTrue(where.startswith(venv), where)
        self.assertEqual(user, "alice")


class SpecReadingTest(unittest.TestCase):
    """How the client reads job files and dicts (llamafleet.spec), without a coordinator."""

    def test_every_example_job_file_reads(self):
        from llamafleet.spec import specs_of
        examples = os.path.join(SOURCE_DIR, "deploy", "examples")
        for name in sorted(os.listdir(examples)):
            if name.endswith(".yaml"):
                with self.subTest(name):
                    self.assertTrue(specs_of(os.path.join(examples, name), single=False))

    def test_values_are_typed_by_the_field(self):
        from llamafleet.spec import load_documents, spec_from_value
        [doc] = load_documents("name: 123\nlabels: {team: yes, on: off}\ntraining: {lr: 1e-4, seed: 7}\n"
                               "fsdp: {sharding: hybrid_shard, activation_checkpointing: FALSE}\n"
                               "data: {trainPath: /d/t.jsonl, format: tokens}\nqueue: null\n")
        spec = spec_from_value(doc)
        self.assertEqual(spec.name, "123")
        self.assertEqual(dict(spec.labels), {"team": "yes", "on": "off"})
        self.assertAlmostEqual(spec.training.lr, 1e-4)
        self.assertEqual(spec.fsdp.sharding, job_pb2.HYBRID_SHARD)
        self.assertTrue(spec.fsdp.HasField("activation_checkpointing"))
        self.assertFalse(spec.fsdp.activation_checkpointing)
        self.assertEqual((spec.data.train_path, spec.data.format), ("/d/t.jsonl", job_pb2.TOKENS))
        self.assertEqual(spec.queue, "")
        # From Python, an enum may be the generated constant; from YAML only its name (as the CLI).
        self.assertEqual(spec_from_value({"data": {"format": job_pb2.TOKENS}}).data.format, job_pb2.TOKENS)
        with self.assertRaises(llamafleet.InvalidArgument) as e:
            spec_from_value(load_documents("data: {format: 3}\n")[0])
        self.assertEqual(e.exception.fields, ["spec.data.format"])

    def test_every_problem_is_named_at_once(self):
        from llamafleet.spec import specs_of
        with self.assertRaises(llamafleet.InvalidArgument) as e:
            specs_of({"training": {"lrr": 1, "seq_len": "abc", "micro_batch_size": 1 << 40, "betas": 0.9},
                      "fsdp": {"sharding": "full"}, "model": "tiny"}, single=True)
        self.assertEqual(sorted(e.exception.fields), [
            "spec.fsdp.sharding", "spec.model", "spec.training.betas", "spec.training.lrr",
            "spec.training.micro_batch_size", "spec.training.seq_len"])
        self.assertIn("did you mean lr?", str(e.exception))
        self.assertIn("expected one of FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD, NO_SHARD", str(e.exception))
        with self.assertRaises(llamafleet.InvalidArgument) as batch:
            specs_of([{"name": "ok"}, {"nmae": "typo"}], single=False)
        self.assertEqual(batch.exception.fields, ["jobs[1].spec.nmae"])

    def test_files_refuse_anchors_duplicates_and_several_jobs_for_one(self):
        from llamafleet.spec import load_documents, specs_of
        for text, what in (("a: &x {b: 1}\nc: *x\n", "anchors (&name)"), ("a: 1\na: 2\n", "given more than once"),
                           ("a: [1\n", "cannot parse"), ("---\n---\n", "contains no job spec")):
            with self.subTest(text):
                with self.assertRaises(llamafleet.InvalidArgument) as e:
                    load_documents(text)
                self.assertIn(what, str(e.exception))
        path = os.path.join(tempfile.mkdtemp(), "two.yaml")
        with open(path, "w") as f:
            f.write("name: a\n---\n[{name: b}, {name: c}]\n")
        self.assertEqual([s.name for s in specs_of(path, single=False)], ["a", "b", "c"])
        with self.assertRaises(llamafleet.InvalidArgument) as e:
            specs_of(path, single=True)
        self.assertIn("holds 3 job specs", str(e.exception))
        shutil.rmtree(os.path.dirname(path))


class UsageRecordTest(unittest.TestCase):
    """How usage messages read as records (llamafleet.records), without a coordinator: an
    unset cost is None, not 0.0."""

    def test_priced_and_unpriced_usage(self):
        job = job_pb2.Job(usage=job_pb2.Usage(gpu_seconds=7200, failed_gpu_seconds=3600, cost=20, failed_cost=10))
        self.assertEqual(llamafleet.usage_of(job), llamafleet.Usage(7200, 3600, 20, 10))
        self.assertEqual(llamafleet.usage_of(job).gpu_hours, 2)
        self.assertEqual(llamafleet.usage_of(job_pb2.Job(usage=job_pb2.Usage(gpu_seconds=5))),
                         llamafleet.Usage(5, 0, None, None))
        preempted = job_pb2.Attempt(state=job_pb2.ATTEMPT_STOPPED, failure_class="preempted", gpu_seconds=60, cost=1.5)
        self.assertEqual(llamafleet.usage_of(preempted), llamafleet.Usage(60, 60, 1.5, 1.5))
        cancelled = job_pb2.Attempt(state=job_pb2.ATTEMPT_STOPPED, gpu_seconds=60)
        self.assertEqual(llamafleet.usage_of(cancelled), llamafleet.Usage(60, 0, None, None))
        row = llamafleet.UsageRow.from_proto(job_pb2.UsageRow(user="a", queue="q", jobs=3, usage=job.usage))
        self.assertEqual((row.user, row.queue, row.jobs, row.usage.cost), ("a", "q", 3, 20))


if __name__ == "__main__":
    unittest.main(verbosity=2)
