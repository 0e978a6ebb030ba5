"""The ranges of the API's integer parameters, checked before any work, and errors that do not
echo a huge parameter back.

Python's integers have no bound, but SQLite's, DuckDB's, numpy's and JSON encoders' have: an
offset of 2^63, a step number of 10^23 or a window of ``[-2^63, 2^63)`` got through to them and
ended as a 500 after seconds of work. Each integer parameter therefore has a range here, which
the request is checked against (400 naming the parameter and its range) before anything runs.
"""

from __future__ import annotations

import re
from typing import Final

from hyperscope.errors import UsageError

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
#: a window's ends: any epoch time in ns (now ~1.8e18), and t1 - t0 still fits in 64 bits
TIME_MIN: Final = -(2**62)
TIME_MAX: Final = 2**62
#: the longest window (146 years): its column edges stay within 64 bits
SPAN_MAX: Final = 2**62
#: ranks are 32-bit in every source (torch.distributed, Slurm, MPI)
RANK_MAX: Final = 2**31 - 1
#: step numbers (ProfilerStep#N) are stored as BIGINT
STEP_MAX: Final = INT64_MAX
#: the longest ``steps`` text a valid range can have ("A:B" with two 19-digit numbers, spaces)
STEPS_MAX_CHARS: Final = 48
#: the longest parameter value an error repeats whole
SHOWN_CHARS: Final = 64
#: the longest error detail sent back
DETAIL_CHARS: Final = 1000

#: the range of every integer query parameter, by name (the API checks them all against it)
RANGES: Final[dict[str, tuple[int, int]]] = {
    "offset": (0, INT64_MAX),
    "created_after_ns": (INT64_MIN, INT64_MAX),
    "created_before_ns": (INT64_MIN, INT64_MAX),
    "t0_ns": (TIME_MIN, TIME_MAX),
    "t1_ns": (TIME_MIN, TIME_MAX),
    "rank": (0, RANK_MAX),
    "correlation": (0, INT64_MAX),
    "id": (0, INT64_MAX),
}


def shown(value: object) -> str:
    """``repr(value)``, cut to a few dozen characters (saying how long it was) when longer."""
    text = repr(value)
    if len(text) <= SHOWN_CHARS:
        return text
    size = len(value) if isinstance(value, str) else len(text)
    return f"{text[: SHOWN_CHARS // 2]}... ({size:,} characters)"


def short_detail(text: str) -> str:
    """An error detail of at most ``DETAIL_CHARS`` characters."""
    return text if len(text) <= DETAIL_CHARS else text[: DETAIL_CHARS - 20] + "... (cut)"


def range_error(name: str, given: object) -> str:
    lo, hi = RANGES[name]
    return f"parameter {name!r} (got {shown(given)}): expected an integer from {lo} to {hi}"


def check_window(t0_ns: int, t1_ns: int) -> None:
    if t1_ns <= t0_ns:
        raise UsageError(f"t1_ns {t1_ns}: expected a time after t0_ns ({t0_ns})")
    if t1_ns - t0_ns > SPAN_MAX:
        raise UsageError(f"t1_ns - t0_ns is {t1_ns - t0_ns}: expected a window of at most {SPAN_MAX} ns")


def check_ranks(ranks: list[int] | None) -> None:
    for rank in ranks or ():
        if not 0 <= rank <= RANK_MAX:
            raise UsageError(range_error("rank", rank))


def check_steps_text(text: str) -> None:
    """Before parsing: a valid ``A:B`` is short, and its numbers fit a BIGINT."""
    if len(text) > STEPS_MAX_CHARS:
        raise UsageError(
            f"parameter 'steps' (got {shown(text)}): expected A:B or N, step numbers 0 to {STEP_MAX}"
        )
    for number in re.findall(r"\d+", text):
        if int(number) > STEP_MAX:
            raise UsageError(f"parameter 'steps' (got {shown(text)}): step numbers go from 0 to {STEP_MAX}")
