import socket
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A loopback port nothing listens on (right now)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
