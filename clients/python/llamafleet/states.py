"""Job states by name. The API's messages hold enums as numbers (job.state == 4); the
client hands jobs and events back as thin views of those messages whose states are
JobState members: they print as their names ("SUCCEEDED") and compare equal to the
numbers (job_pb2.SUCCEEDED, 4), so code written against the numbers keeps working.

    job = client.get(3)
    print(job.state)                         # SUCCEEDED
    job.state == llamafleet.JobState.SUCCEEDED == job_pb2.SUCCEEDED == 4
    job.proto                                # the llamafleet.v1.Job message itself
"""

import enum
from typing import Iterable, List, Tuple, Union

from llamafleet.v1 import job_pb2


class _NamedIntEnum(enum.IntEnum):
    """An IntEnum that prints as its name (an IntEnum prints as its number from Python 3.11
    on), with the lookups of protobuf's enum wrappers (Name, Value, keys, values, items)."""

    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        return format(self.name, spec)

    @classmethod
    def Name(cls, number: int) -> str:  # noqa: N802 (protobuf's spelling)
        """The name of a number; ValueError for one this client does not know."""
        try:
            return cls(number).name
        except ValueError:
            raise ValueError("%d is not a %s" % (number, cls.__name__)) from None

    @classmethod
    def Value(cls, name: str) -> int:  # noqa: N802 (protobuf's spelling)
        """The member of a name; ValueError for one this client does not know."""
        try:
            return cls[name]
        except KeyError:
            raise ValueError("%r is not a %s" % (name, cls.__name__)) from None

    @classmethod
    def keys(cls) -> List[str]:
        return [m.name for m in cls]

    @classmethod
    def values(cls) -> List[int]:
        return [m.value for m in cls]

    @classmethod
    def items(cls) -> List[Tuple[str, int]]:
        return [(m.name, m.value) for m in cls]


JobState = _NamedIntEnum("JobState", job_pb2.JobState.items())
JobState.__doc__ = "llamafleet.v1.JobState: members print as names and equal their numbers."


def job_state(number: int) -> Union[JobState, int]:
    """`number` as a JobState member; the number itself when this client does not know it
    (a newer coordinator's state)."""
    try:
        return JobState(number)
    except ValueError:
        return number


class _View:
    """A read-only view of a message: every attribute is the message's, but those named in
    _STATES come back as JobState members. `proto` is the message."""

    __slots__ = ("proto",)
    _STATES: Iterable[str] = ()

    def __init__(self, proto):
        object.__setattr__(self, "proto", proto)

    def __getattr__(self, name):
        value = getattr(object.__getattribute__(self, "proto"), name)
        return job_state(value) if name in type(self)._STATES else value

    def __setattr__(self, name, value):
        raise AttributeError("%s is a read-only view; change .proto instead" % type(self).__name__)

    def __eq__(self, other):
        other = other.proto if isinstance(other, _View) else other
        return self.proto == other

    def __hash__(self):
        return id(self)

    def __str__(self):
        return str(self.proto)

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, repr(self.proto))


class Job(_View):
    """A llamafleet.v1.Job as the client returns it: `state` is a JobState; the rest, and
    the message's methods, are the message's (`job.proto` is the message)."""

    __slots__ = ()
    _STATES = ("state",)


class JobEvent(_View):
    """A llamafleet.v1.JobEvent: `from_state` and `to_state` are JobStates."""

    __slots__ = ()
    _STATES = ("from_state", "to_state")
