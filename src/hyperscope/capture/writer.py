"""One rank's share of a captured profile, written on a background thread.

The training thread only hands over work (Kineto's results, a batch of annotations, samples); the
conversion to rows and the Parquet writes happen here. Each flush becomes one part file, renamed
into place when complete, so a reader sees the run grow and never a half-written file. When the
disk fails, the writer says so once, marks the rank incomplete and drops what follows: the training
it watches goes on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from hyperscope.capture.context import DistContext
from hyperscope.errors import HyperscopeError
from hyperscope.schema.layout import (
    CATALOG_FILE,
    EVENTS_DIR,
    META_FILE,
    RANKS_DIR,
    SAMPLES_DIR,
    ProfileMeta,
    RankMeta,
    profile_dir,
)
from hyperscope.store.catalog import Catalog, ProfileRef, RankStatus
from hyperscope.store.profile import write_part

log = logging.getLogger("hyperscope.capture")

#: Work items waiting for the writer. A full queue means the disk is slower than the run: the
#: training thread then waits up to ``_PUT_TIMEOUT_S`` before the item is dropped and counted.
_QUEUE_ITEMS: Final = 4
_ZSTD_LEVEL: Final = 9
_PUT_TIMEOUT_S: Final = 5.0

#: A unit of work: returns which table it filled ("events" or "samples") and the rows.
Work = Callable[[], tuple[str, pa.Table]]


@dataclass(frozen=True, slots=True)
class CaptureTarget:
    home: Path
    job: str
    profile_id: str
    created_ns: int
    settings: dict[str, Any]
    #: the ranks the profile waits for before it is complete (an on-demand capture of some ranks
    #: of a run); None: the run's world size
    ranks_expected: int | None = None


class RankWriter:
    def __init__(self, target: CaptureTarget, ctx: DistContext, rank_meta: RankMeta) -> None:
        self.target = target
        self.ctx = ctx
        self.meta = rank_meta
        self.dir = profile_dir(target.home, target.profile_id)
        self.error: str | None = None
        self.dropped_items = 0
        self._parts = {EVENTS_DIR: 0, SAMPLES_DIR: 0}
        self._bytes = 0
        self._queue: queue.Queue[Work | None] = queue.Queue(_QUEUE_ITEMS)
        self._catalog: Catalog | None = None
        self._thread = threading.Thread(target=self._run, name="hyperscope-writer", daemon=True)

    # -- training thread ------------------------------------------------------------------------

    def open(self) -> None:
        """Create the profile (or join it, for the second and later ranks) and list it as a job.

        Raises HyperscopeError or OSError: the session then runs without capture.
        """
        for sub in (EVENTS_DIR, SAMPLES_DIR, RANKS_DIR):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        meta_path = self.dir / META_FILE
        if not meta_path.exists():
            meta = ProfileMeta(
                profile_id=self.target.profile_id,
                source="capture",
                created_ns=self.target.created_ns,
                settings=self.target.settings,
            )
            tmp = self.dir / f".{META_FILE}.{os.getpid()}.tmp"
            tmp.write_text(meta.to_json())
            with contextlib.suppress(FileExistsError):  # another rank was first: keep its file
                os.link(tmp, meta_path)
            tmp.unlink()
        self._write_rank_meta()
        self._catalog = Catalog(self.target.home / CATALOG_FILE)
        ref = ProfileRef(
            id=self.target.profile_id,
            job_id=0,
            created_ns=self.target.created_ns,
            source="capture",
            events=0,
            ranks=0,
            bytes=0,
            origin=self.ctx.run_id,
        )
        self._catalog.open_capture(
            self.target.job,
            ref,
            rank=self.ctx.rank,
            node=self.ctx.node,
            world_size=self.target.ranks_expected or self.ctx.world_size,
        )
        self._thread.start()

    def submit(self, work: Work) -> None:
        """Queue work for the writer; never raises, waits at most a few seconds."""
        if self.error is not None:
            return
        try:
            self._queue.put(work, timeout=_PUT_TIMEOUT_S)
        except queue.Full:
            self.dropped_items += 1
            self._fail(f"the writer fell behind; {self.dropped_items} batch(es) of events dropped")

    def close(
        self, status: RankStatus, message: str = "", *, empty_reason: str = "", own_events: int = 0
    ) -> None:
        """Write what is queued, then record the rank's end in its metadata and the catalog.

        A rank that recorded no event of the training's (``own_events`` are hyperscope's own marks)
        says so in the job's message, with ``empty_reason``: an empty job is never silent.
        """
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        if self.error is None and empty_reason and self.meta.events <= own_events:
            message = "; ".join(m for m in (message, f"no events were recorded: {empty_reason}") if m)
        if self.error is not None:
            message = "; ".join(m for m in (message, f"profile incomplete: {self.error}") if m)
            if status is RankStatus.COMPLETED:
                status = RankStatus.INCOMPLETE
        self.meta.complete = self.error is None
        try:
            self._write_rank_meta()
        except OSError as exc:
            log.warning("hyperscope: cannot write %s: %s", self.dir / RANKS_DIR, exc)
        if self._catalog is None:
            return
        try:
            self._catalog.update_capture(
                self.target.profile_id,
                self.ctx.rank,
                events=self.meta.events,
                bytes=self._bytes,
                status=status,
                message=message,
                now_ns=time.time_ns(),
            )
        except HyperscopeError as exc:
            log.warning("hyperscope: cannot record the end of rank %d: %s", self.ctx.rank, exc)
        finally:
            self._catalog.close()

    # -- writer thread --------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            work = self._queue.get()
            if work is None:
                return
            if self.error is not None:
                continue  # drain, so the training thread never waits on a dead disk
            try:
                table_name, table = work()
                if table.num_rows:
                    self._write(table_name, table)
            except Exception as exc:  # a bug of ours or a full disk: never the training's problem
                self._fail(_describe(exc, self.dir))

    def _write(self, table_name: str, table: pa.Table) -> None:
        seq = self._parts[table_name]
        self._parts[table_name] = seq + 1
        name = f"r{self.ctx.rank:05d}-{seq:06d}.parquet"
        final = self.dir / table_name / name
        tmp = final.with_name(f".{name}.tmp")
        try:
            write_part(table, tmp, level=_ZSTD_LEVEL)
            os.replace(tmp, final)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self._bytes += final.stat().st_size
        start = pc.min(table["ts_ns"]).as_py()
        if table_name == EVENTS_DIR:
            self.meta.events += table.num_rows
            end = pc.max(pc.add(table["ts_ns"], pc.fill_null(table["dur_ns"], 0))).as_py()
        else:
            self.meta.samples += table.num_rows
            end = pc.max(table["ts_ns"]).as_py()
        if start is not None:
            self.meta.ts_min_ns = start if self.meta.ts_min_ns is None else min(self.meta.ts_min_ns, start)
            self.meta.ts_max_ns = end if self.meta.ts_max_ns is None else max(self.meta.ts_max_ns, end)
        self._write_rank_meta()
        if self._catalog is not None:
            self._catalog.update_capture(
                self.target.profile_id,
                self.ctx.rank,
                events=self.meta.events,
                bytes=self._bytes,
                now_ns=time.time_ns(),
            )

    def _write_rank_meta(self) -> None:
        path = self.dir / RANKS_DIR / f"r{self.ctx.rank:05d}.json"
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(self.meta.to_json())
        os.replace(tmp, path)

    def _fail(self, message: str) -> None:
        if self.error is None:
            self.error = message
            log.warning(
                "hyperscope: capture of rank %d stopped writing: %s. Training goes on; the profile "
                "is marked incomplete.",
                self.ctx.rank,
                message,
            )


def _describe(exc: BaseException, where: Path) -> str:
    """The error with the file it concerns (pyarrow's I/O errors do not always name it)."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename or where}: {exc.strerror}"
    text = str(exc)
    if str(where) not in text:
        text = f"{where}: {text}"
    return f"{text} ({type(exc).__name__})" if not isinstance(exc, OSError) else text
