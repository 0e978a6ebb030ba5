"""What the fast path may be trusted with, and the exact path for what it may not.

DuckDB's JSON reader is fast but lenient: it reads ``"ts": "12.5"`` or ``true`` as a number,
accepts trailing commas and NaN, and turns integers beyond 64 bits into doubles. A chunk that might
hold any of these goes through Python's exact parser instead, which refuses them with the event
index and the field, so that whether an event imports never depends on its neighbours.
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Final

import orjson

from hyperscope.errors import TraceFormatError
from hyperscope.schema.events import PHASES, PHASES_WITHOUT_TS
from hyperscope.store._sql import KNOWN_KEYS
from hyperscope.store._tracefile import Chunk, split_events

#: What DuckDB would accept leniently (a boolean or a string as a time, integers beyond 64 bits
#: read as doubles): a chunk holding one goes through the exact parser, which refuses it clearly.
#: Searched in the normalized text (``_NORMALIZE``: no whitespace, no signs).
_SUSPECT_TIME: Final = re.compile(rb'"(?:ts|dur)":[tfn"\[{]')
_TRAILING_COMMAS: Final = (b",]", b",}")
#: Digits become 0 and E becomes e, so plain substring searches find long numbers: a regex with a
#: digit class is ten times slower. Whitespace and signs are dropped, so a trailing comma is two
#: bytes and "1e+308" reads "0e000" (one pass instead of two regexes over the raw text: 0.10 s per
#: 16 MB instead of 0.13). A false alarm (inside a string) only costs speed.
_NORMALIZE: Final = bytes.maketrans(b"123456789E", b"000000000e")
_DROPPED: Final = b"+- \t\r\n"
_SUSPECT_NUMBERS: Final = (
    b"0" * 20,  # an integer of 20 digits may exceed 64 bits (2**64 has 20 digits)
    b"0e000",  # a number with an exponent of 3 digits may overflow or underflow a double
    b"NaN",  # not JSON; DuckDB would accept it
    b"Infinity",
)


def fast_path_safe(text: bytes) -> bool:
    """Whether DuckDB's reader would accept exactly what the exact parser accepts."""
    normalized = text.translate(_NORMALIZE, _DROPPED)
    if any(s in normalized for s in _TRAILING_COMMAS) or _SUSPECT_TIME.search(normalized):
        return False
    return not any(s in normalized for s in _SUSPECT_NUMBERS)


_DOUBLE_MAX: Final = Decimal("1.7976931348623157e308")
_DOUBLE_MIN: Final = Decimal("4.9406564584124654e-324")
#: The largest |ts| or |dur| in microseconds whose nanoseconds fit in a signed 64-bit integer.
_MAX_US: Final = Decimal(2**63 - 1) / 1000
_KNOWN: Final = frozenset(KNOWN_KEYS)


def _decimal(value: object) -> orjson.Fragment:
    if isinstance(value, Decimal):
        return orjson.Fragment(str(value).encode())
    raise TypeError(f"cannot serialise {type(value).__name__}")


def exact_json(path: Path, chunk: Chunk) -> bytes:
    """The chunk parsed event by event, validated, unknown top-level fields moved to ``__extra``."""
    lines = []
    for index, event in split_events(path, chunk):
        _validate(path, index, event)
        extra = {k: event.pop(k) for k in [k for k in event if k not in _KNOWN]}
        if extra:
            event["__extra"] = extra
        try:
            lines.append(orjson.dumps(event, default=_decimal))
        except TypeError as exc:  # lone surrogate escapes ("\ud800") cannot be stored as UTF-8
            raise TraceFormatError(
                path, f"holds a value that cannot be stored: {exc}", event_index=index
            ) from None
    return b"[" + b",\n".join(lines) + b"]"


def _is_number(value: object) -> bool:
    return isinstance(value, (int, Decimal)) and not isinstance(value, bool)


def _validate(path: Path, index: int, event: object) -> None:
    """The rules of the fast path's ``invalid_rows``, with a message that says which one failed."""

    def fail(field: str | None, problem: str, expected: str | None = None) -> None:
        raise TraceFormatError(path, problem, event_index=index, field=field, expected=expected)

    if not isinstance(event, dict):
        fail(None, f"is a {type(event).__name__}", "an object")
        return
    ph = event.get("ph")
    if ph is None:
        fail("ph", "is missing", "a Chrome-trace phase such as 'X'")
    if not isinstance(ph, str):
        fail("ph", f"is {ph!r}", "a string")
    elif ph not in PHASES:
        fail("ph", f"unknown event phase {ph!r}", "one of " + "".join(sorted(PHASES)))
    for key in ("cat", "name"):
        if event.get(key) is not None and not isinstance(event[key], str):
            fail(key, f"is {event[key]!r}", "a string")
    if ph == "X" and event.get("name") is None:
        fail("name", "is missing", "a string")
    ts = event.get("ts")
    if ts is None and ph not in PHASES_WITHOUT_TS:
        fail("ts", "is missing", "a number of microseconds")
    if ts is not None and not _is_number(ts):
        fail("ts", f"is {ts!r}", "a number of microseconds")
    dur = event.get("dur")
    if dur is None and ph == "X":
        fail("dur", "is missing", "a number of microseconds")
    if dur is not None and not _is_number(dur):
        fail("dur", f"is {dur!r}", "a number of microseconds")
    for key in ("ts", "dur"):
        value = event.get(key)
        if _is_number(value) and value < 0:  # type: ignore[operator]
            fail(key, f"is {value}, a negative time", "a non-negative number of microseconds")
        if _is_number(value) and abs(value) > _MAX_US:  # type: ignore[arg-type]
            fail(key, f"is {value} microseconds, beyond what 64-bit nanoseconds hold", "at most 9.2e15")
    if _is_number(ts) and _is_number(dur) and ts + dur > _MAX_US:  # type: ignore[operator]
        end = ts + dur  # type: ignore[operator]
        fail("dur", f"ends the event at {end} µs, beyond 64-bit nanoseconds", "ts + dur at most 9.2e15")
    for key in ("pid", "tid"):
        value = event.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, str))):
            fail(key, f"is {value!r}", "an integer or a string")
    if event.get("args") is not None and not isinstance(event["args"], dict):
        fail("args", f"is {type(event['args']).__name__}", "an object")
    for key, value in event.items():
        found = _unstorable(value, key)
        if found is not None:
            fail(found[0], found[1], found[2])


def _unstorable(value: object, where: str) -> tuple[str, str, str] | None:
    """The first value that would not come back as written: (field path, problem, expected).

    Integers beyond 64 bits (DuckDB's JSON reads them as doubles) and NaN or Infinity (not JSON;
    they would come back as null).
    """
    if isinstance(value, int) and not isinstance(value, bool):
        if not -(2**63) <= value < 2**64:
            return where, "is an integer beyond 64 bits", "an integer between -2**63 and 2**64-1"
    elif isinstance(value, float):
        return where, f"is {value}, which JSON does not allow", "a finite number"
    elif isinstance(value, Decimal) and value != 0 and not _DOUBLE_MIN <= abs(value) <= _DOUBLE_MAX:
        return where, f"is {value}, beyond the range of a 64-bit float", "a number a double holds"
    elif isinstance(value, dict):
        for k, v in value.items():
            found = _unstorable(v, f"{where}.{k}")
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = _unstorable(v, f"{where}[{i}]")
            if found is not None:
                return found
    return None
