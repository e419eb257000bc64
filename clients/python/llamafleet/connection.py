"""Where the coordinator is and who is calling, resolved as the `llamafleet` CLI does.

    address  the argument, else $LLAMAFLEET_COORDINATOR, else 127.0.0.1:7070
    token    the argument, else $LLAMAFLEET_TOKEN; sent as "authorization: Bearer <token>"
    tls_ca   the argument, else $LLAMAFLEET_TLS_CA: a PEM CA file; set = TLS, unset = plaintext
    user     the argument, else $USER, else the login name; sent as x-llamafleet-user, which
             only a coordinator running with --insecure-no-auth reads (tokens name callers)
"""

import dataclasses
import os
import pwd
import re
from typing import List, Optional, Tuple

import grpc

from llamafleet.errors import InvalidArgument

DEFAULT_ADDRESS = "127.0.0.1:7070"
# Generous: a page of 1000 jobs with full specs is about a megabyte.
_MAX_RECEIVE_BYTES = 64 << 20
# A restarted coordinator is back within seconds; gRPC's default reconnect backoff (1 s
# growing to 120 s) would keep a caller waiting far longer than the restart took.
_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", _MAX_RECEIVE_BYTES),
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
]


def is_address(address: str) -> bool:
    """HOST:PORT with a numeric port, or a gRPC target URI (unix:/path, dns:///host:port).
    Without a port gRPC would silently try 443, which is never the coordinator."""
    if not address or re.search(r"\s", address):
        return False
    if address.startswith("unix:") or "://" in address:
        return True
    host, sep, port = address.rpartition(":")
    return bool(sep and host and port.isdigit())


def _login_name() -> str:
    user = os.environ.get("USER")
    if user is not None:
        return user
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return ""


@dataclasses.dataclass(frozen=True)
class Connection:
    """Resolved settings of one client; `resolve` fills them from arguments and environment."""

    address: str
    token: str = ""
    tls_ca_file: str = ""
    user: str = ""
    # Seconds each unary call may take (streams take their own).
    timeout: float = 30.0

    @staticmethod
    def resolve(address: Optional[str] = None, token: Optional[str] = None,
                tls_ca_file: Optional[str] = None, user: Optional[str] = None,
                timeout: float = 30.0) -> "Connection":
        """Arguments first, then the CLI's environment variables, then its defaults.
        Raises InvalidArgument naming the address when it is not HOST:PORT."""
        address = address or os.environ.get("LLAMAFLEET_COORDINATOR") or DEFAULT_ADDRESS
        if not is_address(address):
            raise InvalidArgument("coordinator address must be HOST:PORT, got '%s'" % address)
        if timeout is None or timeout <= 0:
            raise InvalidArgument("timeout must be > 0 seconds, got %r" % (timeout,))
        return Connection(
            address=address,
            token=token if token is not None else os.environ.get("LLAMAFLEET_TOKEN", ""),
            tls_ca_file=tls_ca_file if tls_ca_file is not None else os.environ.get("LLAMAFLEET_TLS_CA", ""),
            user=user if user is not None else _login_name(),
            timeout=float(timeout))

    def metadata(self) -> List[Tuple[str, str]]:
        """The metadata every call sends: the caller's name and bearer token when set."""
        md = []
        if self.user:
            md.append(("x-llamafleet-user", self.user))
        if self.token:
            md.append(("authorization", "Bearer " + self.token))
        return md

    def channel(self) -> grpc.Channel:
        """A new channel; it connects on the first call. Raises InvalidArgument naming the CA
        file when it cannot be read or holds no PEM certificate."""
        if not self.tls_ca_file:
            return grpc.insecure_channel(self.address, options=_CHANNEL_OPTIONS)
        try:
            with open(self.tls_ca_file, "rb") as f:
                pem = f.read()
        except OSError as e:
            raise InvalidArgument("tls_ca_file %s: cannot read: %s" % (self.tls_ca_file, e.strerror)) from None
        if b"-----BEGIN CERTIFICATE-----" not in pem:
            raise InvalidArgument("tls_ca_file %s: no PEM certificate in it" % self.tls_ca_file)
        credentials = grpc.ssl_channel_credentials(root_certificates=pem)
        return grpc.secure_channel(self.address, credentials, options=_CHANNEL_OPTIONS)
