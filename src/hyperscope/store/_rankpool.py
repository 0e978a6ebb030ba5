"""Rank files staged in parallel worker processes, for the import of several large trace files.

One process reads one file after another, and gzip's decompression and the reader's cuts of a
file run on one core. With ``POOL_MIN_BYTES`` or more of JSON in all, the files are split among
``min(cpus, files)`` processes, forked before this process opens any DuckDB connection (a fork
copies no DuckDB threads, only what is already imported). Each worker stages its files as one
process does (``_staged``: Arrow in memory, a DuckDB of its own only for chunks the compiled
reader gives back), one chunk at a time (so no more chunks are in flight than in one process),
and hands its rows over as parts (``_parts``) of one rank each in the import's staging directory:
the rows it held, and those it spilled past its share of ``_staged.SPILL_BYTES``. The parent
only checks the headers first (fail fast), settles each rank (clock, count) from the figures
the workers send, and sorts the parts into the profile, as the one-process import does.

Errors: the first worker error (naming its file) is raised in the parent, the other workers are
stopped and waited for, and the staging directory is then removed as always: nothing is stored.
Workers ignore SIGINT, so Ctrl-C reaches the parent only, which stops them the same way.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, Final

from hyperscope.errors import StoreError
from hyperscope.schema.layout import RankMeta
from hyperscope.store import _staged
from hyperscope.store._arrow_rows import Figures
from hyperscope.store.importer import Importer, ReadFile

#: The import's DuckDB memory limit, shared among the workers (each stages a share of the rows).
MEMORY_LIMIT_MB: Final = 256
#: Below this much JSON in all, the files are staged in this process: without a DuckDB statement
#: per chunk, forking, writing and reading back the parts cost more than they save (the 8-rank
#: DLRM set, 7.4 MB: 0.20-0.25 s in one process, 0.28 s in two; median of 5, quiet).
POOL_MIN_BYTES: Final = 32 << 20
#: A gzipped file's JSON, estimated from its size (Kineto's traces gzip 12-24x).
GZIP_RATIO: Final = 8


def json_bytes(paths: Sequence[Path]) -> int:
    """About how much JSON ``paths`` hold (gzip estimated at ``GZIP_RATIO``)."""
    return sum(_size(p) * (GZIP_RATIO if p.name.endswith(".gz") else 1) for p in paths)


def single_threaded() -> bool:
    """Whether this process runs no Python thread but the main one: a fork copies only the calling
    thread, so a lock another Python thread holds (a server's pool, a notebook's background work)
    would stay held in the child. The CLI imports from its main thread only. Native threads of the
    libraries (numpy's BLAS, Arrow's jemalloc, an idle DuckDB's workers) wait unlocked between tasks
    and reset themselves at fork; they are not counted."""
    return threading.active_count() == 1


def processes_for(files: int, json_bytes: int | None = None) -> int:
    """Worker processes for ``files`` rank files (of about ``json_bytes`` of JSON, where known):
    one per CPU this process may use, at most one per file; 0 (stage in this process) where fork
    is unavailable or unsafe (other threads run), one process would do, or the files are under
    ``POOL_MIN_BYTES`` in all."""
    if json_bytes is not None and json_bytes < POOL_MIN_BYTES:
        return 0
    if "fork" not in multiprocessing.get_all_start_methods() or not single_threaded():
        return 0
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    n = min(cpus, files)
    return n if n >= 2 else 0


def split(sizes: Sequence[int], n: int) -> list[list[int]]:
    """Indexes of ``sizes`` in ``n`` groups of about equal total size (largest first, each to the
    lightest group), each group in its original order."""
    groups: list[list[int]] = [[] for _ in range(n)]
    loads = [0] * n
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        g = loads.index(min(loads))
        groups[g].append(i)
        loads[g] += sizes[i]
    return [sorted(g) for g in groups if g]


@dataclass(slots=True)
class _Worker:
    process: BaseProcess
    conn: Connection
    files: list[int]
    part: Path
    done: bool = False


@dataclass(slots=True)
class Staged:
    """What the workers staged: per file (in the order given), and each worker's parts (the
    Parquet files of its rows) with its figures."""

    read: list[ReadFile]
    parts: list[tuple[list[tuple[int, Path]], Figures]] = field(default_factory=list)


class RankPool:
    """Workers staging ``paths`` (their ranks checked already: ``metas``) under ``work``.

    Started at construction; :meth:`result` waits for every worker; leaving the ``with`` block
    stops whatever still runs (an error, Ctrl-C) and waits for it, before the staging directory
    is removed.
    """

    def __init__(
        self,
        paths: Sequence[Path],
        metas: Sequence[RankMeta],
        work: Path,
        processes: int,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.paths, self.progress = list(paths), progress
        groups = split([_size(p) for p in paths], processes)
        limit = f"{max(32, MEMORY_LIMIT_MB // len(groups))}MB"
        context = multiprocessing.get_context("fork")
        sys.stdout.flush()  # a forked child must not write the parent's buffered output again
        sys.stderr.flush()
        self.workers: list[_Worker] = []
        try:
            for n, group in enumerate(groups):
                folder = work / f"worker-{n}"
                folder.mkdir()
                receive, send = context.Pipe(duplex=False)
                spill = _staged.SPILL_BYTES // len(groups)  # the rows each may hold: a share
                job = ([self.paths[i] for i in group], [metas[i] for i in group], folder, limit, spill)
                process = context.Process(
                    target=_work, args=(send, *job), name=f"hyperscope-import-{n}", daemon=True
                )
                process.start()
                send.close()
                self.workers.append(_Worker(process, receive, group, folder / "part.parquet"))
        except BaseException:
            self.stop()
            raise

    def __enter__(self) -> RankPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def result(self) -> Staged:
        """Wait for every worker; the first error raised by one is raised here."""
        read: dict[int, ReadFile] = {}
        handed: dict[Path, tuple[list[tuple[int, Path]], Figures]] = {}
        pending = {w.conn: w for w in self.workers}
        while pending:
            for conn in wait(list(pending)):
                worker = pending[conn]  # type: ignore[index]
                try:
                    kind, payload = worker.conn.recv()
                except EOFError:
                    worker.process.join()
                    names = ", ".join(str(self.paths[i]) for i in worker.files)
                    raise StoreError(
                        f"the import worker for {names} ended without a result "
                        f"(exit status {worker.process.exitcode}); nothing was stored"
                    ) from None
                if kind == "progress":
                    if self.progress is not None:
                        self.progress(payload)
                elif kind == "error":
                    raise payload
                else:
                    files, figs, parts = payload
                    read.update(zip(worker.files, files, strict=True))
                    handed[worker.part] = (parts, figs)
                    worker.done = True
                    del pending[conn]  # type: ignore[arg-type]
        return Staged([read[i] for i in range(len(self.paths))], [handed[w.part] for w in self.workers])

    def stop(self) -> None:
        """Stop every worker that still runs and wait for all of them (their files are then no
        longer written, so the staging directory can go)."""
        for worker in self.workers:
            if worker.process.is_alive() and not worker.done:
                worker.process.terminate()
        for worker in self.workers:
            worker.process.join()
            worker.conn.close()


def _work(
    send: Connection, paths: list[Path], metas: list[RankMeta], folder: Path, limit: str, spill: int
) -> None:
    """A worker's whole life: stage its files, write its parts, send the figures (or the error)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; it stops us on Ctrl-C
    lock = threading.Lock()

    def tell(message: tuple[str, Any]) -> None:
        with lock:  # progress comes from the reader thread
            send.send(message)

    try:
        importer = Importer(
            folder, progress=lambda n: tell(("progress", n)), memory_limit=limit, workers=1, spill_bytes=spill
        )
        try:
            read = importer.stage(paths, metas)
            figures = importer.figures()
            parts = importer.staged.hand_over()
        finally:
            importer.close()
        tell(("done", (read, figures, parts)))
    except BaseException as exc:
        tell(("error", _portable(exc)))
    finally:
        send.close()


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling whole (the parent then raises it as it is), else a
    StoreError with its message."""
    try:
        back = pickle.loads(pickle.dumps(exc))
    except Exception:
        back = None
    if isinstance(back, BaseException) and str(back) == str(exc):
        return exc
    return StoreError(f"{type(exc).__name__}: {exc}")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
