"""The process stack of the serving benchmarks (bench_serving, bench_control): a private data
directory with its own Redis (`run` re-executes the command there), the web server, the
ledger and node workers as subprocesses (`Stack`), and waits that fail with their logs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NO_DATABASE = "postgres://nobody:nothing@127.0.0.1:9/no-database-for-node-workers"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_cpu_s(pid: int) -> float:
    """user + system CPU seconds of a process (all its threads), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def demo_pair_dir(models: str | None) -> Path:
    """The directory holding demo-target and demo-draft (default DATA_DIR/models), or a
    CommandError saying how to get them."""
    from django.conf import settings
    from django.core.management.base import CommandError

    path = Path(models or Path(settings.DATA_DIR) / "models").resolve()
    if not (path / "demo-target" / "model.safetensors").exists():
        raise CommandError(
            f"no demo pair in {path}: train it with `manage.py train_demo_pair` "
            "(or pass --models DIR holding demo-target and demo-draft)"
        )
    return path


# --- the outer process: a private data dir + Redis, then the bench itself in a child ---------


def run(argv: list[str], *, models: Path, log=print, command: str = "bench_serving") -> int:
    from fleet.runtime.embedded_redis import EmbeddedRedis

    with tempfile.TemporaryDirectory(prefix="tandem-bench-") as tmp:
        redis = EmbeddedRedis(Path(tmp), record=False)
        url = redis.start()
        env = {
            **os.environ,
            "TANDEM_DATA_DIR": tmp,
            "REDIS_URL": url,
            "TANDEM_BENCH_CHILD": "1",
            "TANDEM_HEARTBEAT_PERIOD_S": "1",
            "LOG_LEVEL": "WARNING",
            "TANDEM_BENCH_REDIS_PID": str(redis.process.pid if redis.process else ""),
        }
        env.pop("DATABASE_URL", None)
        try:
            return subprocess.call(
                [
                    sys.executable,
                    str(ROOT / "manage.py"),
                    command,
                    *argv,
                    "--models",
                    str(models),
                ],
                env=env,
            )
        finally:
            redis.stop()


# --- the child: everything against the private data dir --------------------------------------


class Stack:
    """The web server (`fleet.runtime.web_serve`) + one drafter + one verifier, as subprocesses
    (killed on exit)."""

    def __init__(self, log):
        self.procs: list[subprocess.Popen] = []
        self.names: list[str] = []
        self.log = log
        self.logdir = Path(os.environ["TANDEM_DATA_DIR"]) / "logs"
        self.logdir.mkdir(exist_ok=True)

    def spawn(
        self, name: str, argv: list[str], env: dict | None = None, pass_fds: tuple = ()
    ) -> None:
        out = open(self.logdir / f"{name}.log", "w")
        self.names.append(name)
        self.procs.append(
            subprocess.Popen(
                argv,
                cwd=ROOT,
                env={**os.environ, **(env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=pass_fds,
            )
        )

    def close(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)

    def cpu_s(self) -> dict[str, float]:
        """CPU seconds used so far by each process of the stack, this one (the clients)
        and Redis: where the machine's cores go during a run."""
        pids = dict(zip(self.names, (p.pid for p in self.procs), strict=True))
        if os.environ.get("TANDEM_BENCH_REDIS_PID"):
            pids["redis"] = int(os.environ["TANDEM_BENCH_REDIS_PID"])
        out = {name: proc_cpu_s(pid) for name, pid in pids.items()}
        out["clients"] = time.process_time()
        return out

    def tail(self) -> str:
        return "\n".join(
            f"--- {f.name}\n{f.read_text()[-2000:]}" for f in self.logdir.glob("*.log")
        )


def spawn_node(stack: Stack, name: str, role: str, node, token: str, base: str, env: dict) -> None:
    """A `run_node` worker for a registered node, without a database (as in production), one
    torch thread per two cores (a drafter and a verifier share the machine)."""
    stack.spawn(
        name,
        [sys.executable, "manage.py", "run_node", "--role", role],
        {
            "DATABASE_URL": NO_DATABASE,
            "TANDEM_NODE_ID": str(node.pk),
            "TANDEM_NODE_TOKEN": token,
            "TANDEM_API_URL": base,
            "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 2) // 2)),
            **env,
        },
    )


def wait_for(check, timeout: float, what: str, stack: Stack) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        for p in stack.procs:
            if p.poll() is not None:
                raise RuntimeError(
                    f"a bench process exited while waiting for {what}:\n{stack.tail()}"
                )
        time.sleep(0.3)
    raise RuntimeError(f"timed out waiting for {what}:\n{stack.tail()}")


def wait_rows(ids: list[str], stack: Stack, timeout: float = 60) -> None:
    """The rows of a run's generations, once the ledger has written their finishes (the
    streams end first: the verifier reports its finishes after publishing them)."""
    from inference.models import Generation
    from inference.selectors import ACTIVE_STATES

    def written():
        return not Generation.objects.filter(pk__in=ids, state__in=ACTIVE_STATES).exists()

    wait_for(written, timeout, "the ledger to write the finished rows", stack)
