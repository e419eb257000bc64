#!/usr/bin/env python3
"""The Python client (clients/python) without a coordinator, in about a second: job states
come back as names that still compare equal to their numbers (against a fake JobService
on a local port), samples and DPO rewards come back as records, every Client method is in docs/python-client.md, and importing the
package without grpcio says what to install.

    python_client_unit_test.py PYTHON_DIR SOURCE_DIR [unittest args]
"""

import concurrent.futures
import inspect
import os
import subprocess
import sys
import unittest

PYTHON_DIR, SOURCE_DIR = (os.path.abspath(a) for a in sys.argv[1:3])
del sys.argv[1:3]
sys.path.insert(0, PYTHON_DIR)

import grpc  # noqa: E402

import llamafleet  # noqa: E402
from llamafleet.v1 import job_pb2, job_pb2_grpc  # noqa: E402


class FakeJobService(job_pb2_grpc.JobServiceServicer):
    """Job 7 SUCCEEDED, job 8 QUEUED; events of job 7 from QUEUED to SUCCEEDED."""

    JOBS = {"7": job_pb2.SUCCEEDED, "8": job_pb2.QUEUED}

    def GetJob(self, request, context):
        if request.job_id not in self.JOBS:
            context.abort(grpc.StatusCode.NOT_FOUND, "job %s not found" % request.job_id)
        return job_pb2.Job(id=request.job_id, state=self.JOBS[request.job_id])

    def ListJobs(self, request, context):
        return job_pb2.ListJobsResponse(jobs=[job_pb2.Job(id=i, state=s) for i, s in self.JOBS.items()])

    def CancelJob(self, request, context):
        return job_pb2.CancelJobResponse(job=job_pb2.Job(id=request.job_id, state=job_pb2.CANCELLED))

    def GetJobEvents(self, request, context):
        return job_pb2.GetJobEventsResponse(events=[job_pb2.JobEvent(
            job_id=request.job_id, seq=1, from_state=job_pb2.QUEUED, to_state=job_pb2.SUCCEEDED)])

    def GetJobMetrics(self, request, context):
        return job_pb2.GetJobMetricsResponse(points=[
            job_pb2.JobMetricsPoint(step=1, loss=0.69),
            job_pb2.JobMetricsPoint(step=2, loss=0.5, dpo=job_pb2.DpoRewards(
                chosen=0.25, rejected=-0.125, accuracy=0.75, margin=0.375))])

    def ListSamples(self, request, context):
        """Steps 10 and 20, two prompts each; `latest` and `step` select as the server does."""
        self.last_samples_request = request
        samples = [job_pb2.Sample(attempt=1, step=st, index=i, prompt="Q%d" % i, text="A%d at %d" % (i, st),
                                  tokens=3, stop_reason="eos", reference="A%d" % i,
                                  scores={"exact_match": 0.0, "contains": 1.0})
                   for st in (10, 20) for i in (0, 1)]
        step = 20 if request.latest else request.step
        return job_pb2.ListSamplesResponse(samples=[x for x in samples if step in (0, x.step)], steps=[10, 20])


class FakeServiceTest(unittest.TestCase):
    """A Client connected to FakeJobService on a real local gRPC server."""

    @classmethod
    def setUpClass(cls):
        cls.service = FakeJobService()
        cls.server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2))
        job_pb2_grpc.add_JobServiceServicer_to_server(cls.service, cls.server)
        port = cls.server.add_insecure_port("127.0.0.1:0")
        cls.server.start()
        cls.client = llamafleet.Client("127.0.0.1:%d" % port, timeout=5)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.stop(None)


