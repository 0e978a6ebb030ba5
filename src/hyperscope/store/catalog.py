"""The jobs catalog: SQLite in the store root, safe for several writer processes.

SQLite in WAL mode with a busy timeout lets captures on several ranks, an import and the UI server
write and read at once. Every write is one short ``BEGIN IMMEDIATE`` transaction.
"""

from __future__ import annotations

import enum
import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from hyperscope.errors import JobNotFound, StoreError, UsageError

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS jobs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT NOT NULL UNIQUE,
    created_ns  INTEGER NOT NULL,
    updated_ns  INTEGER NOT NULL,
    status      TEXT NOT NULL,
    nodes       TEXT NOT NULL DEFAULT '[]',
    ranks       INTEGER NOT NULL DEFAULT 0,
    message     TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS profiles (
    id          TEXT PRIMARY KEY,
    job_id      INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    created_ns  INTEGER NOT NULL,
    source      TEXT NOT NULL,
    events      INTEGER NOT NULL,
    ranks       INTEGER NOT NULL,
    bytes       INTEGER NOT NULL,
    origin      TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS profiles_job ON profiles(job_id);
CREATE TABLE IF NOT EXISTS profile_ranks (
    profile_id  TEXT NOT NULL REFERENCES profiles(id) ON DELETE CASCADE,
    rank        INTEGER NOT NULL,
    node        TEXT NOT NULL,
    world_size  INTEGER NOT NULL,
    status      TEXT NOT NULL,
    events      INTEGER NOT NULL DEFAULT 0,
    bytes       INTEGER NOT NULL DEFAULT 0,
    message     TEXT NOT NULL DEFAULT '',
    updated_ns  INTEGER NOT NULL,
    PRIMARY KEY (profile_id, rank)
);
"""


_BUSY_TIMEOUT_S: Final = 30.0


class JobStatus(enum.StrEnum):
    """The states SageMaker Profiler users know."""

    IN_PROGRESS = "InProgress"
    COMPLETED = "Completed"
    FAILED = "Failed"
    STOPPED = "Stopped"
    STOPPING = "Stopping"

    @classmethod
    def parse(cls, text: str) -> JobStatus:
        for status in cls:
            if status.value.lower() == text.lower():
                return status
        raise UsageError(f"unknown status {text!r}; expected one of {', '.join(s.value for s in cls)}")


class RankStatus(enum.StrEnum):
    """Where one rank of a capture stands; the job's status is derived from all of them."""

    RUNNING = "running"
    COMPLETED = "completed"
    INCOMPLETE = "incomplete"  # training finished, but some of the profile could not be written
    FAILED = "failed"  # the training process raised or exited non-zero
    STOPPED = "stopped"  # a stop was asked for: SIGTERM (scancel, a time limit), SIGINT (Ctrl+C)


@dataclass(frozen=True, slots=True)
class ProfileRef:
    id: str
    job_id: int
    created_ns: int
    source: str
    events: int
    ranks: int
    bytes: int
    origin: str


@dataclass(frozen=True, slots=True)
class Job:
    id: int
    name: str
    created_ns: int
    updated_ns: int
    status: JobStatus
    nodes: list[str]
    ranks: int
    message: str
    profiles: list[ProfileRef] = field(default_factory=list)


class Catalog:
    """The catalog at ``path``, opened for writing where it can be, else for reading only.

    A store on a read-only filesystem (an archive, a team's shared results) or on a full disk
    still lists its jobs: when the catalog exists but cannot be opened for writing, it is opened
    read-only (``mode=ro``), and where SQLite cannot even keep its WAL index beside it there
    (no ``-shm`` file can be created), as ``immutable`` (nothing may change it meanwhile: nothing
    can write there). ``read_only`` then says why; a write raises :class:`StoreError` saying so.
    """

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = path
        #: why the catalog is only read ("" when it can be written)
        self.read_only = ""
        if read_only:
            self._db = open_read_only(path)[0]
            self.read_only = "opened for reading"
            return
        try:
            self._db = self._open_for_writing(path)
        except StoreError as exc:
            if not path.is_file():
                raise
            self._db = open_read_only(path, exc)[0]
            self.read_only = str(exc)

    @staticmethod
    def _open_for_writing(path: Path) -> sqlite3.Connection:
        try:
            db = sqlite3.connect(path, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{path}: cannot open the jobs catalog: {exc}") from exc
        # Switching a new database to WAL takes a lock that SQLite does not wait for: when the
        # ranks of a run open a new catalog at the same moment, all but one are told "locked".
        deadline = time.monotonic() + _BUSY_TIMEOUT_S
        while True:
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA foreign_keys=ON")
                db.executescript(_SCHEMA)
                return db
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    db.close()
                    raise StoreError(f"{path}: cannot open the jobs catalog: {exc}") from exc
                time.sleep(0.05)
            except sqlite3.DatabaseError as exc:
                db.close()
                raise StoreError(f"{path}: cannot open the jobs catalog: {exc}") from exc

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            why = f" (opened read-only: {self.read_only})" if self.read_only else ""
            raise StoreError(f"{self.path}: cannot write the jobs catalog: {exc}{why}") from exc

    def add_profile(
        self,
        job_name: str,
        profile: ProfileRef,
        *,
        status: JobStatus,
        nodes: list[str],
        created_ns: int,
    ) -> Job:
        """Create the job if it is new, attach the profile, update the job's nodes and ranks."""
        with self._write() as db:
            row = db.execute("SELECT id, nodes, ranks FROM jobs WHERE name = ?", (job_name,)).fetchone()
            if row is None:
                cur = db.execute(
                    "INSERT INTO jobs(name, created_ns, updated_ns, status, nodes, ranks) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (job_name, created_ns, created_ns, status.value, json.dumps(nodes), profile.ranks),
                )
                job_id = int(cur.lastrowid or 0)
            else:
                job_id = int(row[0])
                merged = sorted(set(json.loads(row[1])) | set(nodes))
                db.execute(
                    "UPDATE jobs SET updated_ns = ?, status = ?, nodes = ?, ranks = max(ranks, ?) "
                    "WHERE id = ?",
                    (created_ns, status.value, json.dumps(merged), profile.ranks, job_id),
                )
            db.execute(
                "INSERT INTO profiles(id, job_id, created_ns, source, events, ranks, bytes, origin) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    profile.id,
                    job_id,
                    profile.created_ns,
                    profile.source,
                    profile.events,
                    profile.ranks,
                    profile.bytes,
                    profile.origin,
                ),
            )
            # read in the same transaction: a `hyperscope rm` right after cannot make it fail
            row = db.execute(_JOB_SELECT + " WHERE id = ?", (job_id,)).fetchone()
            return self._with_profiles(_job(row))

    def open_capture(
        self, job_name: str, profile: ProfileRef, *, rank: int, node: str, world_size: int
    ) -> Job:
        """Register one rank of a capture: the job (InProgress), the profile, the rank's row.

        Every rank of a distributed run calls this with the same profile id; the first one creates
        the rows, the others join them.
        """
        with self._write() as db:
            row = db.execute("SELECT id, nodes, ranks FROM jobs WHERE name = ?", (job_name,)).fetchone()
            if row is None:
                cur = db.execute(
                    "INSERT INTO jobs(name, created_ns, updated_ns, status, nodes, ranks) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        job_name,
                        profile.created_ns,
                        profile.created_ns,
                        JobStatus.IN_PROGRESS.value,
                        json.dumps([node] if node else []),
                        world_size,
                    ),
                )
                job_id = int(cur.lastrowid or 0)
            else:
                job_id = int(row[0])
                merged = sorted(set(json.loads(row[1])) | ({node} if node else set()))
                db.execute(
                    "UPDATE jobs SET updated_ns = ?, nodes = ?, ranks = max(ranks, ?) WHERE id = ?",
                    (profile.created_ns, json.dumps(merged), world_size, job_id),
                )
            db.execute(
                "INSERT OR IGNORE INTO profiles(id, job_id, created_ns, source, events, ranks, bytes, "
                "origin) VALUES (?, ?, ?, ?, 0, 0, 0, ?)",
                (profile.id, job_id, profile.created_ns, profile.source, profile.origin),
            )
            db.execute(
                "INSERT OR REPLACE INTO profile_ranks(profile_id, rank, node, world_size, status, "
                "updated_ns) VALUES (?, ?, ?, ?, ?, ?)",
                (profile.id, rank, node, world_size, RankStatus.RUNNING.value, profile.created_ns),
            )
            self._settle(db, profile.id)
        return self.job(str(job_id))

    def update_capture(
        self,
        profile_id: str,
        rank: int,
        *,
        events: int,
        bytes: int,
        status: RankStatus | None = None,
        message: str | None = None,
        now_ns: int,
    ) -> None:
        """Record a rank's progress (after each flush) or its end, and re-derive the job's status."""
        with self._write() as db:
            db.execute(
                "UPDATE profile_ranks SET events = ?, bytes = ?, status = coalesce(?, status), "
                "message = coalesce(?, message), updated_ns = ? WHERE profile_id = ? AND rank = ?",
                (events, bytes, status.value if status else None, message, now_ns, profile_id, rank),
            )
            self._settle(db, profile_id)

    def rank_totals(self, profile_id: str, rank: int) -> tuple[int, int]:
        """(events, bytes) a rank of a capture has written so far."""
        row = self._db.execute(
            "SELECT events, bytes FROM profile_ranks WHERE profile_id = ? AND rank = ?", (profile_id, rank)
        ).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def rank_statuses(self, profile_id: str) -> list[tuple[int, str, RankStatus, str]]:
        """(rank, node, status, message) of every rank of a captured profile."""
        rows = self._db.execute(
            "SELECT rank, node, status, message FROM profile_ranks WHERE profile_id = ? ORDER BY rank",
            (profile_id,),
        ).fetchall()
        return [(int(r), str(n), RankStatus(str(s)), str(m)) for r, n, s, m in rows]

    @staticmethod
    def _settle(db: sqlite3.Connection, profile_id: str) -> None:
        """Totals of the profile, and the job's status: Failed if a rank failed (a crash), else
        Stopped once every rank has ended and one was stopped (asked to: SIGTERM, SIGINT), Stopping
        while the others end; Completed once every rank of the world has finished, InProgress
        until then."""
        ranks = db.execute(
            "SELECT count(*), coalesce(sum(events), 0), coalesce(sum(bytes), 0), max(world_size), "
            "count(*) FILTER (WHERE status = 'failed'), "
            "count(*) FILTER (WHERE status IN ('completed', 'incomplete', 'stopped')), "
            "count(*) FILTER (WHERE status = 'stopped') "
            "FROM profile_ranks WHERE profile_id = ?",
            (profile_id,),
        ).fetchone()
        count, events, size, world, failed, finished, stopped = ranks
        db.execute(
            "UPDATE profiles SET events = ?, bytes = ?, ranks = ? WHERE id = ?",
            (events, size, count, profile_id),
        )
        notes = [
            f"rank {r}: {m}"
            for r, m in db.execute(
                "SELECT rank, message FROM profile_ranks WHERE profile_id = ? AND message <> '' "
                "ORDER BY rank",
                (profile_id,),
            ).fetchall()
        ]
        ended = finished >= max(int(world or 1), count)
        if failed:
            status = JobStatus.FAILED
        elif stopped:
            status = JobStatus.STOPPED if ended else JobStatus.STOPPING
        elif ended:
            status = JobStatus.COMPLETED
        else:
            status = JobStatus.IN_PROGRESS
        db.execute(
            "UPDATE jobs SET status = ?, message = ?, updated_ns = strftime('%s','now') * 1000000000 "
            "WHERE id = (SELECT job_id FROM profiles WHERE id = ?)",
            (status.value, "; ".join(notes), profile_id),
        )

    def upsert_slurm_job(
        self,
        cluster: str,
        slurm_job_id: int | None,
        *,
        name: str,
        status: JobStatus,
        nodes: list[str],
        ranks: int,
        created_ns: int,
        message: str,
    ) -> Job:
        """Record what Slurm says of one job of ``cluster`` (a key that changes when the cluster is
        re-created, because Slurm's job ids start again); returns the catalog's job.

        The entry is found by (cluster, id); else by ``name`` when that entry has no Slurm job yet
        (reserved by ``hyperscope submit`` before sbatch, or opened by the job's own capture), so
        the Slurm job and its profiles are one entry; else a new one is made, named ``name`` or
        ``name-2``… With ``slurm_job_id=None`` it only reserves such an entry.
        """
        with self._write() as db:
            _add_slurm_columns(db)
            row = None
            if slurm_job_id is not None:
                row = (
                    db.execute(
                        "SELECT id FROM jobs WHERE slurm_cluster = ? AND slurm_job_id = ?",
                        (cluster, slurm_job_id),
                    ).fetchone()
                    or db.execute(
                        "SELECT id FROM jobs WHERE name = ? AND slurm_job_id IS NULL", (name,)
                    ).fetchone()
                )
            if row is None:
                unique, n = name, 1
                while db.execute("SELECT 1 FROM jobs WHERE name = ?", (unique,)).fetchone():
                    n += 1
                    unique = f"{name}-{n}"
                cur = db.execute(
                    "INSERT INTO jobs(name, created_ns, updated_ns, status, nodes, ranks, message) "
                    "VALUES (?, ?, ?, ?, '[]', 0, '')",
                    (unique, created_ns, created_ns, status.value),
                )
                row = (cur.lastrowid,)
            new = (cluster, slurm_job_id, status.value, json.dumps(sorted(nodes)), ranks, message)
            old = db.execute(
                "SELECT slurm_cluster, slurm_job_id, status, nodes, ranks, message FROM jobs WHERE id = ?",
                (row[0],),
            ).fetchone()
            if tuple(old) != new:  # a sync that learns nothing new leaves updated_ns alone
                db.execute(
                    "UPDATE jobs SET slurm_cluster = ?, slurm_job_id = ?, status = ?, nodes = ?, "
                    "ranks = max(ranks, ?), message = ?, updated_ns = ? WHERE id = ?",
                    (*new, time.time_ns(), row[0]),
                )
        return self.job(str(row[0]))

    def slurm_jobs(self, cluster: str) -> dict[int, Job]:
        """The jobs of one cluster (key as in :meth:`upsert_slurm_job`) by Slurm job id."""
        if "slurm_job_id" not in _columns(self._db):  # a catalog no Slurm job was written to
            return {}
        rows = self._db.execute(
            _JOB_SELECT.replace(" FROM", ", slurm_job_id FROM")
            + " WHERE slurm_cluster = ? AND slurm_job_id IS NOT NULL",
            (cluster,),
        ).fetchall()
        return {int(r[-1]): self._with_profiles(_job(r[:-1])) for r in rows}

    def set_status(self, job: str, status: JobStatus, message: str = "") -> None:
        found = self.job(job)
        with self._write() as db:
            db.execute(
                "UPDATE jobs SET status = ?, message = ?, updated_ns = strftime('%s','now') * 1000000000 "
                "WHERE id = ?",
                (status.value, message, found.id),
            )

    def job(self, job: str) -> Job:
        """A job by name, or by number when no job has that name."""
        row = self._db.execute(_JOB_SELECT + " WHERE name = ?", (job,)).fetchone()
        if row is None and job.isdigit():
            row = self._db.execute(_JOB_SELECT + " WHERE id = ?", (int(job),)).fetchone()
        if row is None:
            raise JobNotFound(job)
        return self._with_profiles(_job(row))

    def jobs(
        self,
        *,
        search: str | None = None,
        status: JobStatus | None = None,
        since_ns: int | None = None,
    ) -> list[Job]:
        where: list[str] = []
        params: list[str | int] = []
        if search:
            where.append("name LIKE ? ESCAPE '\\'")
            escaped = search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            params.append(f"%{escaped}%")
        if status is not None:
            where.append("status = ?")
            params.append(status.value)
        if since_ns is not None:
            where.append("created_ns >= ?")
            params.append(since_ns)
        sql = (
            _JOB_SELECT
            + (" WHERE " + " AND ".join(where) if where else "")
            + " ORDER BY created_ns DESC, id DESC"
        )
        return [self._with_profiles(_job(r)) for r in self._db.execute(sql, params).fetchall()]

    def remove(self, job: str) -> Job:
        """The job and every profile it holds as it is deleted: read in the deleting transaction,
        so a profile another process adds meanwhile is either listed here or added after."""
        with self._write() as db:
            found = self.job(job)
            db.execute("DELETE FROM jobs WHERE id = ?", (found.id,))
        return found

    def _with_profiles(self, job: Job) -> Job:
        rows = self._db.execute(
            "SELECT id, job_id, created_ns, source, events, ranks, bytes, origin FROM profiles "
            "WHERE job_id = ? ORDER BY created_ns",
            (job.id,),
        ).fetchall()
        job.profiles.extend(ProfileRef(*r) for r in rows)
        return job


