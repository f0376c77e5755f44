"""The input rules both HTTP APIs share (REST under /api/ and OpenAI's /v1).

`load_json(raw)` decodes a request body and `check_value(value)` walks a decoded value once,
iteratively (a deep value cannot exhaust the stack here), refusing what no layer behind it can
store or echo safely:

- lone surrogates (U+D800..U+DFFF) in any string or key: they decode from JSON (`"\\ud800"`)
  but cannot be encoded as UTF-8, so a row holding one breaks every response that shows it;
- NUL characters, except in the string values under `nul_ok` keys (PostgreSQL refuses NUL in
  text and JSON columns; the generation service replaces it in prompts);
- nesting deeper than MAX_DEPTH (json's C decoder raises RecursionError, not ValueError, on
  very deep input);
- integers outside a signed 64-bit range and non-finite numbers (NaN, Infinity, 1e999): no
  column holds them.

Errors say where (a JSON path such as `messages[2].content`) and what rule, never the value.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

MAX_DEPTH = 32
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
SURROGATES = range(0xD800, 0xE000)


@dataclass
class InputError(Exception):
    """`message` is safe to echo: it never contains the offending value."""

    message: str
    path: str = ""

    def __str__(self) -> str:
        return self.message


def has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def check_text(text: str, *, path: str = "", nul_ok: bool = False) -> None:
    if has_surrogate(text):
        raise InputError("Text must be valid Unicode (no lone surrogates such as \\ud800).", path)
    if not nul_ok and "\x00" in text:
        raise InputError("Text may not contain NUL characters.", path)


def _child(path: str, key) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    key = key if len(key) <= 40 else key[:40] + "…"  # a path names a place, briefly
    return f"{path}.{key}" if path else key


def check_value(value, *, nul_ok: frozenset[str] = frozenset(), max_depth: int = MAX_DEPTH):
    """Raise InputError for the first thing in `value` no API may accept. `nul_ok` names
    top-level keys under which string values may hold NUL (keys never may)."""
    stack = [(value, "", 0, False)]
    while stack:
        item, path, depth, nul_allowed = stack.pop()
        if isinstance(item, str):
            check_text(item, path=path, nul_ok=nul_allowed)
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if not INT_MIN <= item <= INT_MAX:
                raise InputError("Integers must fit in 64 bits (-2**63 .. 2**63-1).", path)
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise InputError("Numbers must be finite (no NaN, Infinity or overflow).", path)
        elif isinstance(item, dict | list):
            if depth >= max_depth:
                raise InputError(f"JSON may be nested at most {max_depth} levels deep.", path)
            if isinstance(item, dict):
                for key, child in item.items():
                    check_text(key, path=path)  # a bad key is named by its parent
                    child_path = _child(path, key)
                    allowed = nul_allowed or (depth == 0 and key in nul_ok)
                    stack.append((child, child_path, depth + 1, allowed))
            else:
                for index, child in enumerate(item):
                    stack.append((child, _child(path, index), depth + 1, nul_allowed))


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def load_json(raw: bytes | str, *, nul_ok: frozenset[str] = frozenset()):
    """Decode a request body and check it; InputError for anything malformed or refused."""
    try:
        value = json.loads(raw, parse_constant=_refuse_constant)
    except RecursionError as exc:
        raise InputError(f"JSON may be nested at most {MAX_DEPTH} levels deep.") from exc
    except UnicodeDecodeError as exc:
        raise InputError("The body is not valid UTF-8.") from exc
    except ValueError as exc:
        # json's message gives a position only (never the text), except for long numbers.
        reason = str(exc) if isinstance(exc, json.JSONDecodeError) else "a number is too long"
        raise InputError(f"The body is not valid JSON: {reason}.") from exc
    check_value(value, nul_ok=nul_ok)
    return value
