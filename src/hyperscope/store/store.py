"""The store root: the jobs catalog and the profiles it lists, and the operations on both."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import duckdb

from hyperscope.errors import HyperscopeError, StoreError, UsageError
from hyperscope.schema.layout import (
    CATALOG_FILE,
    PROFILES_DIR,
    STAGING_PREFIX,
    ProfileMeta,
    RankMeta,
    profile_dir,
)
from hyperscope.store import _rankpool
from hyperscope.store import profile as _profile
from hyperscope.store._arrow_rows import system_allocator
from hyperscope.store._beside import Beside, BesideRun
from hyperscope.store._categories import device_like_others
from hyperscope.store.catalog import Catalog, Job, JobStatus, ProfileRef
from hyperscope.store.home import default_home as default_home  # re-exported: its old home
from hyperscope.store.importer import FileResult, Importer, ReadFile, rank_metas, trace_files
from hyperscope.store.xplane_importer import add_xplane_files, is_xplane, prefer_xplane, readable_xla_json

_DISK_FULL = "{home}: disk full while importing; nothing was stored. Free space and retry."


@dataclass(frozen=True, slots=True)
class ImportReport:
    job: Job
    profile: ProfileRef
    files: list[FileResult]
    ranks: list[RankMeta]
    source_bytes: int
    #: what was imported but may not be what the user expects (one line each, naming the file)
    warnings: list[str] = field(default_factory=list)


class Store:
    """Everything under one root directory (``--home``, ``$HYPERSCOPE_HOME`` or ``~/.hyperscope``)."""

    def __init__(self, home: Path | str | None = None) -> None:
        self.home = Path(home).expanduser() if home is not None else default_home()
        try:
            (self.home / PROFILES_DIR).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            # an existing store on a read-only filesystem is read (see Catalog); a new one fails
            if not (self.home / CATALOG_FILE).is_file():
                raise StoreError(f"{self.home}: cannot create the store directory: {exc.strerror}") from exc
        self.catalog = Catalog(self.home / CATALOG_FILE)

    @property
    def read_only(self) -> str:
        """Why the store can only be read ("" when it can be written): see :class:`Catalog`."""
        return self.catalog.read_only

    def close(self) -> None:
        self.catalog.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- import ---------------------------------------------------------------------------------

    def import_traces(
        self,
        paths: Sequence[Path | str],
        job: str,
        *,
        rank: int | None = None,
        progress: Callable[[int], None] | None = None,
        beside: Beside | None = None,
    ) -> ImportReport:
        """Import trace files (one per rank) as one profile of ``job``; all or nothing.

        ``beside(rows, profile_dir)``: run on a thread of its own from the start of the import,
        handed the events where they are all in memory, before they are written (``_beside``);
        what it writes into ``profile_dir`` is published with the profile (``hyperscope import``
        computes the dashboard there: ``analysis.stored.precompute_beside``)."""
        if not job.strip():
            raise UsageError("the job name is empty")
        files = prefer_xplane(trace_files([Path(p) for p in paths]))
        if rank is not None and len(files) != 1:
            raise UsageError(
                "--rank applies to a single file; several files take their ranks from the traces"
            )
        source_bytes = sum(f.stat().st_size for f in files)
        created = time.time_ns()
        try:
            with _profile.staging(self.home) as work, contextlib.ExitStack() as workers, system_allocator():
                out = work / "out"
                single = 0 if len(files) == 1 else None
                json_files = [readable_xla_json(f, work) for f in files if not is_xplane(f)]
                pool, metas = None, rank_metas(json_files, rank, single)  # fail fast, before any read
                if processes := _rankpool.processes_for(len(json_files), _rankpool.json_bytes(json_files)):
                    # forked before this process opens DuckDB; the parent connects while they work
                    pool = workers.enter_context(
                        _rankpool.RankPool(json_files, metas, work, processes, progress)
                    )
                if beside is not None:  # after the fork: a thread running then would forbid it
                    workers.callback((run := BesideRun(beside, out)).finish)  # ends before the staging
                importer = Importer(work, progress=progress)
                try:
                    importer.result.ranks.extend(metas)
                    if pool is None:
                        read = importer.stage(json_files, metas)
                    else:
                        done = pool.result()
                        read = done.read
                        for parts, found in done.parts:
                            importer.staged.add_parts(parts, found)
                    importer.settle(read, metas, importer.figures())
                    add_xplane_files(importer, [f for f in files if is_xplane(f)], rank, default_rank=single)
                    staged = importer.result
                    offsets = {m.rank: m.clock_offset_ns for m in staged.ranks}
                    held = None if beside is None else run.give
                    written = _profile.write_events(
                        importer.staged, out, offsets, budget_bytes=_budget(read), rows_held=held
                    )
                    events = written.rows
                    warnings = device_like_others(written.others, staged.ranks)
                finally:
                    importer.close()
                meta = ProfileMeta(
                    profile_id=_profile.new_profile_id(),
                    source="import",
                    created_ns=created,
                    ranks=sorted(staged.ranks, key=lambda r: r.rank),
                    events=events,
                    ts_min_ns=written.ts_min_ns,
                    ts_max_ns=written.ts_max_ns,
                )
                if beside is not None:
                    run.finish()  # what it writes is published with the profile
                target = _profile.publish(self.home, out, meta)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise StoreError(_DISK_FULL.format(home=self.home)) from exc
            raise StoreError(f"{self.home}: cannot write the profile: {exc}") from exc
        except duckdb.Error as exc:  # DuckDB reports its own I/O (spill files) this way
            if "No space left" in str(exc) or "disk is full" in str(exc).lower():
                raise StoreError(_DISK_FULL.format(home=self.home)) from exc
            raise StoreError(f"{self.home}: the import failed, nothing was stored: {exc}") from exc
        ref = ProfileRef(
            id=meta.profile_id,
            job_id=0,
            created_ns=created,
            source="import",
            events=events,
            ranks=len(meta.ranks),
            bytes=_profile.Profile(target, meta).disk_bytes(),
            origin=", ".join(str(f) for f in files),
        )
        try:
            job_row = self.catalog.add_profile(
                job, ref, status=JobStatus.COMPLETED, nodes=meta.nodes, created_ns=created
            )
        except HyperscopeError:
            shutil.rmtree(target, ignore_errors=True)
            raise
        own = next(p for p in job_row.profiles if p.id == meta.profile_id)  # not another import's
        return ImportReport(job_row, own, staged.files, meta.ranks, source_bytes, warnings)

    # -- read -----------------------------------------------------------------------------------

    def jobs(
        self, *, search: str | None = None, status: JobStatus | None = None, since_ns: int | None = None
    ) -> list[Job]:
        return self.catalog.jobs(search=search, status=status, since_ns=since_ns)

    def job(self, job: str) -> Job:
        return self.catalog.job(job)

    def profile(self, job: str, profile_id: str | None = None) -> _profile.Profile:
        """A job's profile: the one named, else the newest."""
        found = self.catalog.job(job)
        if not found.profiles:
            raise UsageError(f"job {found.name!r} has no profile yet")
        refs = [p for p in found.profiles if profile_id is None or p.id == profile_id]
        if not refs:
            ids = ", ".join(p.id for p in found.profiles)
            raise UsageError(f"job {found.name!r} has no profile {profile_id!r}; it has {ids}")
        return _profile.Profile.open(profile_dir(self.home, refs[-1].id))

    # -- delete ---------------------------------------------------------------------------------

    def remove(self, job: str) -> Job:
        """Forget the job first (readers stop finding it), then delete its files.

        Each profile directory is first renamed to a staging name of this process, so that a
        process still writing beside the profile (an import precomputing the dashboard or the
        timeline index) cannot bring ``profiles/<id>/`` back; whatever it writes into the renamed
        directory goes with it, or with the next import's sweep of abandoned staging directories.
        """
        removed = self.catalog.remove(job)
        for ref in removed.profiles:
            path = profile_dir(self.home, ref.id)
            doomed = path.with_name(f"{STAGING_PREFIX}{os.getpid()}-rm-{ref.id}")
            try:
                os.rename(path, doomed)
            except FileNotFoundError:
                continue
            except OSError:
                doomed = path
            for _ in range(5):  # a writer may add a file while the tree is being removed
                shutil.rmtree(doomed, ignore_errors=True)
                if not doomed.exists():
                    break
        return removed

    # -- export ---------------------------------------------------------------------------------

    def export_chrome(
        self,
        job: str,
        out: Path | str,
        *,
        rank: int | None = None,
        profile_id: str | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> list[Path]:
        """Write the job's profile as Chrome-trace JSON, one file per rank."""
        from hyperscope.store.chrome import export_chrome

        return export_chrome(self.profile(job, profile_id), Path(out), rank=rank, progress=progress)


#: Of the promise that a profile takes at most 1/50 of its JSON and 1/3 of its gzip, the share
#: the events file may take before it is written again at a higher zstd level (the rest is the
#: dashboard, metadata and the other files kept beside it: ~10 KB on the shared traces).
_EVENTS_SHARE: Final = 0.9


def _budget(read: Sequence[ReadFile]) -> int | None:
    """Bytes the events file may take: 1/50 of each file's JSON, or 1/3 of it gzipped where the
    file is (``.gz``; a plain file's gzip is not known without compressing it)."""
    if not read:
        return None
    total = 0.0
    for done in read:
        share = done.json_bytes / 50
        if done.path.name.endswith(".gz"):
            share = min(share, done.path.stat().st_size / 3)
        total += share
    return int(total * _EVENTS_SHARE)