READ_MODES: Final = ("mode=ro", "immutable=1")


def open_read_only(
    path: Path, first: StoreError | None = None, modes: tuple[str, ...] = READ_MODES
) -> tuple[sqlite3.Connection, str]:
    """A read-only connection to the catalog at ``path`` and the mode that gave it: ``mode=ro``,
    else ``immutable=1``, which needs no ``-shm`` file (a read-only directory, or a full disk,
    where SQLite cannot create one). Each is tried with a query, since SQLite opens lazily and a
    WAL database fails only at its first read. ``first``: why the caller could not open it for
    writing, named in the error when no mode works."""
    uri = path.absolute().as_uri()
    errors: list[str] = [str(first.__cause__ or first)] if first is not None else []
    for mode in modes:
        try:
            db = sqlite3.connect(
                f"{uri}?{mode}", uri=True, timeout=_BUSY_TIMEOUT_S, isolation_level=None,
                check_same_thread=False,
            )  # fmt: skip
        except sqlite3.Error as exc:
            errors.append(f"{mode}: {exc}")
            continue
        try:
            db.execute("SELECT count(*) FROM jobs").fetchone()
            return db, mode
        except sqlite3.Error as exc:
            db.close()
            errors.append(f"{mode}: {exc}")
    raise StoreError(f"{path}: cannot open the jobs catalog: {'; '.join(errors)}")


