import json
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
from fleet.runtime.children import ChildSpec, RestartPolicy, children
from fleet.runtime.launcher import ChildFailed, Supervisor
from fleet.runtime.supervision import problems, state_path
from inference.selectors import stream_of
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
    assert web.argv[1:3] == [
        "-m",
        "fleet.runtime.web_serve",
    ]  # uvicorn serving fleet.asgi:application
    assert web.ready_url == "http://127.0.0.1:8123/healthz"


def _supervise(supervisor: Supervisor, until, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not until():
        assert time.monotonic() < deadline, "timed out"
        supervisor.check()
        time.sleep(0.02)


def _crasher(starts: Path, code: int = 3) -> list[str]:
    """A child that notes when it started, then exits with `code`."""
    script = f"import time; open({str(starts)!r}, 'a').write(f'{{time.monotonic()}}\\n')"
    return [sys.executable, "-c", f"{script}; raise SystemExit({code})"]


def test_backoff_doubles_up_to_its_cap():
    policy = RestartPolicy(initial_backoff_s=1, max_backoff_s=30)
    assert [policy.backoff_s(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]


def test_a_child_that_dies_is_restarted_with_growing_backoff(tmp_path):
    starts, exits = tmp_path / "starts", []
    supervisor = Supervisor(
        env=dict(os.environ),
        log=lambda line: None,
        policy=RestartPolicy(initial_backoff_s=0.3, max_backoff_s=1.2, give_up_after=9),
        state_file=tmp_path / "supervisor.json",
        on_exit=lambda spec, reason: exits.append((spec.name, reason)),
    )
    supervisor.start(ChildSpec("flaky", _crasher(starts)))
    supervisor.start(ChildSpec("steady", [sys.executable, "-c", "import time; time.sleep(60)"]))
    steady = supervisor.children[1].process
    try:
        _supervise(supervisor, lambda: starts.exists() and len(starts.read_text().split()) >= 4)
        times = [float(t) for t in starts.read_text().split()][:4]
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        for gap, backoff in zip(gaps, [0.3, 0.6, 1.2], strict=True):
            assert backoff <= gap < backoff + 1.5, gaps
        assert exits[:3] == [("flaky", "exited with code 3")] * 3
        flaky = supervisor.children[0]
        assert flaky.restarts == 3 and flaky.state in ("running", "restarting")
        assert supervisor.children[1].process is steady and steady.poll() is None  # untouched
        state = json.loads((tmp_path / "supervisor.json").read_text())
        assert [c["name"] for c in state["children"]] == ["flaky", "steady"]
        assert state["children"][0]["restarts"] == 3
        assert state["children"][0]["last_exit"] == "exited with code 3"
    finally:
        supervisor.stop_all()
    assert supervisor.children == [] and not (tmp_path / "supervisor.json").exists()


def test_it_gives_up_after_n_crashes_in_the_window_and_the_rest_keeps_running(tmp_path, settings):
    settings.DATA_DIR = tmp_path
    starts = tmp_path / "starts"
    logged: list[str] = []
    supervisor = Supervisor(
        env=dict(os.environ),
        log=logged.append,
        policy=RestartPolicy(initial_backoff_s=0.05, give_up_after=3, window_s=60),
        state_file=state_path(tmp_path),
    )
    supervisor.start(ChildSpec("steady", [sys.executable, "-c", "import time; time.sleep(60)"]))
    supervisor.start(ChildSpec("doomed", _crasher(starts, code=7)))
    doomed = supervisor.children[1]
    try:
        _supervise(supervisor, lambda: doomed.state == "failed")
        for _ in range(10):  # given up on: not started again
            supervisor.check()
            time.sleep(0.05)
        assert len(starts.read_text().split()) == 3
        assert supervisor.children[0].process.poll() is None
        assert any("doomed" in line and "3 crashes within 60s" in line for line in logged)
        assert [(c["name"], c["state"], c["crashes"]) for c in problems(tmp_path)] == [
            ("doomed", "failed", 3)
        ]
        assert problems(tmp_path)[0]["last_exit"] == "exited with code 7"
    finally:
        supervisor.stop_all()
    assert problems(tmp_path) == []


def test_crashes_older_than_the_window_are_forgiven(tmp_path):
    """A child that crashes now and then (never twice within the window) is restarted
    forever, each time after the first backoff."""
    starts = tmp_path / "starts"
    policy = RestartPolicy(initial_backoff_s=0.3, give_up_after=2, window_s=0.25)
    supervisor = Supervisor(env=dict(os.environ), log=lambda line: None, policy=policy)
    supervisor.start(ChildSpec("rare", _crasher(starts)))
    try:
        _supervise(supervisor, lambda: starts.exists() and len(starts.read_text().split()) >= 4)
        assert supervisor.children[0].state != "failed"
        assert len(supervisor.children[0].crashes) == 1
    finally:
        supervisor.stop_all()


def test_giving_up_on_an_essential_child_stops_up(tmp_path):
    supervisor = Supervisor(
        env=dict(os.environ),
        log=lambda line: None,
        policy=RestartPolicy(initial_backoff_s=0.05, give_up_after=2),
    )
    supervisor.start(
        ChildSpec("web", [sys.executable, "-c", "raise SystemExit(1)"], essential=True)
    )
    with pytest.raises(ChildFailed, match=r"web exited with code 1 2 times; gave up"):
        _supervise(supervisor, lambda: False)
    supervisor.stop_all()


def test_a_dead_childs_leftover_group_is_killed_before_the_restart(tmp_path):
    """A child that dies and leaves a forked grandchild behind (celery's beat, say): the
    grandchild goes too, so the restarted child does not find a twin."""
    pidfile = tmp_path / "grandchild"
    script = (
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "raise SystemExit(1)\n"
    )
    supervisor = Supervisor(
        env=dict(os.environ), log=lambda line: None, policy=RestartPolicy(initial_backoff_s=30)
    )
    supervisor.start(ChildSpec("forker", [sys.executable, "-c", script]))
    try:
        _supervise(supervisor, lambda: supervisor.children[0].state == "restarting")
        grandchild = int(pidfile.read_text())
        for _ in range(50):
            if not _alive(grandchild):
                break
            time.sleep(0.1)
        assert not _alive(grandchild)
    finally:
        supervisor.stop_all()


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
@pytest.mark.timeout(300)  # a real `up` from a clean data directory
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


def test_generations_a_previous_run_left_active_are_ended_at_start(
    db, django_capture_on_commit_callbacks, monkeypatch
):
    """`up` was killed with streams open: at the next start their rows do not stay running
    (no worker holds them any more), and their streams end with an error event."""
    from fleet.console.management.commands.up import _close_orphans
    from inference import wire
    from inference.models import Generation
    from tests.worker.test_units import _pipeline, _submit

    monkeypatch.setattr(wire, "send", lambda *args: None)
    p, nodes = _pipeline(verifiers=1)
    verifier = nodes["verify"][0]
    with django_capture_on_commit_callbacks(execute=True):
        g = _submit(p)
    Generation.objects.filter(pk=g.pk).update(state="running")
    specs = [ChildSpec("node-verify", ["true"], node=verifier.name), ChildSpec("web", ["true"])]
    with django_capture_on_commit_callbacks(execute=True):
        _close_orphans(specs)
    g.refresh_from_db()
    assert g.state == "failed" and "was not running when Tandem started" in g.error
    assert stream_of(g.pk)[-1][1]["type"] == "error"


def test_stop_sends_nothing_to_the_old_group_of_a_child_given_up_on(tmp_path, monkeypatch):
    """A child given up on had its group killed when it died; at stop its pid may belong to
    another process, so `stop_all` must not signal that pid's group again."""
    supervisor = Supervisor(
        env=dict(os.environ),
        log=lambda line: None,
        policy=RestartPolicy(initial_backoff_s=0.05, give_up_after=1),
    )
    supervisor.start(ChildSpec("steady", [sys.executable, "-c", "import time; time.sleep(60)"]))
    supervisor.start(ChildSpec("doomed", _crasher(tmp_path / "starts", code=3)))
    steady, doomed = supervisor.children
    _supervise(supervisor, lambda: doomed.state == "failed")
    signalled: list[int] = []
    real_killpg = os.killpg

    def recording_killpg(pgid, sig):
        signalled.append(pgid)
        return real_killpg(pgid, sig)

    monkeypatch.setattr(os, "killpg", recording_killpg)
    supervisor.stop_all()
    assert doomed.process.pid not in signalled
    assert steady.process.pid in signalled and steady.process.poll() is not None


def test_up_points_its_channel_layer_at_the_redis_it_started(settings):
    """`up` reads settings before its embedded Redis exists: its own channel layer (change
    markers of the demo pipelines it creates) must follow the URL, as Celery's does. It did
    not: "change marker not pushed … ConnectionError" at every start."""
    import copy

    from channels.layers import channel_layers, get_channel_layer

    from fleet.console.management.commands.up import _use_started_redis
    from fleet.redis_clients import redis_url

    settings.CHANNEL_LAYERS = copy.deepcopy(settings.CHANNEL_LAYERS)
    (host,) = settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"]
    host["address"] = "redis://127.0.0.1:1/0"  # what settings hold before the Redis starts
    url = redis_url()
    channel_layers.backends.clear()
    try:
        _use_started_redis(url)
        assert get_channel_layer().hosts[0]["address"] == url
    finally:
        channel_layers.backends.clear()


def test_a_oneshot_job_is_done_when_it_succeeds_and_failed_not_restarted_when_it_fails(tmp_path):
    ok, bad = tmp_path / "ok", tmp_path / "bad"
    lines: list[str] = []
    supervisor = Supervisor(
        env=dict(os.environ),
        log=lines.append,
        policy=RestartPolicy(initial_backoff_s=0.05),
        state_file=tmp_path / "supervisor.json",
    )
    supervisor.start(ChildSpec("train-ok", _crasher(ok, code=0), oneshot=True))
    supervisor.start(ChildSpec("train-bad", _crasher(bad, code=2), oneshot=True))
    try:
        _supervise(supervisor, lambda: all(c.state != "running" for c in supervisor.children))
        time.sleep(0.3)
        supervisor.check()  # any other child would have been restarted by now (0.05 s backoff)
        done, failed = supervisor.children
        assert (done.state, failed.state) == ("done", "failed")
        assert done.restarts == failed.restarts == 0
        assert len(ok.read_text().split()) == len(bad.read_text().split()) == 1
        assert any("train-bad" in line and "exited with code 2" in line for line in lines)
        names = {p["name"] for p in problems(tmp_path)}
        assert names == {"train-bad"}  # a finished job is not a problem; a failed one is
    finally:
        supervisor.stop_all()


def test_up_trains_the_learned_draft_once_in_the_background_unless_switched_off(
    settings, monkeypatch
):
    from inference.worker.launch import train_children

    monkeypatch.setenv("TANDEM_DEFAULT_PIPELINES", "smollm2,demo")
    monkeypatch.delenv("TANDEM_LEARNED_DRAFTS", raising=False)  # on unless switched off
    (job,) = train_children(settings)  # the demo pair trains its own draft
    assert job.name == "train-smollm2" and job.oneshot and not job.node
    assert job.argv[2:6] == ["train_draft", "--target", "smollm2", "--serve"]
    assert "--nice" in job.argv
    monkeypatch.setenv("TANDEM_LEARNED_DRAFTS", "0")
    assert train_children(settings) == []
