"""Bounded logging while a dependency is down: the same message is logged once, then at most
one summary per period ("... (37 more like this in the last 30s)"), and one line when the
condition clears. A Redis outage used to write ~27 KB/s of identical tracebacks.

    _throttled = Throttled(logger, every_s=30)
    except redis.ConnectionError as exc:
        _throttled.warning("aggregator: Redis unreachable: %r", exc)
    ...
    _throttled.clear("aggregator: Redis reachable again")  # after a success

Identical means the same format string: the arguments (an error text with a changing
port or count) do not make a message new. No I/O, no locks held while logging.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Seen:
    first: float
    last_logged: float
    suppressed: int = 0


class _Gate:
    """Which occurrences of a message pass: the first, then one per `every_s` (with how
    many were held back)."""

    def __init__(self, every_s: float, clock: Callable[[], float]):
        self.every_s, self.clock = every_s, clock
        self.seen: dict[str, _Seen] = {}
        self.lock = threading.Lock()

    def admit(self, key: str) -> tuple[bool, int]:
        now = self.clock()
        with self.lock:
            seen = self.seen.get(key)
            if seen is None:
                if len(self.seen) >= 64:  # a bound: distinct formats are few in practice
                    self.seen.clear()
                self.seen[key] = _Seen(first=now, last_logged=now)
                return True, 0
            if now - seen.last_logged < self.every_s:
                seen.suppressed += 1
                return False, 0
            suppressed, seen.suppressed, seen.last_logged = seen.suppressed, 0, now
            return True, suppressed

    def clear(self) -> bool:
        with self.lock:
            had, self.seen = bool(self.seen), {}
        return had


SUMMARY = " (%d more like this in the last %.0fs)"


class Throttled:
    def __init__(
        self,
        logger: logging.Logger,
        *,
        every_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.logger = logger
        self.every_s = every_s
        self._gate = _Gate(every_s, clock)

    def log(self, level: int, msg: str, *args, **kwargs) -> bool:
        """Log `msg` if it is new or its period is over (with how many were left out);
        True when it was written."""
        admitted, suppressed = self._gate.admit(msg)
        if not admitted:
            return False
        if suppressed:
            msg, args = msg + SUMMARY, (*args, suppressed, self.every_s)
        self.logger.log(level, msg, *args, **kwargs)
        return True

    def warning(self, msg: str, *args, **kwargs) -> bool:
        return self.log(logging.WARNING, msg, *args, **kwargs)

    def error(self, msg: str, *args, **kwargs) -> bool:
        return self.log(logging.ERROR, msg, *args, **kwargs)

    def clear(self, recovered: str = "", *args) -> None:
        """The condition is over: the next occurrence is logged at once; `recovered` is
        logged (info) if anything had been logged since the last clear."""
        if self._gate.clear() and recovered:
            self.logger.info(recovered, *args)


class ThrottleFilter(logging.Filter):
    """The same bound for a library's logger (celery beat's "Message Error" traceback for
    every scheduled task it cannot send while the broker is away): warnings and errors of
    one format pass once per period, with how many were held back."""

    def __init__(self, *, every_s: float = 30.0, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.every_s = every_s
        self._gate = _Gate(every_s, clock)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        admitted, suppressed = self._gate.admit(str(record.msg))
        if admitted and suppressed:
            args = record.args if isinstance(record.args, tuple) else (record.args,)
            record.msg, record.args = f"{record.msg}{SUMMARY}", (*args, suppressed, self.every_s)
        return admitted
