"""A small process supervisor for `manage.py up`: one machine, every Tandem process.

The launcher is a list of named child specs (`children(settings)`), started in order, each
in its own process group, and stopped in reverse order (SIGTERM to the group, then SIGKILL
after the child's timeout). The web server comes last, so it stops first: no new requests
while the workers finish what they hold.

A child that exits while the supervisor did not ask it to is a failure: the supervisor says
so loudly and stops everything else (no restarts: a crash loop would hide the bug, and
`make up` is one command to run again). On Linux each child also gets SIGTERM if the
supervisor itself dies (PR_SET_PDEATHSIG), so even `kill -9` of `up` leaves no orphan
worker behind.

Adding a child (later issues: drafter/verifier node workers, the fleet simulator): write a
factory `def my_children(settings) -> list[ChildSpec]` next to the code it starts and add its
dotted path to `CHILD_FACTORIES`. Factories only build command lines; they import nothing
heavy.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

from django.utils.module_loading import import_string

# Dotted paths of `factory(settings) -> list[ChildSpec]`, started between the control worker
# and the web server. Later: node workers (draft/verify), the simulator.
CHILD_FACTORIES: list[str] = [
    "fleet.telemetry.launch.aggregator_children",
    "fleet.planner.launch.simulator_children",
    "inference.worker.launch.node_children",
]


@dataclass(frozen=True)
class ChildSpec:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    stop_timeout_s: float = 10.0
    # Polled with GET until it answers 200 before `up` announces the URL.
    ready_url: str | None = None


def _python() -> str:
    return sys.executable


def control_worker(settings) -> ChildSpec:
    """The control-plane Celery worker, with beat embedded (one machine, one beat)."""
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    return ChildSpec(
        name="worker",
        argv=[
            _python(),
            "-m",
            "celery",
            "-A",
            "fleet",
            "--quiet",  # no banner: `up` prints what matters
            "worker",
            "--pool=threads",
            "--concurrency=4",
            f"--queues={queue}",
            f"--hostname={queue}@%h",
            "--beat",
            f"--schedule={settings.DATA_DIR / 'celerybeat-schedule'}",
            "--without-gossip",
            "--without-mingle",
            "--loglevel=WARNING",  # beat sends tasks every second: INFO would flood
        ],
        stop_timeout_s=15.0,
    )


def web_server(settings, *, host: str, port: int) -> ChildSpec:
    probe_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    if ":" in probe_host:
        probe_host = f"[{probe_host}]"
    return ChildSpec(
        name="web",
        argv=[_python(), "-m", "daphne", "-b", host, "-p", str(port), "fleet.asgi:application"],
        ready_url=f"http://{probe_host}:{port}/healthz",
    )


def children(settings, *, host: str, port: int) -> list[ChildSpec]:
    """Everything `manage.py up` runs besides the embedded Redis, in start order."""
    specs = [control_worker(settings)]
    for path in CHILD_FACTORIES:  # later: node workers, simulator
        specs.extend(import_string(path)(settings))
    specs.append(web_server(settings, host=host, port=port))
    return specs


class ChildFailed(RuntimeError):
    pass


def _die_with_parent() -> None:
    """preexec hook: SIGTERM this child when the supervisor dies (Linux only)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Supervisor:
    """Starts child specs, watches them, stops them in reverse order."""

    def __init__(self, *, env: dict[str, str], log: Callable[[str], None] = print):
        self.env = env
        self.log = log
        self.running: list[tuple[ChildSpec, subprocess.Popen]] = []
        self.stop_requested = False
        self.force = False

    # --- signals ----------------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # HUP: terminal closed
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        if self.stop_requested:
            self.force = True  # a second Ctrl-C: stop waiting, kill
        self.stop_requested = True

    # --- life cycle ---------------------------------------------------------------------------
    def start(self, spec: ChildSpec) -> subprocess.Popen:
        process = subprocess.Popen(
            spec.argv,
            env={**self.env, **spec.env},
            start_new_session=True,  # own process group: we decide when it gets a signal
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        self.running.append((spec, process))
        self.log(f"  started {spec.name:<12} pid {process.pid}")
        return process

    def check(self) -> None:
        """Raises ChildFailed if a child exited without being asked to."""
        for spec, process in self.running:
            code = process.poll()
            if code is not None:
                raise ChildFailed(f"{spec.name} (pid {process.pid}) exited with code {code}")

    def wait_ready(self, spec: ChildSpec, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            self.check()
            if self.stop_requested:
                return
            try:
                with urllib.request.urlopen(spec.ready_url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise ChildFailed(f"{spec.name} was not ready at {spec.ready_url} in {timeout_s}s")
            time.sleep(0.3)

    def watch(self, poll_s: float = 0.5) -> None:
        """Blocks until a stop signal arrives; raises ChildFailed if a child dies first."""
        while not self.stop_requested:
            self.check()
            time.sleep(poll_s)

    def stop_all(self) -> None:
        """Stops every child, last started first; SIGKILL after each child's timeout."""
        while self.running:
            spec, process = self.running.pop()
            self._stop(spec, process)

    def _stop(self, spec: ChildSpec, process: subprocess.Popen) -> None:
        pgid = process.pid  # start_new_session: the child leads its own group
        if process.poll() is None or _group_alive(pgid):
            self.log(f"  stopping {spec.name:<11} pid {process.pid}")
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + spec.stop_timeout_s
        # Wait for the leader and anything it forked (e.g. celery beat) to leave the group.
        while (process.poll() is None or _group_alive(pgid)) and not self.force:
            if time.monotonic() > deadline:
                self.log(f"  {spec.name} did not stop in {spec.stop_timeout_s}s: killing it")
                break
            time.sleep(0.1)
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
