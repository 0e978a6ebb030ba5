"""Progress heartbeats: how a training job tells the agent it is still making progress.

``hyperscope.step()`` and every checkpoint save call :func:`beat`. When
``HYPERSCOPE_HEARTBEAT_DIR`` is set (``hyperscope submit`` sets it to the cluster's shared
directory), each rank keeps one small file there, ``<job>.<rank>``, holding its last step number
and the time, rewritten at most once a second; otherwise a beat costs one attribute test. The agent
reads the files: a job whose every rank has been silent for longer than its hang timeout is
treated as failed (a frozen process or node never says so itself).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

DIR_ENV = "HYPERSCOPE_HEARTBEAT_DIR"
_MIN_INTERVAL_NS = 1_000_000_000


class Heartbeat:
    """This process's heartbeat file."""

    def __init__(self, directory: Path, job: str, rank: int) -> None:
        self.path = directory / f"{job}.{rank}"
        self._tmp = directory / f".{job}.{rank}.tmp"
        self._last_ns = 0
        self.step = 0
        directory.mkdir(parents=True, exist_ok=True)

    def beat(self, *, step: int | None = None, force: bool = False) -> None:
        self.step = self.step + 1 if step is None else step
        now = time.time_ns()
        if not force and now - self._last_ns < _MIN_INTERVAL_NS:
            return
        self._last_ns = now
        try:
            self._tmp.write_text(f"{self.step} {now}\n")
            os.replace(self._tmp, self.path)  # readers never see half a line
        except OSError:
            pass  # a heartbeat must never stop training; a silent rank is what the agent looks for


def from_env() -> Heartbeat | None:
    directory = os.environ.get(DIR_ENV)
    if not directory:
        return None
    job = os.environ.get("SLURM_JOB_ID") or os.environ.get("HYPERSCOPE_RUN_ID") or str(os.getppid())
    rank = int(os.environ.get("SLURM_PROCID") or os.environ.get("RANK") or 0)
    try:
        return Heartbeat(Path(directory), job, rank)
    except OSError:
        return None


_default: Heartbeat | None = from_env()


def beat(*, force: bool = False) -> None:
    """One step of progress by this process (a no-op unless ``HYPERSCOPE_HEARTBEAT_DIR`` is set)."""
    if _default is not None:
        _default.beat(force=force)


@dataclass(frozen=True, slots=True)
class Silence:
    job: str
    rank: int
    last_step: int
    silent_s: float


def read(directory: Path, *, now_ns: int | None = None) -> list[Silence]:
    """Every rank's last heartbeat and how long ago it was, oldest first."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    out = []
    for entry in directory.glob("*.*") if directory.is_dir() else []:
        if entry.name.startswith("."):
            continue
        job, _, rank = entry.name.rpartition(".")
        try:
            step_text, ts_text = entry.read_text().split()
            out.append(Silence(job, int(rank), int(step_text), (now_ns - int(ts_text)) / 1e9))
        except (OSError, ValueError):
            continue  # being replaced this instant, or not ours
    return sorted(out, key=lambda s: -s.silent_s)


def newest(directory: Path, job: str, ranks: int = 0) -> float | None:
    """When ``job``'s most recent beat was written (s since the epoch), None before its first: its
    ranks' files ``<job>.0`` .. ``<job>.<ranks-1>`` (Slurm's task count), so the cost does not grow
    with the other jobs' files; every file of the job when those are not there (a step of its own
    task count)."""
    best = _newest(directory / f"{job}.{r}" for r in range(ranks))
    if best is None:
        best = _newest(directory.glob(f"{job}.*"))
    return None if best is None else best / 1e9


def _newest(paths: Iterable[Path]) -> int | None:
    best: int | None = None
    for path in paths:
        try:
            ts = int(path.read_text().split()[1])
        except (OSError, ValueError, IndexError):
            continue
        best = ts if best is None else max(best, ts)
    return best


def hung_jobs(directory: Path, timeout_s: float, *, now_ns: int | None = None) -> dict[str, float]:
    """Jobs whose every rank has been silent longer than ``timeout_s``: job -> seconds silent."""
    latest: dict[str, float] = {}
    for s in read(directory, now_ns=now_ns):
        latest[s.job] = min(latest.get(s.job, s.silent_s), s.silent_s)
    return {job: silent for job, silent in latest.items() if silent > timeout_s}
