"""Plain records the client returns where a protobuf message would be awkward: metrics
points (a table's rows), log lines, and GPU time and cost (whose unset cost is None here,
not 0.0). Jobs, attempts, checkpoints, events, workers and queues are returned as the API's
own messages (llamafleet.v1, with .pyi type stubs); usage_of() reads their usage."""

import dataclasses
import datetime
from typing import Dict, List, Optional

from google.protobuf import timestamp_pb2

from llamafleet.v1 import job_pb2


def to_datetime(ts: timestamp_pb2.Timestamp) -> Optional[datetime.datetime]:
    """A Timestamp as an aware UTC datetime; None when unset (seconds and nanos 0)."""
    if ts is None or (ts.seconds == 0 and ts.nanos == 0):
        return None
    return ts.ToDatetime().replace(tzinfo=datetime.timezone.utc)


@dataclasses.dataclass(frozen=True)
class MetricsPoint:
    """One training metrics report of rank 0 (llamafleet.v1.JobMetricsPoint)."""

    step: int
    total_steps: int
    loss: float
    lr: float
    grad_norm: float
    tokens_per_second: float
    tflops: float
    mfu: float  # fraction of peak, 0..1
    peak_memory_bytes: int
    time: Optional[datetime.datetime]
    attempt: int
    # training.objective dpo: DPO's implicit rewards (TRL's rewards/*) over the same steps as
    # `loss`; None for other objectives.
    dpo_chosen: Optional[float] = None
    dpo_rejected: Optional[float] = None
    dpo_accuracy: Optional[float] = None  # fraction of pairs whose chosen reward is the greater
    dpo_margin: Optional[float] = None  # chosen - rejected

    @staticmethod
    def from_proto(p) -> "MetricsPoint":
        dpo = (p.dpo.chosen, p.dpo.rejected, p.dpo.accuracy, p.dpo.margin) if p.HasField("dpo") else (None,) * 4
        return MetricsPoint(p.step, p.total_steps, p.loss, p.lr, p.grad_norm, p.tokens_per_second,
                            p.tflops, p.mfu, p.peak_memory_bytes, to_datetime(p.time), p.attempt, *dpo)


@dataclasses.dataclass(frozen=True)
class EvalPoint:
    """One evaluation on one of the job's eval sets (llamafleet.v1.EvalPoint)."""

    step: int  # the optimizer step evaluated after
    loss: float
    perplexity: float
    time: Optional[datetime.datetime]
    attempt: int
    set: str = ""  # data.eval[i].name; "" for data.eval_path's

    @staticmethod
    def from_proto(p) -> "EvalPoint":
        return EvalPoint(p.step, p.loss, p.perplexity, to_datetime(p.time), p.attempt, getattr(p, "set", ""))


@dataclasses.dataclass(frozen=True)
class Sample:
    """What the model wrote for one prompt at an evaluation (eval.samples;
    llamafleet.v1.Sample)."""

    step: int  # the optimizer step evaluated after
    index: int  # the prompt's position in the samples' prompt list
    prompt: str  # as the model saw it (chat template applied)
    text: str
    tokens: int  # new tokens generated
    stop_reason: str  # "eos", "stop" or "length"
    reference: str  # "" when the prompt has none
    scores: Dict[str, float]  # eval.samples.score against the reference
    time: Optional[datetime.datetime]
    attempt: int

    @staticmethod
    def from_proto(p) -> "Sample":
        return Sample(p.step, p.index, p.prompt, p.text, p.tokens, p.stop_reason, p.reference, dict(p.scores),
                      to_datetime(p.time), p.attempt)


class SampleList(list):
    """Samples, oldest step first and by index, with `steps`: every step of the job that has
    samples, oldest first (whichever steps the list holds)."""

    def __init__(self, samples, steps):
        super().__init__(samples)
        self.steps: List[int] = list(steps)


def metrics_frame(points: list, record=MetricsPoint):
    """The points (MetricsPoint, or `record` records) as a pandas DataFrame, one row per
    point, columns named as the fields. Raises ImportError without pandas."""
    import pandas  # optional dependency

    columns = [f.name for f in dataclasses.fields(record)]
    return pandas.DataFrame([dataclasses.astuple(p) for p in points], columns=columns)


@dataclasses.dataclass(frozen=True)
class LogLine:
    """One line a trainer rank wrote; str() is the line itself."""

    attempt: int
    rank: int
    text: str

    def __str__(self):
        return self.text


@dataclasses.dataclass(frozen=True)
class Usage:
    """GPU time and cost (llamafleet.v1.Usage): ranks (GPUs, or CPU ranks) x wall time of
    every attempt, from placement to its end (an active one up to when it was read).
    failed_gpu_seconds is the part of attempts that failed or were preempted. cost is in the
    currency of the coordinator's pricing (per instance-hour): the priced attempts' cost,
    None when none was priced; failed_cost likewise."""

    gpu_seconds: float
    failed_gpu_seconds: float
    cost: Optional[float]
    failed_cost: Optional[float]

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / 3600.0

    @staticmethod
    def from_proto(u) -> "Usage":
        return Usage(u.gpu_seconds, u.failed_gpu_seconds, u.cost if u.HasField("cost") else None,
                     u.failed_cost if u.HasField("failed_cost") else None)


def usage_of(record) -> Usage:
    """The Usage of a Job, Queue or UsageRow message (its `usage` field), or of an Attempt
    (its gpu_seconds and cost; failed when it FAILED or was preempted)."""
    if record.DESCRIPTOR.full_name == "llamafleet.v1.Attempt":
        failed = record.state == job_pb2.ATTEMPT_FAILED or (
            record.state == job_pb2.ATTEMPT_STOPPED and record.failure_class == "preempted")
        cost = record.cost if record.HasField("cost") else None
        return Usage(record.gpu_seconds, record.gpu_seconds if failed else 0.0, cost,
                     None if cost is None else (cost if failed else 0.0))
    return Usage.from_proto(record.usage)


@dataclasses.dataclass(frozen=True)
class UsageRow:
    """One user's GPU time and cost in one queue, all time (deleted jobs included)."""

    user: str
    queue: str
    jobs: int  # jobs that held GPUs
    usage: Usage

    @staticmethod
    def from_proto(r) -> "UsageRow":
        return UsageRow(r.user, r.queue, r.jobs, Usage.from_proto(r.usage))
