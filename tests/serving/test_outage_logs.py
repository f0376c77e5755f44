"""While Redis is down, a node worker's loops log a bounded number of lines: one, then a
summary per period, not a traceback every half second (27 KB/s under `up`)."""

from __future__ import annotations

import logging

from inference.worker import engine_loop
from inference.worker.engine_loop import BaseLoop
from tests.foundation.helpers import free_port


class _Loop(BaseLoop):
    role = "verify"

    def slots(self) -> dict:
        return {}


def test_a_node_loop_logs_a_redis_outage_once(settings, monkeypatch, caplog):
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    loop = _Loop(node_id=987654, pipeline_id=1, config={})
    naps = []

    def nap(seconds: float) -> None:  # the listener's retry pause, without the wait
        naps.append(seconds)
        if len(naps) >= 40:
            loop.stopping.set()

    monkeypatch.setattr(engine_loop.time, "sleep", nap)
    with caplog.at_level(logging.INFO, logger=engine_loop.__name__):
        loop._listen()  # 40 failed reads, then stops
        for _ in range(40):
            loop._write_inspect()
    lines = [r.getMessage() for r in caplog.records]
    assert len(naps) == 40
    assert len(lines) == 2, lines  # one per kind of failure
    assert "reading round messages failed" in lines[0] and "Connection" in lines[0]
    assert "inspect write failed" in lines[1]
    assert all(r.exc_info is None for r in caplog.records)  # no traceback
