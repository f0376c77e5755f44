"""Several web processes behind one port (`TANDEM_WEB_WORKERS`): the supervisor listens once
and every web child accepts on the inherited socket."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
import urllib.request

import pytest

from fleet.runtime.children import ChildSpec, RestartPolicy, web_servers
from fleet.runtime.launcher import Supervisor
from tests.foundation.helpers import free_port
from tests.worker.helpers import database_url

# Accepts on the inherited socket; answers each connection with its pid, slowly (so that a
# second connection arriving meanwhile must be taken by the other process).
SERVER = """
import os, socket, sys, time
s = socket.socket(fileno=int(sys.argv[1]))
while True:
    c, _ = s.accept()
    time.sleep(0.3)
    c.sendall(str(os.getpid()).encode())
    c.close()
"""


def _ask(port: int, out: list) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        out.append(int(c.recv(64)))


def test_web_children_share_one_listening_socket(tmp_path):
    port = free_port()
    argv, address = [sys.executable, "-c", SERVER, "{fd}"], ("127.0.0.1", port)
    supervisor = Supervisor(env=dict(os.environ), log=lambda line: None, policy=RestartPolicy())
    a = supervisor.start(ChildSpec("web-2", argv, listen=address))
    b = supervisor.start(ChildSpec("web", argv, listen=address))
    try:
        time.sleep(0.5)
        answers: list[int] = []
        threads = [threading.Thread(target=_ask, args=(port, answers)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert len(answers) == 4 and set(answers) == {a.pid, b.pid}
        assert len(supervisor.sockets) == 1  # one socket, listened on once
    finally:
        supervisor.stop_all()
    assert not supervisor.sockets


def test_web_servers_are_uvicorns_on_the_shared_socket(settings):
    one = web_servers(settings, host="127.0.0.1", port=8123, workers=1)
    assert [s.name for s in one] == ["web"] and one[0].listen is None
    many = web_servers(settings, host="127.0.0.1", port=8123, workers=3)
    assert [s.name for s in many] == ["web-2", "web-3", "web"]  # the probed one last
    assert all(s.listen == ("127.0.0.1", 8123) and s.essential for s in many)
    assert many[0].argv[-2:] == ["--fd", "{fd}"]  # it adopts the supervisor's socket
    assert one[0].argv[1:3] == ["-m", "fleet.runtime.web_serve"]
    assert many[-1].ready_url == "http://127.0.0.1:8123/healthz"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_two_web_servers_serve_one_port(transactional_db, settings):
    """The real thing: `web_servers(workers=2)` under the supervisor, both alive and
    answering on the one port."""
    port = free_port()
    env = {**os.environ, "DATABASE_URL": database_url(), "REDIS_URL": settings.REDIS_URL}
    supervisor = Supervisor(env=env, log=lambda line: None, policy=RestartPolicy())
    specs = web_servers(settings, host="127.0.0.1", port=port, workers=2)
    for spec in specs:
        supervisor.start(spec)
    try:
        supervisor.wait_ready(specs[-1], timeout_s=60)
        for _ in range(6):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
                assert r.status == 200
        assert all(c.process and c.process.poll() is None for c in supervisor.children)
    finally:
        supervisor.stop_all()
