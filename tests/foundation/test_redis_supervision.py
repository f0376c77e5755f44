"""`manage.py up` supervises its embedded Redis like any child: killed, it is reaped (no
zombie), the console's banner says so while it is down, and it comes back after the backoff
on the same port with the same password and the data its append-only file holds."""

import os
import signal
import time
from pathlib import Path

import redis

from fleet.runtime.children import RestartPolicy
from fleet.runtime.embedded_redis import EmbeddedRedis
from fleet.runtime.launcher import Supervisor
from fleet.runtime.supervision import RESTARTING, RUNNING, problems, state_path


def _state(pid: int) -> str:
    """'Z' for a zombie, '' when the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return ""


def _until(supervisor: Supervisor, condition, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        supervisor.check()
        time.sleep(0.02)


def test_a_killed_embedded_redis_is_reaped_shown_and_restarted_with_its_data(tmp_path):
    server = EmbeddedRedis(tmp_path, record=True, persist=True)
    url = server.start()
    supervisor = Supervisor(
        env=dict(os.environ),
        log=lambda line: None,
        policy=RestartPolicy(initial_backoff_s=0.5, give_up_after=5),
        state_file=state_path(tmp_path),
    )
    try:
        assert server.process is not None
        process = supervisor.adopt(server.child_spec(), server.process)
        client = redis.Redis.from_url(url)
        client.rpush("tandem:queue", "a", "b")
        client.xadd("tandem:stream", {"k": "v"})
        assert client.config_get("appendfsync") == {"appendfsync": "everysec"}
        client.execute_command("BGREWRITEAOF")  # on disk now, not within the next second
        _until(supervisor, lambda: client.info("persistence")["aof_rewrite_in_progress"] == 0)
        assert (tmp_path / "redis" / "appendonly.aof").stat().st_size > 0

        first = process.pid
        os.kill(first, signal.SIGKILL)
        (child,) = supervisor.children
        killed_at = time.monotonic()
        _until(supervisor, lambda: child.state == RESTARTING)
        assert _state(first) == ""  # reaped: no zombie
        (shown,) = problems(tmp_path)  # the console's banner, while it is down
        assert shown["name"] == "redis" and "SIGKILL" in shown["last_exit"], shown
        _until(supervisor, lambda: child.state == RUNNING)
        assert time.monotonic() - killed_at >= 0.5  # after the backoff
        assert child.process is not None and child.process.pid != first
        assert child.restarts == 1

        def answers() -> bool:
            try:
                return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5).ping())
            except redis.RedisError:
                return False

        _until(supervisor, answers)  # the same URL: port and password
        client = redis.Redis.from_url(url)
        assert client.lrange("tandem:queue", 0, -1) == [b"a", b"b"]
        assert client.xlen("tandem:stream") == 1
        assert problems(tmp_path) == []
        bare = url.split("@", 1)[1]
        try:
            redis.Redis.from_url(f"redis://{bare}").get("x")
            raise AssertionError("the restarted server answered without its password")
        except redis.AuthenticationError:
            pass
        assert not (tmp_path / "redis" / "redis.conf").exists()
    finally:
        supervisor.stop_all()
        server.stop()
    assert child.process is not None and _state(child.process.pid) == ""
    assert not (tmp_path / "redis" / "url").exists()


def test_the_console_banner_says_redis_is_being_restarted(tmp_path, settings, client, admin):
    """What the supervisor writes while Redis is down, as signed-in users see it."""
    settings.DATA_DIR = tmp_path
    server = EmbeddedRedis(tmp_path, record=False, persist=True)
    server.start()
    supervisor = Supervisor(
        env=dict(os.environ),
        log=lambda line: None,
        policy=RestartPolicy(initial_backoff_s=60),  # stays down for the test
        state_file=state_path(tmp_path),
    )
    try:
        assert server.process is not None
        process = supervisor.adopt(server.child_spec(), server.process)
        os.kill(process.pid, signal.SIGKILL)
        _until(supervisor, lambda: supervisor.children[0].state == RESTARTING)
        client.force_login(admin)
        page = client.get("/").content.decode()
        assert (
            "Process <strong>redis</strong> was killed by SIGKILL; <code>manage.py up</code> "
            "is restarting it." in page
        ), page[:3000]
    finally:
        supervisor.stop_all()
        server.stop()
