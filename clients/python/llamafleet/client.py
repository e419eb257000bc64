"""Client: the coordinator's JobService (and the read-only WorkerService view) for Python.

One method per thing a user does, over the same RPCs as the `llamafleet` CLI. Jobs and
events come back as views of the API's messages whose states are JobState names
(states.py); attempts, checkpoints, workers and queues as the API's messages
(llamafleet.v1.job_pb2 / worker_pb2); metrics points, log lines and usage rows as
records.py's dataclasses. Every failure raises a llamafleet.errors.LlamafleetError subclass.
"""

import time
from typing import Iterator, List, Mapping, Optional, Sequence, Union

import grpc

from llamafleet import errors
from llamafleet.connection import Connection
from llamafleet.progress import Progress
from llamafleet.records import EvalPoint, LogLine, MetricsPoint, Sample, SampleList, UsageRow, metrics_frame
from llamafleet.spec import SpecLike, specs_of
from llamafleet.states import Job, JobEvent, JobState
from llamafleet.v1 import job_pb2, job_pb2_grpc, worker_pb2, worker_pb2_grpc

JobId = Union[str, int]

TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
# SubmitJobs takes at most this many jobs per call (job.proto).
MAX_BATCH = 1000
# GetJobEvents answers at most this many per call; fewer means there are no more.
_EVENTS_PER_CALL = 1000
# How long wait() keeps retrying while the coordinator cannot be reached (a restart).
_WAIT_RESUME_WINDOW_S = 60.0


def _maybe_frame(records: list, record, as_frame: Optional[bool]):
    """`records` as a DataFrame (as_frame True, or None with pandas importable), else the list."""
    if as_frame is False:
        return records
    if as_frame is None:
        try:
            import pandas  # noqa: F401
        except ImportError:
            return records
    return metrics_frame(records, record)


def _job_id(job_id: JobId) -> str:
    if isinstance(job_id, (job_pb2.Job, Job)):
        return job_id.id
    return str(job_id)


def _enum_values(enum, value, what: str) -> List[int]:
    """Enum numbers from a name (any case), a number, or a list of them."""
    items = value if isinstance(value, (list, tuple, set, frozenset)) else [value]
    numbers = []
    for item in items:
        if isinstance(item, int) and not isinstance(item, bool) and item in enum.values():
            numbers.append(item)
            continue
        match = [n for name, n in enum.items() if isinstance(item, str) and name.lower() == item.lower() and n != 0]
        if not match:
            names = ", ".join(name for name, n in enum.items() if n != 0)
            raise errors.InvalidArgument("%s: unknown value '%s' (expected one of %s)" % (what, item, names),
                                         [errors.FieldViolation(what, "unknown value '%s'" % (item,))])
        numbers.extend(match)
    return numbers


def _labels(label) -> List[str]:
    """A label selector as ["k=v", ...] from "k=v", a list of those, or a dict."""
    if label is None:
        return []
    if isinstance(label, Mapping):
        return ["%s=%s" % (k, v) for k, v in label.items()]
    if isinstance(label, str):
        return [label]
    return [str(x) for x in label]


