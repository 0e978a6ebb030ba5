"""Export of a profile to Chrome-trace / Kineto JSON, which Perfetto, chrome://tracing and HTA load.

Each rank becomes one file shaped like the one torch.profiler writes: the rank's header keys, then
``traceEvents`` one event per line, then the trailer keys. Timestamps are written as exact decimal
microseconds (``ts_ns`` / 1000 with three decimals), relative to ``baseTimeNanoseconds`` when the
source had one, so re-importing gives back the same nanoseconds.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Final

import orjson

from hyperscope.errors import StoreError, UsageError
from hyperscope.schema.events import ARG_COLUMNS
from hyperscope.schema.layout import RankMeta
from hyperscope.store.profile import Profile

_BATCH: Final = 64 * 1024
#: Kineto writes these after traceEvents; readers that stream the file expect them there.
_TRAILER_KEYS: Final = ("traceName", "displayTimeUnit", "baseTimeNanoseconds")


def us_text(ns: int) -> bytes:
    """Exact decimal microseconds: 1712195495519695812 → b'1712195495519695.812'."""
    sign = b"-" if ns < 0 else b""
    whole, frac = divmod(abs(ns), 1000)
    return sign + (str(whole).encode() if frac == 0 else f"{whole}.{frac:03d}".encode())


def output_paths(profile: Profile, out: Path, rank: int | None) -> dict[int, Path]:
    """Where each rank goes: one file for one rank, ``NAME.rankN.json[.gz]`` siblings for several."""
    ranks = [r.rank for r in profile.meta.ranks]
    if rank is not None:
        if rank not in ranks:
            have = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
            raise UsageError(f"the profile has no rank {rank}; it has {have}")
        ranks = [rank]
    name = out.name
    suffix = ".json.gz" if name.endswith(".json.gz") else ".json"
    if out.is_dir() or str(out).endswith(os.sep):
        return {r: out / f"rank{r}{'.json'}" for r in ranks}
    if not name.endswith((".json", ".json.gz")):
        raise UsageError(f"{out}: name the output NAME.json or NAME.json.gz, or an existing directory")
    if len(ranks) == 1:
        return {ranks[0]: out}
    stem = name[: -len(suffix)]
    return {r: out.with_name(f"{stem}.rank{r}{suffix}") for r in ranks}


def export_chrome(
    profile: Profile,
    out: Path,
    *,
    rank: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[Path]:
    targets = output_paths(profile, out, rank)
    metas = {m.rank: m for m in profile.meta.ranks}
    written: list[Path] = []
    con = profile.connect()
    try:
        for r, path in targets.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.partial")
            try:
                with _open(tmp, path.name.endswith(".gz")) as fh:
                    _write_rank(fh, con, metas[r], progress)
                os.replace(tmp, path)
            except OSError as exc:
                tmp.unlink(missing_ok=True)
                raise StoreError(f"{path}: cannot write the export: {exc.strerror or exc}") from exc
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            written.append(path)
    finally:
        con.close()
    return written


def _open(path: Path, compress: bool) -> IO[bytes]:
    if compress:
        return gzip.open(path, "wb", compresslevel=6)  # type: ignore[return-value]
    return path.open("wb")


def _write_rank(fh: IO[bytes], con: Any, meta: RankMeta, progress: Callable[[int], None] | None) -> None:
    header: dict[str, Any] = {k: v for k, v in meta.header.items() if k not in _TRAILER_KEYS}
    if meta.device_properties:
        header["deviceProperties"] = meta.device_properties
    if meta.distributed_info:
        header["distributedInfo"] = meta.distributed_info
    if meta.node and "host_name" not in header:
        header["host_name"] = meta.node
    head = orjson.dumps(header, option=orjson.OPT_INDENT_2)
    fh.write(b"{\n" + (head[2:-2] + b",\n" if header else b"") + b'  "traceEvents": [\n')
    offset = meta.clock_offset_ns if meta.clock == "base_time_ns" else 0
    first = True
    for event in _events(con, meta.rank, offset):
        if not first:
            fh.write(b",\n")
        fh.write(event)
        first = False
        if progress is not None:
            progress(1)
    trailer = {k: meta.header[k] for k in _TRAILER_KEYS if k in meta.header}
    fh.write(b"\n  ]")
    for key, value in trailer.items():
        fh.write(b",\n  " + orjson.dumps(key) + b": " + orjson.dumps(value))
    fh.write(b"\n}\n")


def _events(con: Any, rank: int, offset_ns: int) -> Iterator[bytes]:
    hot = [(c.key, c.name) for c in ARG_COLUMNS]
    reader = con.sql(
        f"SELECT * FROM events WHERE rank = {int(rank)} ORDER BY pid, tid, ts_ns"
    ).to_arrow_reader(_BATCH)
    for batch in reader:
        cols = batch.to_pydict()
        hot_cols = [(key, cols[name]) for key, name in hot]
        for i in range(batch.num_rows):
            event: dict[str, Any] = {"ph": cols["ph"][i]}
            for key in ("cat", "name", "pid", "tid"):
                value = cols[key][i]
                if value is not None:
                    event[key] = value
            ts = cols["ts_ns"][i]
            if ts is not None:
                event["ts"] = orjson.Fragment(us_text(ts - offset_ns))
            dur = cols["dur_ns"][i]
            if dur is not None:
                event["dur"] = orjson.Fragment(us_text(dur))
            flow_id = cols["flow_id"][i]
            if flow_id is not None:
                event["id"] = flow_id
            args_text = cols["args"][i]
            # the typed columns (stream, correlation, device...) even where no other arg was kept:
            # a profile written by hyperscope itself (a capture, a generated one) has none
            args = orjson.loads(args_text) if args_text is not None else {}
            for key, values in hot_cols:
                value = values[i]
                if value is not None:
                    args[key] = value
            if args or args_text is not None:
                event["args"] = args
            extra = cols["extra"][i]
            if extra is not None:
                event.update(orjson.loads(extra))
            yield orjson.dumps(event)
