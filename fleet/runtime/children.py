"""What `manage.py up` runs: the child specs of every Tandem process on one machine.

`children(settings)` lists them in start order: the control worker, then each factory of
`CHILD_FACTORIES`, then the web server(s) last (so it stops first). A `ChildSpec` is a
command line and how to treat it (restart policy, readiness URL, the node it serves, a
listening socket to inherit); `fleet/runtime/launcher.py`'s supervisor starts and watches them.

Adding a child: write a factory `def my_children(settings) -> list[ChildSpec]` next to the
code it starts and add its dotted path to `CHILD_FACTORIES`. Factories only build command
lines; they import nothing heavy.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, replace

from django.utils.module_loading import import_string

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
        argv=[_python(), "-m", "fleet.runtime.web_serve", "--host", host, "--port", str(port)],
        ready_url=f"http://{probe_host}:{port}/healthz",
        essential=True,
    )


def adopt_socket_argv(fd: int | str) -> list[str]:
    """A web server (`fleet.runtime.web_serve`) serving the inherited listening socket `fd`."""
    return [_python(), "-m", "fleet.runtime.web_serve", "--fd", str(fd)]


def web_servers(settings, *, host: str, port: int, workers: int | None = None) -> list[ChildSpec]:
    """The web server: one uvicorn (`fleet.runtime.web_serve`), or `workers` of them accepting
    on ONE socket the supervisor listens on (websockets and SSE work from any of them:
    channels-redis carries group messages across processes, streams are in Redis). "web"
    comes last: it is probed."""
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
