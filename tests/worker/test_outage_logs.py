"""While Redis is down, a node worker's loops log a bounded number of lines: one, then a
summary per period, not a traceback every half second (27 KB/s under `up`)."""

from __future__ import annotations

import logging

import pytest

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


def test_a_round_message_is_retried_while_redis_restarts_not_dropped(monkeypatch, caplog):
    """A drafter's drafts (or a verifier's results) lost to a Redis restart stalled every
    sequence of the pair for good: the send is retried until Redis is back."""
    import redis

    loop = _Loop(node_id=987655, pipeline_id=1, config={})
    sent, failures = [], iter(range(5))

    def send_from(sender, node_id, kind, payload):
        if next(failures, None) is not None:
            raise redis.ConnectionError("Connection refused")
        sent.append((node_id, kind, payload))

    monkeypatch.setattr(engine_loop.wire, "send_from", send_from)
    monkeypatch.setattr(engine_loop.time, "sleep", lambda s: None)
    with caplog.at_level(logging.INFO, logger=engine_loop.__name__):
        loop.send(3, "drafts", {"drafts": []})
    assert sent == [(3, "drafts", {"drafts": []})]
    assert len(caplog.records) == 1  # one line for five failures

    loop.stopping.set()  # stopping: no retry, the error surfaces
    failures = iter(range(1))
    with pytest.raises(redis.ConnectionError):
        loop.send(3, "drafts", {"drafts": []})


def test_celery_beat_logs_an_unreachable_broker_once_per_period(caplog):
    """Beat logs a traceback for every task it cannot send (the watchdog's, every second)."""
    from celery.beat import logger as beat_logger

    import fleet.celery  # noqa: F401  (installs the filter)

    with caplog.at_level(logging.INFO, logger=beat_logger.name):
        for _ in range(50):
            try:
                raise ConnectionRefusedError(111, "Connection refused")
            except OSError as exc:
                beat_logger.error("Message Error: %s\n%s", exc, ["stack"], exc_info=True)
        beat_logger.info("Scheduler: Sending due task %s (%s)", "w", "tandem.w")
    records = [r for r in caplog.records if r.name == beat_logger.name]
    assert [r.levelno for r in records] == [logging.ERROR, logging.INFO]
