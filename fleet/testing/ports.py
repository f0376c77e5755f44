"""Loopback ports for the servers a test starts (`up`, web servers, browsers' stacks).

Binding port 0 and releasing it (the usual trick) races: the kernel hands the same port to
the next bind(0), e.g. the embedded Redis that `up` starts a moment later, and two test
processes of one run (pytest-xdist workers) draw from the same pool. Here a test's ports
come from below the kernel's ephemeral range, where bind(0) never lands, and each xdist
worker has a slice of its own.
"""

from __future__ import annotations

import itertools
import os
import socket
from pathlib import Path

_LOW = 20000  # under Linux's default ephemeral range (32768-60999); above well-known services


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _worker_slice() -> range:
    """This process's ports: the whole pool, or the xdist worker's share of it."""
    high = max(_ephemeral_low(), _LOW + 1000)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ...
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    size = (high - _LOW) // max(count, 1)
    return range(_LOW + index * size, _LOW + (index + 1) * size)


_SLICE = _worker_slice()
# Start at a place of this process's own, so two runs side by side rarely meet either.
_NEXT = itertools.count(os.getpid() % len(_SLICE))


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port nothing listens on now, and that no bind(0) will be given."""
    for _ in range(len(_SLICE)):
        port = _SLICE[next(_NEXT) % len(_SLICE)]
        if _bindable(port):
            return port
    raise RuntimeError(f"no free loopback port in {_SLICE.start}-{_SLICE.stop - 1}")
