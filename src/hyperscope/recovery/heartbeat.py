"""Progress heartbeats: how a training job tells the agent it is still making progress.

``hyperscope.step()`` and every checkpoint save call :func:`beat`. When
``HYPERSCOPE_HEARTBEAT_DIR`` is set (``hyperscope submit`` sets it to the cluster's shared
directory), each rank keeps one small file there, ``<job>.<rank>``, holding its last step number,
the time, its mean step time since the file was last written, and its node, rewritten at most once
a second; otherwise a beat costs one attribute test. The agent reads the files: a job whose every
rank has been silent for longer than its hang timeout is treated as failed (a frozen process or
node never says so itself), and a rank whose steps are slower than the others' is a straggler
(``recovery.stragglers``).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

DIR_ENV = "HYPERSCOPE_HEARTBEAT_DIR"
_MIN_INTERVAL_NS = 1_000_000_000


class Heartbeat:
    """This process's heartbeat file."""

    def __init__(self, directory: Path, job: str, rank: int, node: str = "") -> None:
        self.path = directory / f"{job}.{rank}"
        self._tmp = directory / f".{job}.{rank}.tmp"
        self._last_ns = 0
        self._last_step = 0
        self._window_ns = 0  # the step time last written
        self.step = 0
        #: no spaces: the file is split on them
        self.node = "".join((node or socket.gethostname()).split()) or "-"
        directory.mkdir(parents=True, exist_ok=True)

    def beat(self, *, step: int | None = None, force: bool = False) -> None:
        self.step = self.step + 1 if step is None else step
        now = time.time_ns()
        if not force and now - self._last_ns < _MIN_INTERVAL_NS:
            return
        # the mean step time since the last write (0: no step since, or the first write)
        steps = self.step - self._last_step
        step_ns = (now - self._last_ns) // steps if self._last_ns and steps > 0 else 0
        self._last_ns, self._last_step, self._window_ns = now, self.step, step_ns
        self._write(now, step_ns)

    def touch(self) -> None:
        """A sign of life that is not a step (a long checkpoint save): the file says now, with the
        same step and the last window's step time, so the step count and the straggler
        detection's windows stay as they were (the save's time counts in the next window's steps)."""
        self._write(time.time_ns(), self._window_ns)

    def _write(self, now: int, step_ns: int) -> None:
        try:
            self._tmp.write_text(f"{self.step} {now} {step_ns} {self.node}\n")
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
        return Heartbeat(Path(directory), job, rank, os.environ.get("SLURMD_NODENAME", ""))
    except OSError:
        return None


_default: Heartbeat | None = from_env()


def beat(*, force: bool = False) -> None:
    """One step of progress by this process (a no-op unless ``HYPERSCOPE_HEARTBEAT_DIR`` is set)."""
    if _default is not None:
        _default.beat(force=force)


def alive() -> None:
    """This process is alive but not stepping (:meth:`Heartbeat.touch`; a no-op without a
    heartbeat)."""
    if _default is not None:
        _default.touch()


@dataclass(frozen=True, slots=True)
class Silence:
    job: str
    rank: int
    last_step: int
    silent_s: float
    step_ns: int = 0  # its mean step time in the window before its last write (0: none known)
    node: str = ""


@dataclass(frozen=True, slots=True)
class Beat:
    """One rank's heartbeat file as written last: what the straggler detection reads."""

    rank: int
    step: int
    ts_ns: int
    step_ns: int  # the mean step time of the steps since the write before (0: none known)
    node: str


def parse(rank: int, text: str) -> Beat:
    """A heartbeat's line; ValueError when it is not one. Files of older versions hold only the
    step and the time."""
    parts = text.split()
    if len(parts) not in (2, 4):
        raise ValueError(f"a heartbeat has 2 or 4 fields, not {len(parts)}: {text!r}")
    step, ts = int(parts[0]), int(parts[1])
    step_ns, node = (int(parts[2]), parts[3]) if len(parts) == 4 else (0, "")
    return Beat(rank, step, ts, step_ns, node)


def job_beats(directory: Path, job: str, ranks: int) -> list[Beat]:
    """The last beat of each of ``job``'s ranks 0 .. ``ranks``-1 that has one."""
    out = []
    for r in range(ranks):
        try:
            out.append(parse(r, (directory / f"{job}.{r}").read_text()))
        except (OSError, ValueError):
            continue  # not written yet, or being replaced this instant
    return out


def read(directory: Path, *, now_ns: int | None = None) -> list[Silence]:
    """Every rank's last heartbeat and how long ago it was, oldest first."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    out = []
    for entry in directory.glob("*.*") if directory.is_dir() else []:
        if entry.name.startswith("."):
            continue
        job, _, rank = entry.name.rpartition(".")
        try:
            b = parse(int(rank), entry.read_text())
            out.append(Silence(job, b.rank, b.step, (now_ns - b.ts_ns) / 1e9, b.step_ns, b.node))
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
