"""Plain records the client returns where a protobuf message would be awkward: metrics
points (a table's rows) and log lines. Jobs, attempts, checkpoints, events, workers and
queues are returned as the API's own messages (llamafleet.v1, with .pyi type stubs)."""

import dataclasses
import datetime
from typing import List, Optional

from google.protobuf import timestamp_pb2


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

    @staticmethod
    def from_proto(p) -> "MetricsPoint":
        return MetricsPoint(p.step, p.total_steps, p.loss, p.lr, p.grad_norm, p.tokens_per_second,
                            p.tflops, p.mfu, p.peak_memory_bytes, to_datetime(p.time), p.attempt)


@dataclasses.dataclass(frozen=True)
class EvalPoint:
    """One evaluation on the job's data.eval_path (llamafleet.v1.EvalPoint)."""

    step: int  # the optimizer step evaluated after
    loss: float
    perplexity: float
    time: Optional[datetime.datetime]
    attempt: int

    @staticmethod
    def from_proto(p) -> "EvalPoint":
        return EvalPoint(p.step, p.loss, p.perplexity, to_datetime(p.time), p.attempt)


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
