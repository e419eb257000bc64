"""One exception hierarchy for everything the client raises about a call.

Every gRPC status code has its class, all under LlamafleetError, which carries the code,
the server's message and the field violations the coordinator attached (an
INVALID_ARGUMENT names every bad field: grpc-status-details-bin holds a
llamafleet.v1.ErrorDetails). Mistakes the client finds before sending anything (a job file
with an unknown field, a malformed address) raise the same classes, so a caller catches
InvalidArgument once whichever side noticed.
"""

import dataclasses
from typing import List, Optional

import grpc

_DETAILS_KEY = "grpc-status-details-bin"


@dataclasses.dataclass(frozen=True)
class FieldViolation:
    """One bad field: its path as the coordinator names it ("spec.training.lr",
    "jobs[2].spec.name"), the rule it broke, and where it is written in the job file
    (1-based; 0 when not known)."""

    field: str
    description: str
    line: int = 0
    column: int = 0

    def __str__(self):
        return "%s: %s" % (self.field or "spec", self.description)


class LlamafleetError(Exception):
    """A call failed. `code` is the grpc.StatusCode, `message` the server's (or the
    client's) text, `field_violations` one FieldViolation per bad field (may be empty)."""

    code = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str, field_violations: Optional[List[FieldViolation]] = None,
                 code: Optional[grpc.StatusCode] = None):
        super().__init__(message)
        self.message = message
        self.field_violations = list(field_violations or [])
        if code is not None:
            self.code = code

    @property
    def fields(self) -> List[str]:
        """The paths of the bad fields, in the server's order."""
        return [v.field for v in self.field_violations]

    def __str__(self):
        return self.message


class Cancelled(LlamafleetError):
    code = grpc.StatusCode.CANCELLED


class Unknown(LlamafleetError):
    code = grpc.StatusCode.UNKNOWN


class InvalidArgument(LlamafleetError):
    """The request (usually the job spec) breaks a rule; field_violations names each field."""
    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(LlamafleetError, TimeoutError):
    """No answer in time: the call's timeout, or wait()'s."""
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(LlamafleetError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(LlamafleetError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(LlamafleetError):
    """The token's role may not do this (a viewer submitting, a user cancelling another's job)."""
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(LlamafleetError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(LlamafleetError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(LlamafleetError):
    code = grpc.StatusCode.ABORTED


class OutOfRange(LlamafleetError):
    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(LlamafleetError):
    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(LlamafleetError):
    code = grpc.StatusCode.INTERNAL


class Unavailable(LlamafleetError):
    """The coordinator cannot be reached (the message names its address), or is shutting down."""
    code = grpc.StatusCode.UNAVAILABLE


class DataLoss(LlamafleetError):
    code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(LlamafleetError):
    """No token, a malformed one, or one the coordinator does not know (revoked)."""
    code = grpc.StatusCode.UNAUTHENTICATED


_BY_CODE = {cls.code: cls for cls in (
    Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
    PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange,
    Unimplemented, Internal, Unavailable, DataLoss, Unauthenticated)}


def error_class(code: grpc.StatusCode) -> type:
    """The LlamafleetError subclass of a gRPC status code (Unknown for any other)."""
    return _BY_CODE.get(code, Unknown)


def field_violations_of(trailing_metadata) -> List[FieldViolation]:
    """The violations in a call's grpc-status-details-bin, [] when there are none or the
    details do not parse as llamafleet.v1.ErrorDetails."""
    from llamafleet.v1 import job_pb2  # generated at build time

    for key, value in trailing_metadata or ():
        if key != _DETAILS_KEY:
            continue
        details = job_pb2.ErrorDetails()
        try:
            details.ParseFromString(value)
        except Exception:  # a proxy's google.rpc.Status, or garbage: no field detail
            return []
        return [FieldViolation(v.field, v.description, v.line, v.column) for v in details.field_violations]
    return []


def from_rpc_error(error: grpc.RpcError, address: str, reached: bool) -> LlamafleetError:
    """The LlamafleetError for a failed call to the coordinator at `address`. `reached`:
    whether any call of this client got an answer; an UNAVAILABLE before that means the
    address is wrong or nothing listens there, and the message says so."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = (error.details() if hasattr(error, "details") else None) or ""
    if code == grpc.StatusCode.UNAVAILABLE and not reached:
        message = "cannot reach coordinator at %s: %s" % (address, details)
    elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
        message = "%s coordinator at %s in time%s" % (
            "no answer from" if reached else "cannot reach", address, ": " + details if details else "")
    else:
        message = details or code.name
    trailing = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    return error_class(code)(message, field_violations_of(trailing), code)
