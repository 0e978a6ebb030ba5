"""Import of XPlane files (``*.xplane.pb``: TensorFlow, JAX, PyTorch/XLA) beside Kineto JSON.

Each file is one rank (from ``--rank``, else a rank in its name, else 0 for a single file). Its
events are decoded (``capture.xplane``), typed by the importer's SQL exactly as a capture's rows
are, and staged in the importer's table; an error raises before the profile is published, so a
broken file leaves nothing stored, as with JSON.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import orjson
import pyarrow.compute as pc

from hyperscope.capture.torch_backend import typed_rows
from hyperscope.capture.xplane import read_rows
from hyperscope.errors import TraceFormatError, UsageError
from hyperscope.schema.layout import RankMeta
from hyperscope.store.importer import FileResult, Importer, rank_from_name

XPLANE_SUFFIX: Final = ".xplane.pb"
#: Below this, the XPlane's times count from the profile's start (no start time was kept in it).
_EPOCH_NS_MIN: Final = 10**18
#: The trace JSON that TF's and JAX's profilers write beside the XPlane (and JAX's Perfetto file).
XLA_JSON_SUFFIXES: Final = (".trace.json.gz", "perfetto_trace.json.gz")
#: An empty object, what TF's and JAX's writers end ``traceEvents`` with; ``_has_empty_object``
#: then checks that it is a list element (after ``[`` or ``,``). With the ``[,]`` in the pattern the
#: regex engine started at every comma: 0.25 s against 0.03 s over the legacy ResNet's 27.7 MB.
_EMPTY_OBJECT: Final = re.compile(rb"\{\s*\}")
_SCAN_BYTES: Final = 4 << 20
_WS: Final = b" \t\r\n"


def is_xplane(path: Path) -> bool:
    return path.name.endswith(XPLANE_SUFFIX)


def prefer_xplane(files: Sequence[Path]) -> list[Path]:
    """A run's folder holds ``host.xplane.pb`` and ``host.trace.json.gz``, the same events twice:
    the XPlane is kept (typed ops, device planes), the JSON beside it dropped."""
    planes = {(f.parent, f.name[: -len(XPLANE_SUFFIX)]) for f in files if is_xplane(f)}
    return [
        f for f in files
        if not (f.name.endswith(".trace.json.gz") and (f.parent, f.name[: -len(".trace.json.gz")]) in planes)
    ]  # fmt: skip


def readable_xla_json(path: Path, work: Path) -> Path:
    """TF's and JAX's trace JSON as the Chrome-trace reader takes it: their writer ends the event
    list with an empty object ``{}``, which is no event. Other files are returned unchanged.

    The copy keeps the file's name (in its own folder), so errors still name the file.
    """
    if not path.name.endswith(XLA_JSON_SUFFIXES) or not _has_empty_object(path):
        return path
    import gzip

    try:
        with gzip.open(path, "rb") as fh:
            data = orjson.loads(fh.read())
    except (OSError, EOFError, orjson.JSONDecodeError) as exc:
        raise TraceFormatError(path, f"not readable gzip-compressed trace JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceFormatError(path, "field 'traceEvents': is missing (expected a list of events)")
    events = data["traceEvents"]
    kept = [e for e in events if e != {}]
    if len(kept) == len(events):
        return path
    data["traceEvents"] = kept
    folder = work / f"xla-json-{len(list(work.glob('xla-json-*')))}"
    folder.mkdir()
    out = folder / path.name
    with gzip.open(out, "wb", compresslevel=1) as fh:
        fh.write(orjson.dumps(data))
    return out


def _has_empty_object(path: Path) -> bool:
    """Whether the decompressed file holds ``{}`` as a list element, read block by block.

    PyTorch's Kineto files end in ``.pt.trace.json.gz`` too: parsing them whole to find no ``{}``
    cost the legacy ResNet's import (27.7 MB of JSON) a second parse and ~100 MB of Python objects.
    A false alarm (the bytes inside a string) only costs that parse; an unreadable file is left to
    the parse, which names what is wrong.
    """
    import gzip
    import zlib

    carry = b""
    try:
        with gzip.open(path, "rb") as fh:
            while block := fh.read(_SCAN_BYTES):
                window = carry + block
                if any(_after_list_start(window, m.start()) for m in _EMPTY_OBJECT.finditer(window)):
                    return True
                # a match across the cut needs at most the window's last two bytes that are not
                # whitespace (``,{`` or ``[{``); blanks stand for any run of whitespace
                kept = window.rstrip(_WS)
                carry = kept[:-1].rstrip(_WS)[-1:] + b" " + kept[-1:] + b" "
    except (OSError, EOFError, zlib.error):
        return True
    return False


def _after_list_start(text: bytes, at: int) -> bool:
    """Whether the last byte before ``at`` that is not whitespace is ``[`` or ``,``."""
    j = at - 1
    while j >= 0 and text[j] in _WS:
        j -= 1
    return j >= 0 and text[j] in b"[,"


def add_xplane_files(
    importer: Importer, paths: Sequence[Path], rank: int | None, *, default_rank: int | None
) -> None:
    """Stage every XPlane file's rows into ``importer``, one rank each."""
    taken = {m.rank: m.source_file for m in importer.result.ranks}
    for path in paths:
        r = rank if rank is not None else rank_from_name(path)
        if r is None:
            r = default_rank
        if r is None:
            raise UsageError(
                f"{path}: cannot tell its rank (no rank in the file name); import it alone with --rank N"
            )
        if r in taken:
            raise UsageError(
                f"{path} and {taken[r]} both hold rank {r}; import them as separate jobs or rename the files"
            )
        taken[r] = str(path)
        node = path.name[: -len(XPLANE_SUFFIX)]  # the profilers name the file after the host
        table = typed_rows(read_rows(path), rank=r, node=node, con=importer.con)
        importer.staged.add(table)
        low = pc.min(table["ts_ns"]).as_py() if table.num_rows else None
        clock = "epoch_ns" if low is not None and low >= _EPOCH_NS_MIN else "relative"
        importer.result.ranks.append(
            RankMeta(rank=r, node=node, source_file=str(path), clock=clock, events=table.num_rows)
        )
        importer.result.files.append(FileResult(path, r, table.num_rows))
