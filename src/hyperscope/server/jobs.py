"""Reading the jobs catalog for the API: filtered, sorted, paged job lists and id look-ups.

``Catalog.jobs()`` loads every job with its profiles, one query per job: right for the CLI, but a
UI page over 10,000 jobs needs one page, sorted and counted in SQL. These are read-only queries on
a connection of their own (``mode=ro``, else ``immutable`` on a read-only store: see
``open_read_only``): the server never writes the catalog, and SQLite's WAL lets it read while
captures and imports write.

Request input only ever becomes SQL *parameters*; sort columns come from a fixed table, and no
request value becomes a file path.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from hyperscope.errors import JobNotFound, StoreError, UsageError
from hyperscope.schema.layout import CATALOG_FILE, profile_dir
from hyperscope.server.cache import Lru
from hyperscope.server.models import JobDetailOut, JobListOut, JobOut, ProfileRefOut
from hyperscope.store.catalog import READ_MODES, JobStatus, RankStatus, open_read_only
from hyperscope.store.profile import Profile

PROFILE_ID: Final = re.compile(r"[0-9a-f]{16}")
SORTS: Final = {
    "created": "j.created_ns",
    "name": "j.name COLLATE NOCASE",
    "status": "j.status",
    "ranks": "j.ranks",
    # the newest profile's (a job without one sorts as 0)
    "events": "coalesce((SELECT p.events FROM profiles p WHERE p.id = j.latest), 0)",
    "size": "coalesce((SELECT p.bytes FROM profiles p WHERE p.id = j.latest), 0)",
}
MAX_LIMIT: Final = 1000

#: sorts on the jobs table's own columns: a page is cut from it before its profiles are looked up
_PLAIN_SORTS: Final = frozenset({"created", "name", "status", "ranks"})
_LATEST: Final = (
    "(SELECT p.id FROM profiles p WHERE p.job_id = jj.id "
    "ORDER BY p.created_ns DESC, p.rowid DESC LIMIT 1) AS latest"
)
#: each job with its newest profile's id (``latest``), for the columns and sorts that read it
_JOBS: Final = f"(SELECT jj.*, {_LATEST} FROM jobs jj) j"
_JOB_COLUMNS: Final = (
    "j.id, j.name, j.status, j.created_ns, j.updated_ns, j.nodes, j.ranks, j.message, j.latest, "
    "(SELECT count(*) FROM profiles p WHERE p.job_id = j.id), "
    "(SELECT p.events FROM profiles p WHERE p.id = j.latest), "
    "(SELECT p.bytes FROM profiles p WHERE p.id = j.latest)"
)
#: profile look-ups each worker thread keeps (see ``CatalogReader.profile``)
_HITS_PER_THREAD: Final = 256
#: job states whose newest profile can still grow: its span is read anew each time
_LIVE: Final = (JobStatus.IN_PROGRESS, JobStatus.STOPPING, JobStatus.FAILED)


class ProfileNotFound(Exception):
    """A profile id that is malformed or not in the catalog (the API answers 404)."""


@dataclass(frozen=True, slots=True)
class JobQuery:
    search: str | None = None
    statuses: tuple[JobStatus, ...] = ()
    created_after_ns: int | None = None
    created_before_ns: int | None = None
    sort: str = "created"
    order: str = "desc"
    limit: int = 100
    offset: int = 0

    def __post_init__(self) -> None:
        if self.sort not in SORTS:
            raise UsageError(f"sort {self.sort!r}: expected one of {', '.join(SORTS)}")
        if self.order not in ("asc", "desc"):
            raise UsageError(f"order {self.order!r}: expected asc or desc")
        if not 1 <= self.limit <= MAX_LIMIT:
            raise UsageError(f"limit {self.limit}: expected 1 to {MAX_LIMIT}")
        if self.offset < 0:
            raise UsageError(f"offset {self.offset}: expected 0 or more")


@dataclass(frozen=True, slots=True)
class ProfileHit:
    """A profile found by id, with what the API needs of its job."""

    ref: ProfileRefOut
    job: JobOut
    #: still being written: the job is InProgress or Stopping, or a rank of the capture still runs
    live: bool


class CatalogReader:
    """Read-only views of ``catalog.sqlite`` under one store root."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.path = home / CATALOG_FILE
        #: profile id -> traced span (ns), for finished profiles: the jobs list shows each job's
        self._spans: Lru[str, tuple[int | None]] = Lru(4096)
        #: each worker thread's catalog connection and the catalog file's inode it was opened on
        self._local = threading.local()

    def _span_ns(self, job: JobOut, seen: tuple[sqlite3.Connection, int] | None = None) -> int | None:
        """The newest profile's traced span, from its metadata file (the catalog does not keep it).

        ``seen``: the connection the job was read on and its ``data_version`` then. A profile that
        may still grow is read again only after a commit: every flush of a capture records the
        rank's progress in the catalog. (Opening each one for every page, two thirds of the jobs
        in bench/soak.py, was a twentieth of the server's time holding the GIL.)"""
        pid = job.latest_profile
        if pid is None or not PROFILE_ID.fullmatch(pid):
            return None
        live = job.status in _LIVE
        if not live and (found := self._spans.get(pid)) is not None:
            return found[0]
        growing: dict[str, tuple[sqlite3.Connection, int, int | None]] = self._local.__dict__.setdefault(
            "growing", {}
        )
        if live and seen is not None and (kept := growing.get(pid)) is not None and kept[:2] == seen:
            return kept[2]
        try:  # a capture's ranks keep their own metadata: Profile.open reads them all
            meta = Profile.open(profile_dir(self.home, pid)).meta
        except (OSError, StoreError):  # removed meanwhile, or unreadable: the profile's page says why
            meta = None
        span = (
            None
            if meta is None or meta.ts_min_ns is None or meta.ts_max_ns is None
            else meta.ts_max_ns - meta.ts_min_ns
        )
        if not live:  # unknown ones too: a finished profile is not read again for every page
            self._spans.put(pid, (span,))
        elif seen is not None:
            if len(growing) >= _HITS_PER_THREAD:
                growing.clear()
            growing[pid] = (*seen, span)
        return span

    def _with_span(self, job: JobOut, seen: tuple[sqlite3.Connection, int] | None = None) -> JobOut:
        return job.model_copy(update={"duration_ns": self._span_ns(job, seen)})

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        # One connection per worker thread, kept between requests: opening one took a fifth of
        # the server's busy time in bench/soak.py (SQLite reads the schema and maps the WAL index
        # each time). A kept ``mode=ro`` connection sees every commit (each statement is its own
        # read transaction); ``immutable`` (a read-only store, a full disk) would not see a
        # writer's changes, so it is never kept, and ``mode=ro`` is tried again next time. A
        # catalog file replaced (a store removed and made anew) is noticed by its inode.
        try:
            inode = os.stat(self.path).st_ino
        except OSError:
            inode = -1
        kept: tuple[sqlite3.Connection, int] | None = getattr(self._local, "db", None)
        if kept is not None and kept[1] == inode:
            db, keep = kept[0], True
        else:
            if kept is not None:
                kept[0].close()
                self._local.db = None
            db, mode = open_read_only(self.path)
            keep = mode == READ_MODES[0] and inode != -1
        try:
            yield db
        except sqlite3.Error as exc:
            keep = False
            raise StoreError(f"{self.path}: cannot read the jobs catalog: {exc}") from exc
        finally:
            if keep:
                self._local.db = (db, inode)
            else:
                self._local.db = None
                db.close()

    def jobs(self, query: JobQuery) -> JobListOut:
        where: list[str] = []
        params: list[str | int] = []
        if query.search:
            escaped = query.search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            where.append("j.name LIKE ? ESCAPE '\\'")  # SQLite's LIKE ignores ASCII case
            params.append(f"%{escaped}%")
        if query.statuses:
            where.append(f"j.status IN ({', '.join('?' for _ in query.statuses)})")
            params.extend(s.value for s in query.statuses)
        if query.created_after_ns is not None:
            where.append("j.created_ns >= ?")
            params.append(query.created_after_ns)
        if query.created_before_ns is not None:
            where.append("j.created_ns < ?")
            params.append(query.created_before_ns)
        clause = (" WHERE " + " AND ".join(where)) if where else ""
        direction = "ASC" if query.order == "asc" else "DESC"
        order = f"{SORTS[query.sort]} {direction}, j.id {direction}"
        if query.sort in _PLAIN_SORTS:
            # The page first, then the newest profile of its jobs alone: looking it up for every
            # job before cutting the page took 8 ms of SQLite per query at 2,000 jobs.
            page = f"(SELECT * FROM jobs j{clause} ORDER BY {order} LIMIT ? OFFSET ?)"
            listing = f"SELECT {_JOB_COLUMNS} FROM (SELECT jj.*, {_LATEST} FROM {page} jj) j ORDER BY {order}"
        else:
            listing = f"SELECT {_JOB_COLUMNS} FROM {_JOBS}{clause} ORDER BY {order} LIMIT ? OFFSET ?"
        with self._db() as db:
            seen = (db, int(db.execute("PRAGMA data_version").fetchone()[0]))
            total = int(db.execute(f"SELECT count(*) FROM jobs j{clause}", params).fetchone()[0])
            found = db.execute(listing, [*params, query.limit, query.offset]).fetchall()
        return JobListOut(total=total, jobs=[self._with_span(_job(r), seen) for r in found])

    def job(self, id_or_name: str) -> JobDetailOut:
        """By name, else by number (the CLI's rule: a job named "3" wins over job number 3)."""
        with self._db() as db:
            row = db.execute(f"SELECT {_JOB_COLUMNS} FROM {_JOBS} WHERE j.name = ?", (id_or_name,)).fetchone()
            if row is None and id_or_name.isdigit() and len(id_or_name) < 19:
                row = db.execute(
                    f"SELECT {_JOB_COLUMNS} FROM {_JOBS} WHERE j.id = ?", (int(id_or_name),)
                ).fetchone()
            if row is None:
                raise JobNotFound(id_or_name)
            job = self._with_span(_job(row))
            refs = db.execute(
                "SELECT id, created_ns, source, events, ranks, bytes, origin FROM profiles "
                "WHERE job_id = ? ORDER BY created_ns, rowid",
                (job.id,),
            ).fetchall()
        return JobDetailOut(**job.model_dump(), profile_list=[_ref(r) for r in refs])

    def profile(self, profile_id: str) -> ProfileHit:
        """The catalog's row for a profile id; the id is checked before it reaches SQL."""
        if not PROFILE_ID.fullmatch(profile_id):
            raise ProfileNotFound(f"profile {profile_id[:40]!r}: expected 16 hex digits (0-9, a-f)")
        with self._db() as db:
            # The same answer while nothing was committed since on this connection: every tile
            # looks its profile up, and one statement instead of three is fewer hand-overs of the
            # GIL (each SQLite step lets the other threads go first). ``data_version`` changes
            # with any other connection's commit; a new connection never matches a kept answer.
            version = int(db.execute("PRAGMA data_version").fetchone()[0])
            hits: dict[str, tuple[sqlite3.Connection, int, ProfileHit]] = self._local.__dict__.setdefault(
                "hits", {}
            )
            kept = hits.get(profile_id)
            if kept is not None and kept[0] is db and kept[1] == version:
                return kept[2]
            ref = db.execute(
                "SELECT id, created_ns, source, events, ranks, bytes, origin, job_id FROM profiles "
                "WHERE id = ?",
                (profile_id,),
            ).fetchone()
            if ref is None:
                raise ProfileNotFound(
                    f"profile {profile_id!r}: not in the catalog (removed, or in another store?)"
                )
            row = db.execute(f"SELECT {_JOB_COLUMNS} FROM {_JOBS} WHERE j.id = ?", (ref[7],)).fetchone()
            running = _running_ranks(db, profile_id)
        if row is None:  # a profile row outlives its job only inside a concurrent delete
            raise ProfileNotFound(f"profile {profile_id!r}: its job was just removed")
        job = _job(row)
        live = job.status in (JobStatus.IN_PROGRESS, JobStatus.STOPPING) or int(running) > 0
        hit = ProfileHit(_ref(ref[:7]), job, live)
        if len(hits) >= _HITS_PER_THREAD:
            hits.clear()
        hits[profile_id] = (db, version, hit)
        return hit