_JOB_SELECT: Final = "SELECT id, name, created_ns, updated_ns, status, nodes, ranks, message FROM jobs"


def _columns(db: sqlite3.Connection) -> set[str]:
    return {str(r[1]) for r in db.execute("PRAGMA table_info(jobs)")}


def _add_slurm_columns(db: sqlite3.Connection) -> None:
    """Added on the first Slurm job written, inside that write's transaction (so two writers never
    both add them), never on open: reading a store, read-only ones included, writes nothing."""
    have = _columns(db)
    for column in ("slurm_cluster TEXT NOT NULL DEFAULT ''", "slurm_job_id INTEGER"):
        if column.split()[0] not in have:
            db.execute(f"ALTER TABLE jobs ADD COLUMN {column}")
    db.execute(
        "CREATE UNIQUE INDEX IF NOT EXISTS jobs_slurm ON jobs(slurm_cluster, slurm_job_id) "
        "WHERE slurm_job_id IS NOT NULL"
    )


def _job(row: tuple[object, ...]) -> Job:
    id_, name, created, updated, status, nodes, ranks, message = row
    return Job(
        id=int(str(id_)),
        name=str(name),
        created_ns=int(str(created)),
        updated_ns=int(str(updated)),
        status=JobStatus(str(status)),
        nodes=list(json.loads(str(nodes))),
        ranks=int(str(ranks)),
        message=str(message),
    )
