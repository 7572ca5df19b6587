"""A free TCP port on loopback, for process-group rendezvous and the servers gigpo starts."""
from __future__ import annotations

import socket


def free_port() -> int:
    """A port the OS just reported free (another process may still take it before it is bound)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
