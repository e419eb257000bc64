"""llamafleet: submit and follow Llama-2 finetuning jobs on a llamafleet coordinator.

    import llamafleet
    client = llamafleet.Client()          # $LLAMAFLEET_COORDINATOR, $LLAMAFLEET_TOKEN, $LLAMAFLEET_TLS_CA
    job = client.submit("job.yaml")       # or a dict, or a llamafleet.v1.job_pb2.JobSpec
    job = client.wait(job.id)             # a progress bar on a terminal
    for line in client.logs(job.id):
        print(line)

The API's messages are in llamafleet.v1 (job_pb2, worker_pb2), generated from
api/llamafleet/v1/*.proto when the package is built; docs/python-client.md has the rest.
Jobs come back with their states as names that compare equal to the numbers
(llamafleet.states).
"""

# What the client runs on, named with how to install it, rather than a bare
# ModuleNotFoundError from deep inside.
try:
    import google.protobuf  # noqa: F401
    import grpc  # noqa: F401
    import yaml  # noqa: F401
except ImportError as _missing:
    raise ImportError(
        "llamafleet needs grpcio, protobuf (>= 3.20) and PyYAML, and cannot import %s: install them with "
        "'apt-get install python3-grpcio python3-protobuf python3-yaml' (Debian) or "
        "'pip install grpcio protobuf PyYAML'" % (_missing.name or _missing)) from _missing
try:
    from llamafleet.v1 import job_pb2, worker_pb2
except ImportError as _missing:
    raise ImportError(
        "llamafleet.v1 (the generated API stubs) cannot be imported (%s): use the package built by "
        "'cmake --build build --target llamafleet_python' (PYTHONPATH=build/python) or installed with "
        "'pip install --no-build-isolation clients/python'" % _missing) from _missing

from llamafleet.client import TERMINAL_STATES, Client
from llamafleet.errors import (Aborted, AlreadyExists, Cancelled, DataLoss, DeadlineExceeded,
                               FailedPrecondition, FieldViolation, Internal, InvalidArgument,
                               LlamafleetError, NotFound, OutOfRange, PermissionDenied,
                               ResourceExhausted, Unauthenticated, Unavailable, Unimplemented,
                               Unknown)
from llamafleet.progress import state_name
from llamafleet.records import EvalPoint, LogLine, MetricsPoint, Sample, SampleList, Usage, UsageRow, usage_of
from llamafleet.states import Job, JobEvent, JobState
from llamafleet.v1.job_pb2 import JobSpec

__version__ = "0.1.0"

__all__ = [
    "Client", "TERMINAL_STATES", "EvalPoint", "Job", "JobEvent", "JobSpec", "JobState", "LogLine", "MetricsPoint", "Sample", "SampleList", "Usage",
    "UsageRow", "usage_of", "state_name",
    "job_pb2", "worker_pb2", "FieldViolation", "LlamafleetError", "Aborted", "AlreadyExists",
    "Cancelled", "DataLoss", "DeadlineExceeded", "FailedPrecondition", "Internal", "InvalidArgument",
    "NotFound", "OutOfRange", "PermissionDenied", "ResourceExhausted", "Unauthenticated",
    "Unavailable", "Unimplemented", "Unknown",
]
