"""Reading trace JSON the exact way, to compare what was stored with what the source held."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

Frozen = Any


def load(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rb") as fh:
        data = json.load(fh, parse_float=Decimal)
    if isinstance(data, list):
        return {"traceEvents": data}
    assert isinstance(data, dict)
    return data


def _ns(value: Any) -> int:
    return int((Decimal(value) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def freeze(value: Any) -> Frozen:
    """Hashable, order-insensitive for objects; numbers compare by value (1.50 == 1.5)."""
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    if isinstance(value, float):
        return Decimal(repr(value))
    return value


def normalized_events(trace: dict[str, Any]) -> Counter[Frozen]:
    """Events with ts/dur as absolute integer nanoseconds, as a multiset."""
    base = trace.get("baseTimeNanoseconds", 0)
    out: Counter[Frozen] = Counter()
    for event in trace["traceEvents"]:
        e = dict(event)
        if "ts" in e:
            e["ts"] = _ns(e["ts"]) + base
        if "dur" in e:
            e["dur"] = _ns(e["dur"])
        out[freeze(e)] += 1
    return out


def counts_by_kind(trace: dict[str, Any]) -> Counter[tuple[str, str | None]]:
    return Counter((e["ph"], e.get("cat")) for e in trace["traceEvents"])


def linked_in_source(files: list[Path]) -> int:
    """Device ops whose correlation matches a runtime or driver call of the same file."""
    linked = 0
    for f in files:
        events = load(f)["traceEvents"]
        launches = {
            e["args"]["correlation"]
            for e in events
            if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
        }
        linked += sum(
            1
            for e in events
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
            and e.get("args", {}).get("correlation") in launches
        )
    return linked


def linked_in_store(con: Any) -> int:
    """The same count, from a stored profile's events."""
    row = con.sql(
        """SELECT count(*) FROM events k WHERE k.kind IN ('kernel', 'memcpy', 'memset') AND EXISTS (
               SELECT 1 FROM events r WHERE r.rank = k.rank AND r.correlation = k.correlation
               AND r.kind IN ('runtime', 'driver'))"""
    ).fetchall()[0]
    return int(row[0])
