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
        self.clock = clock
        self._seen: dict[str, _Seen] = {}
        self._lock = threading.Lock()

    def log(self, level: int, msg: str, *args, **kwargs) -> bool:
        """Log `msg` if it is new or its period is over (with how many were left out);
        True when it was written."""
        now = self.clock()
        with self._lock:
            seen = self._seen.get(msg)
            if seen is None:
                if len(self._seen) >= 64:  # a bound: distinct formats are few in practice
                    self._seen.clear()
                self._seen[msg] = _Seen(first=now, last_logged=now)
                suppressed = 0
            elif now - seen.last_logged < self.every_s:
                seen.suppressed += 1
                return False
            else:
                suppressed, seen.suppressed, seen.last_logged = seen.suppressed, 0, now
        if suppressed:
            msg = f"{msg} (%d more like this in the last %.0fs)"
            args = (*args, suppressed, self.every_s)
        self.logger.log(level, msg, *args, **kwargs)
        return True

    def warning(self, msg: str, *args, **kwargs) -> bool:
        return self.log(logging.WARNING, msg, *args, **kwargs)

    def error(self, msg: str, *args, **kwargs) -> bool:
        return self.log(logging.ERROR, msg, *args, **kwargs)

    def clear(self, recovered: str = "", *args) -> None:
        """The condition is over: the next occurrence is logged at once; `recovered` is
        logged (info) if anything had been logged since the last clear."""
        with self._lock:
            had, self._seen = bool(self._seen), {}
        if had and recovered:
            self.logger.info(recovered, *args)
