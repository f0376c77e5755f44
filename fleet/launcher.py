"""A small process supervisor for `manage.py up`: one machine, every Tandem process.

The launcher is a list of named child specs (`children(settings)`), started in order, each
in its own process group, and stopped in reverse order (SIGTERM to the group, then SIGKILL
after the child's timeout). The web server comes last, so it stops first: no new requests
while the workers finish what they hold.

A child that exits while the supervisor did not ask it to is restarted, after a backoff that
doubles with each crash in the recent window (`RestartPolicy`: 1 s, 2 s, 4 s ... up to 30 s);
what is left of its process group is killed first. The others keep running: the console
stays up while a node worker comes back. After `give_up_after` crashes within `window_s`
the supervisor gives up on that child (a crash loop would only hide the bug), keeps the rest
running and says so: on its output, and in `<DATA_DIR>/supervisor.json` (fleet/supervision.py),
which the console shows as a banner to signed-in users. Giving up on an `essential` child
(the web server: without it nothing is left to look at) stops everything.

The supervisor calls `on_exit(spec, reason)` the moment a child dies: for a node worker
(`ChildSpec.node`) `up` marks that node lost at once and re-routes or fails its generations,
instead of waiting for its heartbeats to age out (that path remains for remote nodes).

On Linux each child also gets SIGTERM if the supervisor itself dies (PR_SET_PDEATHSIG), so
even `kill -9` of `up` leaves no orphan worker behind.

Adding a child: write a factory `def my_children(settings) -> list[ChildSpec]` next to the
code it starts and add its dotted path to `CHILD_FACTORIES`. Factories only build command
lines; they import nothing heavy.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from django.utils.module_loading import import_string

from fleet.supervision import DONE, FAILED, RESTARTING, RUNNING, write_state

# Dotted paths of `factory(settings) -> list[ChildSpec]`, started in this order between the
# control worker and the web server: the telemetry aggregator, the fleet simulator, the
# ledger (node workers' reports -> the database), the local node workers (draft/verify), the
# one-shot training of their learned drafts.
# By convention each lives in a `launch.py` beside its code.
CHILD_FACTORIES: list[str] = [
    "fleet.telemetry.launch.aggregator_children",
    "fleet.planner.launch.simulator_children",
    "inference.launch.ledger_children",
    "inference.learning.launch.train_worker_children",
    "inference.worker.launch.node_children",
    "inference.worker.launch.train_children",
]


@dataclass(frozen=True)
class RestartPolicy:
    """Restart after `initial_backoff_s`, doubling per crash within `window_s` (capped at
    `max_backoff_s`); give up at the `give_up_after`-th crash within `window_s`."""

    initial_backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    give_up_after: int = 5
    window_s: float = 120.0

    def backoff_s(self, recent_crashes: int) -> float:
        return min(self.initial_backoff_s * 2 ** max(0, recent_crashes - 1), self.max_backoff_s)


@dataclass(frozen=True)
class ChildSpec:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    stop_timeout_s: float = 10.0
    # Polled with GET until it answers 200 before `up` announces the URL.
    ready_url: str | None = None
    # The node (id or name) this child serves as its worker: lost at once when it dies.
    node: str = ""
    # Giving up on it stops everything (the web server).
    essential: bool = False
    # A TCP address (host, port) the supervisor listens on once, for every child that names
    # it: the child inherits the socket and finds its descriptor where argv says "{fd}".
    # Several web processes share one port this way (the kernel spreads the connections).
    listen: tuple[str, int] | None = None
    # Written to the child's stdin at each start, then closed (the embedded Redis reads its
    # configuration, password included, from there: never a file, never the command line).
    stdin: bytes | None = None
    # The child's umask (the embedded Redis: its files are its owner's only).
    umask: int | None = None
    # A job that runs once (training a draft): exit 0 leaves it done; any other end leaves it
    # failed, not restarted (a job that fails would fail again, at a cost), and says so.
    oneshot: bool = False


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


def web_workers() -> int:
    """TANDEM_WEB_WORKERS: how many web processes serve the port (default: half the cores,
    at most 8; the node workers need the rest)."""
    from fleet.env import env_int

    default = min(8, max(1, (os.cpu_count() or 2) // 2))
    return env_int("TANDEM_WEB_WORKERS", default, minimum=1)


def web_server(settings, *, host: str, port: int) -> ChildSpec:
    probe_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    if ":" in probe_host:
        probe_host = f"[{probe_host}]"
    return ChildSpec(
        name="web",
        argv=[_python(), "-m", "fleet.web_serve", "--host", host, "--port", str(port)],
        ready_url=f"http://{probe_host}:{port}/healthz",
        essential=True,
    )


def adopt_socket_argv(fd: int | str) -> list[str]:
    """A web server (`fleet.web_serve`) serving the inherited listening socket `fd`."""
    return [_python(), "-m", "fleet.web_serve", "--fd", str(fd)]


def web_servers(settings, *, host: str, port: int, workers: int | None = None) -> list[ChildSpec]:
    """The web server: one uvicorn (`fleet.web_serve`), or `workers` of them accepting on ONE
    socket the supervisor listens on (websockets and SSE work from any of them: channels-redis
    carries group messages across processes, streams are in Redis). "web" comes last: it is
    probed."""
    workers = web_workers() if workers is None else workers
    first = web_server(settings, host=host, port=port)
    if workers == 1:
        return [first]
    argv = adopt_socket_argv("{fd}")
    address = (host, port)
    extra = [
        ChildSpec(name=f"web-{i}", argv=argv, listen=address, essential=True)
        for i in range(2, workers + 1)
    ]
    return [*extra, replace(first, argv=argv, listen=address)]


def children(settings, *, host: str, port: int) -> list[ChildSpec]:
    """Everything `manage.py up` runs besides the embedded Redis, in start order."""
    specs = [control_worker(settings)]
    for path in CHILD_FACTORIES:
        specs.extend(import_string(path)(settings))
    # Node workers reach the control plane through its API (they hold no DB credentials).
    probe = web_server(settings, host=host, port=port).ready_url or ""
    api = {"TANDEM_API_URL": probe.removesuffix("/healthz")}
    specs = [replace(s, env=api | s.env) if s.node else s for s in specs]
    specs.extend(web_servers(settings, host=host, port=port))
    return specs


class ChildFailed(RuntimeError):
    """An essential child was given up on (or never became ready): `up` stops."""


def _die_with_parent() -> None:
    """preexec hook: SIGTERM this child when the supervisor dies (Linux only)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _preexec(spec: ChildSpec) -> Callable[[], None] | None:
    linux = sys.platform.startswith("linux")
    if spec.umask is None:
        return _die_with_parent if linux else None
    umask = spec.umask

    def hook() -> None:
        os.umask(umask)
        if linux:
            _die_with_parent()

    return hook


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def exit_reason(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


@dataclass
class Child:
    """A spec and its current process, with its crash history (monotonic times)."""

    spec: ChildSpec
    process: subprocess.Popen | None = None
    state: str = RUNNING
    crashes: list[float] = field(default_factory=list)
    restarts: int = 0
    last_exit: str = ""
    restart_at: float | None = None  # monotonic, while RESTARTING
    since: float = field(default_factory=time.time)  # wall clock of the last state change

    def report(self) -> dict:
        return {
            "name": self.spec.name,
            "state": self.state,
            "pid": self.process.pid if self.process and self.state == RUNNING else None,
            "restarts": self.restarts,
            "crashes": len(self.crashes),  # within the policy's window
            "last_exit": self.last_exit,
            "since": self.since,
            "node": self.spec.node,
        }


class Supervisor:
    """Starts child specs, restarts the ones that die, stops them in reverse order."""

    def __init__(
        self,
        *,
        env: dict[str, str],
        log: Callable[[str], None] = print,
        policy: RestartPolicy | None = None,
        state_file: Path | None = None,
        on_exit: Callable[[ChildSpec, str], None] | None = None,
    ):
        self.env = env
        self.log = log
        self.policy = policy or RestartPolicy()
        self.state_file = state_file
        self.on_exit = on_exit
        self.children: list[Child] = []
        self.stop_requested = False
        self.force = False
        self.sockets: dict[tuple[str, int], socket.socket] = {}

    # --- signals ----------------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # HUP: terminal closed
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        if self.stop_requested:
            self.force = True  # a second Ctrl-C: stop waiting, kill
        self.stop_requested = True

    # --- life cycle ---------------------------------------------------------------------------
    def _listening(self, address: tuple[str, int]) -> int:
        sock = self.sockets.get(address)
        if sock is None:
            host, port = address
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            sock = socket.create_server((host or "0.0.0.0", port), family=family, backlog=1024)
            sock.set_inheritable(True)
            self.sockets[address] = sock
        return sock.fileno()

    def _spawn(self, spec: ChildSpec) -> subprocess.Popen:
        argv, fds = spec.argv, ()  # type: tuple[list[str], tuple[int, ...]]
        if spec.listen is not None:
            fd = self._listening(spec.listen)
            argv, fds = [a.replace("{fd}", str(fd)) for a in argv], (fd,)
        process = subprocess.Popen(
            argv,
            pass_fds=fds,
            env={**self.env, **spec.env},
            stdin=subprocess.PIPE if spec.stdin is not None else None,
            start_new_session=True,  # own process group: we decide when it gets a signal
            preexec_fn=_preexec(spec),
        )
        if process.stdin is not None:
            try:
                process.stdin.write(spec.stdin or b"")
                process.stdin.close()
            except OSError:  # it died at once: noticed by the next check()
                pass
        return process

    def start(self, spec: ChildSpec) -> subprocess.Popen:
        return self.adopt(spec, self._spawn(spec))

    def adopt(self, spec: ChildSpec, process: subprocess.Popen) -> subprocess.Popen:
        """Supervise a child started elsewhere (the embedded Redis, started before anything
        else): from now on it is reaped, restarted from `spec` and stopped like the others."""
        self.children.append(Child(spec=spec, process=process))
        self.log(f"  started {spec.name:<12} pid {process.pid}")
        self._write_state()
        return process

    def check(self) -> None:
        """Notices children that died (restart later, or give up), restarts those whose
        backoff is over. Raises ChildFailed when it gives up on an essential child."""
        now = time.monotonic()
        for child in self.children:
            if child.state == RUNNING and child.process.poll() is not None:
                if child.spec.oneshot:
                    self._job_ended(child)
                else:
                    self._died(child, now)
            elif child.state == RESTARTING and now >= child.restart_at and not self.stop_requested:
                self._restart(child)

    def _died(self, child: Child, now: float) -> None:
        spec, process = child.spec, child.process
        _kill_group(process.pid)  # what it forked goes with it (e.g. celery beat)
        child.last_exit = exit_reason(process.returncode)
        child.crashes = [t for t in child.crashes if now - t < self.policy.window_s] + [now]
        child.since = time.time()
        recent = len(child.crashes)
        if recent >= self.policy.give_up_after:
            child.state = FAILED
            window = f"{self.policy.window_s:g}s"
            message = (
                f"{spec.name} (pid {process.pid}) {child.last_exit}: {recent} crashes within "
                f"{window}, not restarting it"
            )
            self.log(f"  !!! {message}")
        else:
            child.state = RESTARTING
            delay = self.policy.backoff_s(recent)
            child.restart_at = now + delay
            self.log(
                f"  !!! {spec.name} (pid {process.pid}) {child.last_exit}: "
                f"restarting it in {delay:g}s"
            )
        self._write_state()
        if self.on_exit is not None:
            try:
                self.on_exit(spec, child.last_exit)
            except Exception as exc:  # the supervisor outlives a failing hook
                self.log(f"  (could not report {spec.name}'s exit: {exc!r})")
        if child.state == FAILED and spec.essential:
            raise ChildFailed(f"{spec.name} {child.last_exit} {recent} times; gave up")

    def _job_ended(self, child: Child) -> None:
        spec, process = child.spec, child.process
        assert process is not None  # it was running
        _kill_group(process.pid)
        child.last_exit = exit_reason(process.returncode)
        child.since = time.time()
        if process.returncode == 0:
            child.state = DONE
            self.log(f"  {spec.name} (pid {process.pid}) done")
        else:
            child.state = FAILED
            self.log(f"  !!! {spec.name} (pid {process.pid}) {child.last_exit}: not restarting it")
        self._write_state()

    def _restart(self, child: Child) -> None:
        child.process = self._spawn(child.spec)
        child.state, child.restart_at, child.since = RUNNING, None, time.time()
        child.restarts += 1
        self.log(f"  restarted {child.spec.name:<10} pid {child.process.pid}")
        self._write_state()

    def _write_state(self) -> None:
        if self.state_file is None:
            return
        try:
            state = {"pid": os.getpid(), "updated": time.time()}
            write_state(self.state_file, {**state, "children": [c.report() for c in self.children]})
        except OSError as exc:
            self.log(f"  (could not write {self.state_file}: {exc})")

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

    def watch(self, poll_s: float = 0.2) -> None:
        """Supervises until a stop signal arrives; raises ChildFailed if it gives up on an
        essential child."""
        while not self.stop_requested:
            self.check()
            time.sleep(poll_s)

    def stop_all(self) -> None:
        """Stops every child, last started first; SIGKILL after each child's timeout."""
        while self.children:
            child = self.children.pop()
            # A child already seen dead had its group killed then (`_died`); its pid may since
            # belong to someone else's process, which must not get our signals.
            if child.process is not None and child.state == RUNNING:
                self._stop(child.spec, child.process)
        for sock in self.sockets.values():
            sock.close()
        self.sockets.clear()
        if self.state_file is not None:
            self.state_file.unlink(missing_ok=True)

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
        _kill_group(pgid)
        process.wait()
