"""Each attempt of a Slurm job, kept in the jobs catalog: when it started, when it ended and how,
and when its ranks last beat. Slurm itself remembers only the current attempt's times (without
accounting, and even with it a requeue overwrites them), so the goodput of a job that was requeued
(:mod:`hyperscope.cluster.goodput`) needs them written down as they happen: the catalog sync,
which the agent runs whenever a job changes state, records them.

One row per (cluster, Slurm job id, attempt), attempt = Slurm's ``Restarts`` count at the time. A
field once known is never overwritten by an unknown one, so syncs that see less (a job already
forgotten by slurmctld) never erase what earlier ones saw.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from hyperscope.store.catalog import Catalog

_TABLE = """
CREATE TABLE IF NOT EXISTS slurm_attempts (
    cluster       TEXT NOT NULL,
    job_id        INTEGER NOT NULL,
    attempt       INTEGER NOT NULL,
    start_ns      INTEGER,
    end_ns        INTEGER,
    end_state     TEXT NOT NULL DEFAULT '',
    last_beat_ns  INTEGER,
    PRIMARY KEY (cluster, job_id, attempt)
)
"""


@dataclass(frozen=True, slots=True)
class Attempt:
    job_id: int
    attempt: int  # 0 for the first run, then Slurm's restart count
    start_ns: int | None  # None: it ended before a sync saw it running
    end_ns: int | None  # None: still running
    end_state: str  # REQUEUED, COMPLETED, FAILED, CANCELLED, ...; "" while running
    last_beat_ns: int | None  # the newest heartbeat of its ranks when it ended (None: none seen)


def record(
    catalog: Catalog,
    cluster: str,
    job_id: int,
    attempt: int,
    *,
    start_ns: int | None = None,
    end_ns: int | None = None,
    end_state: str = "",
    last_beat_ns: int | None = None,
) -> None:
    """What one sync learned of one attempt; fields left None (or "") keep what was known."""
    with catalog._write() as db:
        db.execute(_TABLE)
        db.execute(
            "INSERT INTO slurm_attempts(cluster, job_id, attempt, start_ns, end_ns, end_state, last_beat_ns) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(cluster, job_id, attempt) DO UPDATE SET "
            "start_ns = coalesce(start_ns, excluded.start_ns), "
            "end_ns = coalesce(end_ns, excluded.end_ns), "
            "end_state = CASE WHEN end_state = '' THEN excluded.end_state ELSE end_state END, "
            "last_beat_ns = coalesce(last_beat_ns, excluded.last_beat_ns)",
            (cluster, job_id, attempt, start_ns, end_ns, end_state, last_beat_ns),
        )


def read(catalog: Catalog, cluster: str) -> dict[int, list[Attempt]]:
    """Every recorded attempt of ``cluster``'s jobs, by Slurm job id, first attempt first; {} for a
    catalog no attempt was written to."""
    try:
        rows = catalog._db.execute(
            "SELECT job_id, attempt, start_ns, end_ns, end_state, last_beat_ns FROM slurm_attempts "
            "WHERE cluster = ? ORDER BY job_id, attempt",
            (cluster,),
        ).fetchall()
    except sqlite3.OperationalError:  # no such table: nothing recorded yet
        return {}
    out: dict[int, list[Attempt]] = {}
    for job_id, attempt, start, end, state, beat in rows:
        out.setdefault(int(job_id), []).append(Attempt(int(job_id), int(attempt), start, end, state, beat))
    return out
