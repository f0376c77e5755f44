import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from fleet.accounts.access import Role, role_of
from fleet.console.management.commands.up import _create_first_admin
from fleet.launcher import ChildFailed, ChildSpec, Supervisor, children
from tests.foundation.helpers import REPO, free_port


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _pids_with_env(marker: str) -> list[int]:
    """Live processes whose environment carries `marker` (e.g. TANDEM_DATA_DIR=<tmp>)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker.encode() in env and _alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def test_children_are_the_control_worker_then_the_web_server(settings):
    specs = children(settings, host="127.0.0.1", port=8123)
    worker, web = specs[0], specs[-1]  # factories in CHILD_FACTORIES come in between
    assert (worker.name, web.name) == ("worker", "web")
    assert "--queues=control" in worker.argv
    assert web.argv[-1] == "fleet.asgi:application"
    assert web.ready_url == "http://127.0.0.1:8123/healthz"


def test_a_child_that_dies_is_reported(tmp_path):
    supervisor = Supervisor(env=dict(os.environ), log=lambda line: None)
    supervisor.start(ChildSpec("doomed", [sys.executable, "-c", "raise SystemExit(3)"]))
    with pytest.raises(ChildFailed, match=r"doomed \(pid \d+\) exited with code 3"):
        for _ in range(100):
            supervisor.check()
            time.sleep(0.05)
    supervisor.stop_all()
    assert supervisor.running == []


def test_stop_kills_the_whole_group_after_the_timeout(tmp_path):
    """A child that ignores SIGTERM and forked a grandchild: both are gone after stop_all."""
    pidfile = tmp_path / "grandchild"
    script = (
        "import os, signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "p = subprocess.Popen([sys.executable, '-c', "
        "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(60)\n"
    )
    supervisor = Supervisor(env=dict(os.environ), log=lambda line: None)
    child = supervisor.start(
        ChildSpec("stubborn", [sys.executable, "-c", script], stop_timeout_s=1)
    )
    for _ in range(100):
        if pidfile.exists() and pidfile.read_text():
            break
        time.sleep(0.05)
    grandchild = int(pidfile.read_text())
    started = time.monotonic()
    supervisor.stop_all()
    assert time.monotonic() - started < 10
    assert child.returncode == -signal.SIGKILL
    for _ in range(50):  # the grandchild is reaped by init once killed
        if not _alive(grandchild):
            break
        time.sleep(0.1)
    assert not _alive(grandchild)


def test_up_refuses_a_port_that_is_taken(monkeypatch):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        monkeypatch.setenv("TANDEM_PORT", str(port))
        with pytest.raises(CommandError, match=f"cannot listen on 127.0.0.1:{port}.*TANDEM_PORT"):
            call_command("up")


def test_first_admin_is_created_once_with_a_hashed_password(db):
    password = _create_first_admin()
    assert password and len(password) >= 20
    admin = get_user_model().objects.get(username="admin")
    assert admin.check_password(password)
    assert password not in admin.password  # stored hashed
    assert role_of(admin) == Role.ADMIN
    assert admin.groups.filter(name="admin").exists()
    assert _create_first_admin() is None  # not on the next run


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
    except Exception:
        return 0


@pytest.mark.slow
def test_up_starts_everything_and_sigint_leaves_no_orphan(tmp_path):
    data_dir = tmp_path / "data"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env.update(TANDEM_DATA_DIR=str(data_dir), TANDEM_PORT=str(port), PYTHONUNBUFFERED="1")
    log = tmp_path / "up.log"
    with log.open("w") as out:
        up = subprocess.Popen(
            [sys.executable, "manage.py", "up"], cwd=REPO, env=env, stdout=out, stderr=out
        )
    try:
        deadline = time.monotonic() + 180
        while "Press Ctrl-C to stop." not in log.read_text():
            assert up.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.3)
        base = f"http://127.0.0.1:{port}"
        assert _get(f"{base}/healthz") == 200
        assert _get(f"{base}/login/") == 200
        assert _get(f"{base}/static/css/tandem.css") == 200

        output = log.read_text()
        password_file = data_dir / "admin-password"  # 0600; never in a captured stdout
        password = password_file.read_text().strip()
        assert len(password) >= 20 and password not in output
        assert str(password_file) in output and password_file.stat().st_mode & 0o777 == 0o600
        named = dict(re.findall(r"started ([\w-]+) +pid (\d+)", output))
        assert {"redis", "worker", "web"} <= set(named)  # and any registered children
        started = {int(pid) for pid in named.values()}
        assert all(_alive(pid) for pid in started)
        # Plus what they forked (celery beat, once up). Redis rewrites its environ (its title).
        everything = started | set(_pids_with_env(f"TANDEM_DATA_DIR={data_dir}")) - {up.pid}

        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=60) == 0, log.read_text()
    finally:
        if up.poll() is None:  # a failed assertion: still stop what it started
            up.send_signal(signal.SIGINT)
            try:
                up.wait(timeout=60)
            except subprocess.TimeoutExpired:
                up.kill()
    assert "Stopped." in log.read_text()
    assert not [pid for pid in everything if _alive(pid)]
    assert _pids_with_env(f"TANDEM_DATA_DIR={data_dir}") == []
    assert not (data_dir / "redis" / "url").exists()