class JobStateTest(FakeServiceTest):
    def test_states_print_as_names_and_compare_as_numbers(self):
        job = self.client.get("7")
        self.assertEqual(str(job.state), "SUCCEEDED")
        self.assertEqual("%s" % job.state, "SUCCEEDED")
        self.assertEqual("{}".format(job.state), "SUCCEEDED")
        self.assertIn("SUCCEEDED", repr(job.state))
        self.assertEqual(job.state.name, "SUCCEEDED")
        # Comparisons that worked with the number keep working.
        self.assertEqual(job.state, job_pb2.SUCCEEDED)
        self.assertEqual(job.state, 4)
        self.assertEqual(job.state, llamafleet.JobState.SUCCEEDED)
        self.assertIn(job.state, llamafleet.TERMINAL_STATES)
        self.assertEqual(llamafleet.JobState.Name(job.state), "SUCCEEDED")
        self.assertEqual(llamafleet.JobState.Value("SUCCEEDED"), job_pb2.SUCCEEDED)
        self.assertEqual(llamafleet.state_name(job.state), "SUCCEEDED")
        # The rest of the job is the message's.
        self.assertEqual(job.id, "7")
        self.assertEqual(self.client.get(job).id, "7")

    def test_every_method_returning_jobs_names_their_states(self):
        self.assertEqual([str(j.state) for j in self.client.list()], ["SUCCEEDED", "QUEUED"])
        self.assertEqual(str(self.client.cancel("8").state), "CANCELLED")
        self.assertEqual(str(self.client.wait("7", progress=False).state), "SUCCEEDED")
        event = next(iter(self.client.events("7")))
        self.assertEqual((str(event.from_state), str(event.to_state)), ("QUEUED", "SUCCEEDED"))
        self.assertEqual(event.to_state, job_pb2.SUCCEEDED)


class SamplesAndDpoTest(FakeServiceTest):
    def test_samples_by_step_latest_and_all(self):
        every = self.client.samples("7")
        self.assertEqual(every.steps, [10, 20])
        self.assertEqual([(x.step, x.index) for x in every], [(10, 0), (10, 1), (20, 0), (20, 1)])
        first = every[0]
        self.assertIsInstance(first, llamafleet.Sample)
        self.assertEqual((first.prompt, first.text, first.reference, first.stop_reason, first.tokens, first.attempt),
                         ("Q0", "A0 at 10", "A0", "eos", 3, 1))
        self.assertEqual(first.scores, {"exact_match": 0.0, "contains": 1.0})
        self.assertEqual([x.step for x in self.client.samples("7", step=10)], [10, 10])
        self.assertEqual(self.service.last_samples_request.step, 10)
        latest = self.client.samples("7", latest=True)
        self.assertEqual([x.text for x in latest], ["A0 at 20", "A1 at 20"])
        self.assertTrue(self.service.last_samples_request.latest)
        with self.assertRaises(ValueError):
            self.client.samples("7", step=0)

    def test_metrics_carry_dpo_rewards_where_the_job_has_them(self):
        points = self.client.metrics("7", as_frame=False)
        self.assertIsNone(points[0].dpo_chosen)
        self.assertEqual((points[1].dpo_chosen, points[1].dpo_rejected, points[1].dpo_accuracy, points[1].dpo_margin),
                         (0.25, -0.125, 0.75, 0.375))


class DocsTest(unittest.TestCase):
    def test_every_public_method_is_documented(self):
        with open(os.path.join(SOURCE_DIR, "docs", "python-client.md")) as f:
            docs = f.read()
        for name, _ in inspect.getmembers(llamafleet.Client, inspect.isfunction):
            if not name.startswith("_") and name != "close":
                self.assertTrue("`%s(" % name in docs, "Client.%s is not in docs/python-client.md" % name)


class ImportTest(unittest.TestCase):
    def test_without_grpc_the_error_says_what_to_install(self):
        code = "import sys; sys.modules['grpc'] = None; sys.path.insert(0, %r); import llamafleet" % PYTHON_DIR
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        last = r.stderr.strip().splitlines()[-1]
        self.assertTrue(last.startswith("ImportError: "), r.stderr)
        self.assertIn("python3-grpcio", last)
        self.assertIn("pip install", last)
        self.assertIn("grpcio", last)


if __name__ == "__main__":
    unittest.main()
