"""What the ledger believes of a node's report before it writes anything: its shape
(`check_shape`, where the message is parsed) and, for a finish, that it fits the request it
answers (`check_finish`). Both raise `BadReport` with a reason an operator can
act on; the ledger sets the entry aside (its dead-letter stream), it never retries it.

Database-free and torch-free: the lengths are the columns' (a test holds them equal), so
SQLite refuses what PostgreSQL would, here, before either is asked.
"""

from __future__ import annotations

import math
import uuid
from typing import Any


class BadReport(ValueError):
    """A report that can never be stored as sent (a data error, not a bad day): the ledger
    sets it aside with this reason instead of retrying it."""


FINISH_REASON_MAX = 20  # Generation.finish_reason's max_length
MAX_INT = 2**53  # every database and JSON reader holds it exactly
MAX_ITEMS = 1_000_000  # tokens in one finish, ids in one claim
MAX_DEPTH = 3  # counters nest a list or a map of numbers, no deeper
MAX_K = 64  # draft tokens per draft round: above any pipeline's k
MAX_ROUNDS = 4096  # rounds one finish logs for the timeline (the rest are counted)
ROUND_FIELDS = ("at_ms", "k", "accepted", "batch", "verify_ms")


def _uuid(value: Any, what: str) -> str:
    try:
        return str(uuid.UUID(str(value)))
    except (TypeError, ValueError):
        raise BadReport(f"{what} is not a generation id") from None


def _int(value: Any, what: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_INT:
        raise BadReport(f"{what} must be an integer in [{low}, 2**53]")
    return value


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadReport(f"{what} must be a number")
    if not math.isfinite(value) or value < 0 or value > MAX_INT:
        raise BadReport(f"{what} must be finite, >= 0 and <= 2**53")
    return value


def _list(value: Any, what: str) -> list:
    if not isinstance(value, list) or len(value) > MAX_ITEMS:
        raise BadReport(f"{what} must be a list of at most {MAX_ITEMS}")
    return value


def _figures(value: Any, what: str, depth: int = 0) -> None:
    """Counters and latency summaries: numbers >= 0, finite, in lists or maps of such."""
    if isinstance(value, dict) and depth < MAX_DEPTH:
        if len(value) > 4096:
            raise BadReport(f"{what} has too many entries")
        for k, v in value.items():
            _figures(v, f"{what}.{str(k)[:40]}", depth + 1)
    elif isinstance(value, list) and depth < MAX_DEPTH:
        for i, v in enumerate(_list(value, what)):
            _figures(v, f"{what}[{i}]", depth + 1)
    else:
        _number(value, what)


def _text(report: dict, key: str, *, max_len: int | None = None) -> None:
    value = report.get(key, "")
    if not isinstance(value, str):
        raise BadReport(f"{key} must be a string")
    if max_len is not None and len(value) > max_len:
        raise BadReport(f"{key} is {len(value)} characters long (at most {max_len})")


def check_shape(report: dict) -> None:
    """A parsed report's fields, by kind (raises BadReport)."""
    kind = report["kind"]
    if kind == "claim":
        for start in _list(report.get("starts"), "starts"):
            if not isinstance(start, list) or len(start) != 2:
                raise BadReport("a claim's start is [generation, attempt]")
            _uuid(start[0], "a claim's generation")
            _int(start[1], "a claim's attempt", 1)
    elif kind == "first_token":
        for gid in _list(report.get("ids"), "ids"):
            _uuid(gid, "a first token's generation")
        _number(report.get("at"), "at")
    else:
        _uuid(report.get("gen"), "gen")
        _int(report.get("attempt"), "attempt", 1)
        _text(report, "finish_reason", max_len=FINISH_REASON_MAX)
        _text(report, "output_text")
        _text(report, "error")
        for token in _list(report.get("output_tokens"), "output_tokens"):
            _int(token, "an output token")
        for key in ("counters", "itl_ms"):
            value = report.get(key) or {}
            if not isinstance(value, dict):
                raise BadReport(f"{key} must be an object")
            _figures(value, key)
        _check_rounds(report.get("rounds"))


def _check_rounds(log: Any) -> None:
    """A finish's round log (`inference.worker.round_log`), optional: an older worker
    sends none."""
    if log is None:
        return
    if not isinstance(log, dict):
        raise BadReport("rounds must be an object")
    _number(log.get("t0"), "rounds.t0")
    if log.get("prefill_ms") is not None:
        _number(log["prefill_ms"], "rounds.prefill_ms")
    _int(log.get("dropped", 0), "rounds.dropped")
    if log.get("fields", list(ROUND_FIELDS)) != list(ROUND_FIELDS):
        raise BadReport(f"rounds.fields must be {list(ROUND_FIELDS)}")
    rows = log.get("rounds")
    if not isinstance(rows, list) or len(rows) > MAX_ROUNDS:
        raise BadReport(f"rounds.rounds must be a list of at most {MAX_ROUNDS}")
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != len(ROUND_FIELDS):
            raise BadReport(f"rounds.rounds[{i}] must be [{', '.join(ROUND_FIELDS)}]")
        for name, value in zip(ROUND_FIELDS, row, strict=True):
            _number(value, f"rounds.rounds[{i}].{name}")
        if row[2] > row[1] or row[1] > MAX_K:
            raise BadReport(f"rounds.rounds[{i}]: accepted {row[2]} of k {row[1]}")


def check_finish(report: dict, *, params: dict) -> None:
    """A finish against the request it answers: no more tokens than max_tokens (the list
    holds earlier attempts' tokens too, and they count against the same max_tokens), and
    counters that such a sequence can have. Every request the API takes has max_tokens in
    its params; a row without (written by hand) is bounded by the counters' sanity alone."""
    counters = report.get("counters") or {}

    def count(key: str) -> float:
        return _number(counters.get(key, 0), f"counters.{key}")  # a list where a count belongs

    drafted = count("num_draft_tokens")
    if "num_draft_tokens" in counters and count("num_accepted_tokens") > drafted:
        raise BadReport("counters.num_accepted_tokens exceeds num_draft_tokens")
    raw = params.get("max_tokens")
    if isinstance(raw, bool) or not isinstance(raw, int):
        return
    n = len(report["output_tokens"])
    if n > raw:
        raise BadReport(f"{n} output tokens for a request of max_tokens {raw}")
    # one token at least per round (a draft round emits its accepted tokens + one)
    rounds = (report.get("rounds") or {}).get("rounds") or []
    if len(rounds) > raw + 1:
        raise BadReport(f"{len(rounds)} rounds logged for a request of max_tokens {raw}")
    for key in ("num_drafts", "num_accepted_tokens", "num_emitted_tokens"):
        if count(key) > raw + 1:
            raise BadReport(f"counters.{key} {counters[key]} exceeds max_tokens {raw}")
    if drafted > MAX_K * (raw + 1):
        raise BadReport(f"counters.num_draft_tokens {drafted} for max_tokens {raw}")
