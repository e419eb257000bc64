"""llamafleet: submit and follow Llama-2 finetuning jobs on a llamafleet coordinator.

    import llamafleet
    client = llamafleet.Client()          # $LLAMAFLEET_COORDINATOR, $LLAMAFLEET_TOKEN, $LLAMAFLEET_TLS_CA
    job = client.submit("job.yaml")       # or a dict, or a llamafleet.v1.job_pb2.JobSpec
    job = client.wait(job.id)             # a progress bar on a terminal
    for line in client.logs(job.id):
        print(line)

The API's messages are in llamafleet.v1 (job_pb2, worker_pb2), generated from
api/llamafleet/v1/*.proto when the package is built; docs/python-client.md has the rest.
"""

from llamafleet.client import TERMINAL_STATES, Client
from llamafleet.errors import (Aborted, AlreadyExists, Cancelled, DataLoss, DeadlineExceeded,
                               FailedPrecondition, FieldViolation, Internal, InvalidArgument,
                               LlamafleetError, NotFound, OutOfRange, PermissionDenied,
                               ResourceExhausted, Unauthenticated, Unavailable, Unimplemented,
                               Unknown)
from llamafleet.progress import state_name
from llamafleet.records import EvalPoint, LogLine, MetricsPoint, Usage, UsageRow, usage_of
from llamafleet.v1 import job_pb2, worker_pb2
from llamafleet.v1.job_pb2 import JobSpec, JobState

__version__ = "0.1.0"

__all__ = [
    "Client", "TERMINAL_STATES", "EvalPoint", "JobSpec", "JobState", "LogLine", "MetricsPoint", "Usage",
    "UsageRow", "usage_of", "state_name",
    "job_pb2", "worker_pb2", "FieldViolation", "LlamafleetError", "Aborted", "AlreadyExists",
    "Cancelled", "DataLoss", "DeadlineExceeded", "FailedPrecondition", "Internal", "InvalidArgument",
    "NotFound", "OutOfRange", "PermissionDenied", "ResourceExhausted", "Unauthenticated",
    "Unavailable", "Unimplemented", "Unknown",
]