def _running_ranks(db: sqlite3.Connection, profile_id: str) -> int:
    """Ranks of a capture still writing; 0 in a catalog older than captures (no such table)."""
    try:
        row = db.execute(
            "SELECT count(*) FROM profile_ranks WHERE profile_id = ? AND status = ?",
            (profile_id, RankStatus.RUNNING.value),
        ).fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return 0
        raise
    return int(row[0])


def _job(row: Sequence[object]) -> JobOut:
    id_, name, status, created, updated, nodes, ranks, message, latest, count, events, size = row
    return JobOut(
        id=int(str(id_)),
        name=str(name),
        status=JobStatus(str(status)),
        created_ns=int(str(created)),
        updated_ns=int(str(updated)),
        nodes=list(json.loads(str(nodes))),
        ranks=int(str(ranks)),
        message=str(message),
        latest_profile=None if latest is None else str(latest),
        profiles=int(str(count)),
        events=0 if events is None else int(str(events)),
        bytes=0 if size is None else int(str(size)),
        duration_ns=None,  # from the profile's metadata: CatalogReader._with_span
    )


def _ref(row: Sequence[object]) -> ProfileRefOut:
    id_, created, source, events, ranks, size, origin = row
    return ProfileRefOut(
        id=str(id_),
        created_ns=int(str(created)),
        source=str(source),
        events=int(str(events)),
        ranks=int(str(ranks)),
        bytes=int(str(size)),
        origin=str(origin),
    )
