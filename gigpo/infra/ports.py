"""A free TCP port, for process-group rendezvous and the servers gigpo starts."""
from __future__ import annotations

import socket


def free_port(address: str = "127.0.0.1") -> int:
    """A TCP port free on `address` right now (another process may still take it before the caller binds it)."""
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]