class Client:
    """A connection to one coordinator.

        client = Client()                       # $LLAMAFLEET_COORDINATOR, $LLAMAFLEET_TOKEN
        job = client.submit("job.yaml")
        client.wait(job.id)

    `address` is HOST:PORT (default $LLAMAFLEET_COORDINATOR, else 127.0.0.1:7070); `token` a
    bearer token (default $LLAMAFLEET_TOKEN); `tls_ca_file` the PEM CA of the coordinator's
    certificate, which makes the channel TLS (default $LLAMAFLEET_TLS_CA; unset = plaintext);
    `user` names the caller to a coordinator running with --insecure-no-auth (default $USER);
    `timeout` bounds each unary call in seconds (streams and wait() take their own).
    Connecting is lazy: a wrong address surfaces on the first call as Unavailable naming it.
    Usable as a context manager, which closes the channel.
    """

    def __init__(self, address: Optional[str] = None, token: Optional[str] = None, *,
                 tls_ca_file: Optional[str] = None, user: Optional[str] = None, timeout: float = 30.0):
        self._conn = Connection.resolve(address, token, tls_ca_file, user, timeout)
        self._channel = self._conn.channel()
        self._jobs = job_pb2_grpc.JobServiceStub(self._channel)
        self._workers = worker_pb2_grpc.WorkerServiceStub(self._channel)
        self._metadata = self._conn.metadata()
        # Whether any call got an answer from the coordinator (for "cannot reach" messages).
        self._reached = False

    @property
    def address(self) -> str:
        """The coordinator's address, HOST:PORT."""
        return self._conn.address

    def close(self):
        """Closes the channel; calls after this fail."""
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ plumbing

    def _error(self, e: grpc.RpcError) -> errors.LlamafleetError:
        code = e.code() if hasattr(e, "code") else None
        if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, None):
            self._reached = True  # the coordinator answered
        return errors.from_rpc_error(e, self._conn.address, self._reached)

    def _call(self, method, request, timeout: Optional[float] = None):
        try:
            response = method(request, timeout=timeout or self._conn.timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise self._error(e) from None
        self._reached = True
        return response

    def _stream(self, method, request, timeout: Optional[float] = None) -> Iterator:
        """The messages of a server stream; breaking off the iteration cancels the call."""
        call = method(request, timeout=timeout, metadata=self._metadata)
        try:
            for message in call:
                self._reached = True
                yield message
        except grpc.RpcError as e:
            raise self._error(e) from None
        finally:
            call.cancel()

    # ------------------------------------------------------------------ submitting

    def submit(self, spec: SpecLike, idempotency_key: Optional[str] = None, dry_run: bool = False) -> Job:
        """Submits one job and returns it as stored (the effective spec, defaults filled in).

        `spec` is a JobSpec, a dict in the job file's shape, or the path of a YAML/JSON job
        file holding one spec (llamafleet.spec says how values are read). With an
        `idempotency_key` this owner already used, the existing job comes back and nothing
        is stored. `dry_run` validates and fills in defaults only: the returned job has no
        id, its spec is the effective one, and its memory_estimate is set when the model's
        shape is known. A bad spec raises InvalidArgument with one FieldViolation per field
        ("spec.training.lr"). A sweep (sweep.parameters) makes one job per point: submit it
        with submit_many."""
        request = job_pb2.SubmitJobRequest(spec=specs_of(spec, single=True)[0], dry_run=dry_run,
                                           idempotency_key=idempotency_key or "")
        return Job(self._call(self._jobs.SubmitJob, request).job)

    def submit_many(self, specs: Union[SpecLike, Sequence[SpecLike]], dry_run: bool = False,
                    idempotency_keys: Optional[Sequence[str]] = None) -> List[Job]:
        """Submits several jobs, in order, and returns them in the same order (a sweep's
        points in its place, one job each).

        `specs` is a list of JobSpecs, dicts and job file paths, or one file path (every
        document of it; a document may also be a list of specs). Each call of at most 1000
        jobs is stored whole or not at all; when a later call fails, the earlier ones stay
        stored and the error's message says how many. `idempotency_keys`, when given, has
        one key (or "" / None) per job. Violations are named "jobs[i].spec.<field>"."""
        parsed = specs_of(specs, single=False)
        keys = list(idempotency_keys) if idempotency_keys is not None else [""] * len(parsed)
        if len(keys) != len(parsed):
            raise errors.InvalidArgument("idempotency_keys: %d keys for %d jobs" % (len(keys), len(parsed)),
                                         [errors.FieldViolation("idempotency_keys", "one key per job")])
        jobs: List[Job] = []
        for begin in range(0, len(parsed), MAX_BATCH):
            request = job_pb2.SubmitJobsRequest(dry_run=dry_run)
            for spec, key in zip(parsed[begin:begin + MAX_BATCH], keys[begin:begin + MAX_BATCH]):
                request.jobs.add(spec=spec, idempotency_key=key or "")
            try:
                response = self._call(self._jobs.SubmitJobs, request)
            except errors.LlamafleetError as e:
                if begin == 0:
                    raise
                raise type(e)("jobs %d-%d (the first %d were submitted): %s" % (
                    begin + 1, begin + len(request.jobs), begin, e.message), e.field_violations, e.code) from None
            jobs.extend(Job(r.job) for r in response.jobs)
        return jobs

    # ------------------------------------------------------------------ reading jobs

    def get(self, job_id: JobId) -> Job:
        """The job with its full effective spec, pending explanation, latest metrics and
        memory estimate. Raises NotFound for an unknown id."""
        return Job(self._call(self._jobs.GetJob, job_pb2.GetJobRequest(job_id=_job_id(job_id))))

    def list(self, state=None, queue: Optional[str] = None, label=None, owner: Optional[str] = None,
             name_contains: Optional[str] = None, order_by: Optional[str] = None, full: bool = False,
             page_size: int = 100, limit: Optional[int] = None) -> Iterator[Job]:
        """Jobs matching every filter given, newest first unless `order_by` says otherwise
        ("name", "-priority", ...), fetched page by page as the iteration goes.

        `state`: a JobState name ("running", any case), number, or a list of them (any of).
        `label`: "k=v", a list of those or a dict (all must match). `full`: whole specs
        (JOB_VIEW_FULL) instead of the summary a list shows. `limit`: stop after that many."""
        request = job_pb2.ListJobsRequest(
            states=_enum_values(job_pb2.JobState, state, "state") if state is not None else [],
            queue=queue or "", owner=owner or "", labels=_labels(label), page_size=page_size,
            name_contains=name_contains or "", order_by=order_by or "",
            view=job_pb2.JOB_VIEW_FULL if full else job_pb2.JOB_VIEW_BASIC)
        return self._pages(request, limit)

    def _pages(self, request: job_pb2.ListJobsRequest, limit: Optional[int]) -> Iterator[Job]:
        """list()'s iterator: the filters were checked when list() was called, the pages are
        fetched as the iteration reaches them."""
        returned = 0
        while True:
            response = self._call(self._jobs.ListJobs, request)
            for job in response.jobs:
                if limit is not None and returned >= limit:
                    return
                returned += 1
                yield Job(job)
            if not response.next_page_token:
                return
            request.page_token = response.next_page_token

    def cancel(self, job_id: JobId, reason: str = "") -> Job:
        """Cancels the job (idempotent) and returns it; a job already terminal comes back
        unchanged. `reason` shows in its events."""
        request = job_pb2.CancelJobRequest(job_id=_job_id(job_id), reason=reason)
        return Job(self._call(self._jobs.CancelJob, request).job)

    def delete(self, job_id: JobId, artifacts: bool = False) -> List[str]:
        """Deletes a finished job: its records, logs and default checkpoint dir, and with
        `artifacts` its output.export_dir. Returns a line per thing removed or kept. A job
        that has not finished raises FailedPrecondition (cancel it first)."""
        request = job_pb2.DeleteJobRequest(job_id=_job_id(job_id), artifacts=artifacts)
        return list(self._call(self._jobs.DeleteJob, request).removed)

    def wait(self, job_id: JobId, timeout: Optional[float] = None, progress: bool = True,
             poll_interval: float = 1.0) -> Job:
        """Waits until the job is SUCCEEDED, FAILED or CANCELLED and returns it; its state
        says which (a failed job does not raise). `timeout` in seconds (None = no limit)
        raises DeadlineExceeded, which is also a TimeoutError. `progress` shows step/total,
        loss and tokens/s on stderr: a tqdm bar on a terminal when tqdm is installed, else a
        line per change. The coordinator is looked at every `poll_interval` seconds; while
        it cannot be reached (a restart) the wait goes on for up to a minute."""
        deadline = None if timeout is None else time.monotonic() + timeout
        shown = Progress(enabled=progress)
        unreachable_since = None
        job = None
        try:
            while True:
                try:
                    job = self.get(job_id)
                    unreachable_since = None
                except errors.Unavailable:
                    unreachable_since = unreachable_since or time.monotonic()
                    if time.monotonic() - unreachable_since > _WAIT_RESUME_WINDOW_S:
                        raise
                else:
                    if job.state in TERMINAL_STATES:
                        return job
                    shown.update(job)
                if deadline is not None and time.monotonic() >= deadline:
                    state = job_pb2.JobState.Name(job.state) if job is not None else "unknown"
                    raise errors.DeadlineExceeded("job %s still %s after %gs (wait timeout)" % (
                        _job_id(job_id), state, timeout))
                pause = poll_interval if deadline is None else min(poll_interval, max(0.0, deadline - time.monotonic()))
                time.sleep(pause)
        finally:
            shown.close(job if job is not None and job.state in TERMINAL_STATES else None)

    def logs(self, job_id: JobId, follow: bool = True, rank: Optional[int] = None, attempt: int = 0,
             tail_lines: int = 0) -> Iterator[LogLine]:
        """The log lines of the job's trainer ranks, as they come. `follow` keeps the
        iteration going until the job ends; without it, it ends at the logs' current end.
        `rank`: only that global rank (None = all ranks, interleaved by chunk). `attempt`:
        which attempt (0 = the newest). `tail_lines`: start that many lines before the end
        of each rank's log (0 = from the beginning)."""
        request = job_pb2.StreamJobLogsRequest(job_id=_job_id(job_id), attempt=attempt,
                                               rank=-1 if rank is None else rank, follow=follow,
                                               tail_lines=tail_lines)
        for chunk in self._stream(self._jobs.StreamJobLogs, request):
            for line in chunk.lines:
                yield LogLine(chunk.attempt, chunk.rank, line)

    def events(self, job_id: JobId, after_seq: int = 0, follow: bool = False) -> Iterator[JobEvent]:
        """The job's events with seq > after_seq, oldest first. With `follow`, goes on with
        each new event as it happens and ends after the one that makes the job terminal."""
        job_id = _job_id(job_id)
        if follow:
            request = job_pb2.WatchJobRequest(job_id=job_id, after_seq=after_seq)
            for message in self._stream(self._jobs.WatchJob, request):
                if message.HasField("event"):
                    yield JobEvent(message.event)
            return
        while True:
            request = job_pb2.GetJobEventsRequest(job_id=job_id, after_seq=after_seq, limit=_EVENTS_PER_CALL)
            response = self._call(self._jobs.GetJobEvents, request)
            yield from (JobEvent(e) for e in response.events)
            if len(response.events) < _EVENTS_PER_CALL:
                return
            after_seq = response.events[-1].seq

    def metrics(self, job_id: JobId, max_points: int = 500, as_frame: Optional[bool] = None):
        """The job's training metrics history, oldest first, downsampled by the coordinator
        to at most `max_points` (it allows up to 5000).

        Returns a list of MetricsPoint, or a pandas DataFrame with the same columns:
        `as_frame` None = a DataFrame when pandas is importable, True = a DataFrame (raises
        ImportError without pandas), False = the list."""
        request = job_pb2.GetJobMetricsRequest(job_id=_job_id(job_id), max_points=max_points)
        points = [MetricsPoint.from_proto(p) for p in self._call(self._jobs.GetJobMetrics, request).points]
        return _maybe_frame(points, MetricsPoint, as_frame)

    def evals(self, job_id: JobId, max_points: int = 500, as_frame: Optional[bool] = None):
        """Every evaluation on the job's eval sets (data.eval_path, or each of data.eval,
        told apart by EvalPoint.set) after training.eval_every_steps steps and after the
        last, all attempts, oldest first, at most the newest `max_points`. A list of EvalPoint, or a DataFrame as metrics() decides."""
        request = job_pb2.GetJobMetricsRequest(job_id=_job_id(job_id), max_points=max_points)
        evals = [EvalPoint.from_proto(e) for e in self._call(self._jobs.GetJobMetrics, request).evals]
        return _maybe_frame(evals, EvalPoint, as_frame)

    def samples(self, job_id: JobId, step: Optional[int] = None, latest: bool = False) -> SampleList:
        """What the model wrote at the job's evaluations (eval.samples): every step, only
        `step`, or (latest=True) only the latest step that has samples. A SampleList of
        Sample, oldest step first and by index; its `steps` lists every step with samples.
        The coordinator keeps the newest 100 steps of a job."""
        if step is not None and step <= 0:
            raise ValueError("step must be a positive step number (None for every step)")
        request = job_pb2.ListSamplesRequest(job_id=_job_id(job_id), step=step or 0, latest=latest)
        response = self._call(self._jobs.ListSamples, request)
        return SampleList([Sample.from_proto(s) for s in response.samples], response.steps)

    def checkpoints(self, job_id: JobId) -> List[job_pb2.Checkpoint]:
        """The job's recorded (complete) checkpoints, newest first."""
        request = job_pb2.ListCheckpointsRequest(job_id=_job_id(job_id))
        return list(self._call(self._jobs.ListCheckpoints, request).checkpoints)

    def attempts(self, job_id: JobId) -> List[job_pb2.Attempt]:
        """Every attempt of the job, newest first: outcome, failure class, tasks, start-up phases."""
        request = job_pb2.ListAttemptsRequest(job_id=_job_id(job_id))
        return list(self._call(self._jobs.ListAttempts, request).attempts)

    # ------------------------------------------------------------------ the cluster

    def workers(self) -> List[worker_pb2.WorkerInfo]:
        """Every registered worker, live or lost, with its inventory and allocation."""
        return list(self._call(self._workers.ListWorkers, worker_pb2.ListWorkersRequest()).workers)

    def queues(self) -> List[job_pb2.Queue]:
        """Every queue with jobs or a quota: depth, running jobs, GPUs in use, quota."""
        return list(self._call(self._jobs.ListQueues, job_pb2.ListQueuesRequest()).queues)

    def usage(self, user: Optional[str] = None) -> List[UsageRow]:
        """GPU time and cost per user and queue, all time (deleted jobs included, active
        attempts up to now), by user then queue: only `user`'s rows when given. A job's own
        is on the job: usage_of(client.get(job_id))."""
        request = job_pb2.GetUsageRequest(user=user or "")
        return [UsageRow.from_proto(r) for r in self._call(self._jobs.GetUsage, request).rows]

    def whoami(self) -> job_pb2.WhoAmIResponse:
        """The user and role the caller's token names (auth_enabled False: no tokens checked)."""
        return self._call(self._jobs.WhoAmI, job_pb2.WhoAmIRequest())

