"""The asker's side of ``hyperscope capture``: find a running job, agree on a step, wait.

``capture_running`` looks for the job's ranks in every control directory it knows (the store's,
and each cluster's shared one), asks them where they are, names a start step that the furthest
rank reaches only after every rank has read it (``request.plan_start``), and waits until each
asked rank started (and, unless told not to, finished). The profile is written by the ranks
themselves into the store, with the streaming writer of ``start_profiling()``, so the UI shows it
growing. Every way this can fail has its own message: no such job, a job that is not running, one
that never calls ``hyperscope.step()``, ranks that do not answer in time.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hyperscope.capture import request as rq
from hyperscope.errors import HyperscopeError, JobNotFound, UsageError
from hyperscope.schema.layout import CATALOG_FILE
from hyperscope.store.catalog import Catalog, JobStatus

__all__ = ["CaptureError", "CaptureResult", "Control", "RunningJob", "capture_running", "controls", "running"]


class CaptureError(HyperscopeError):
    """An on-demand capture that could not be made; the message says which rank and why."""


@dataclass(frozen=True, slots=True)
class Control:
    """A control directory, and the store its jobs' profiles go to when a rank names none."""

    dir: Path
    store: Path
    #: a cluster's Slurm configuration, to tell "not running" from "never calls step()"
    slurm_conf: Path | None = None


@dataclass(frozen=True, slots=True)
class RunningJob:
    control: Control
    key: str
    ranks: dict[int, rq.Presence]  # the ranks present now
    world_size: int

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n for p in self.ranks.values() for n in p.names))

    @property
    def furthest_step(self) -> int:
        return max(p.step for p in self.ranks.values())


@dataclass(frozen=True, slots=True)
class CaptureResult:
    job: str  # the catalog job the profile belongs to
    store: Path
    profile_id: str
    start_step: int  # the first step recorded (the lowest, for ranks not in lockstep)
    end_step: int  # the last step recorded (of the rank that started first)
    ranks: tuple[int, ...]
    finished: bool  # False with wait=False: the ranks are still recording
    notes: list[str] = field(default_factory=list)
    #: rank -> its first recorded step (all equal for ranks that step together)
    starts: dict[int, int] = field(default_factory=dict)
    steps: int = 0

    @property
    def lockstep(self) -> bool:
        return len(set(self.starts.values())) <= 1


def controls(home: Path) -> list[Control]:
    """Every control directory this machine knows of: the store's, then each cluster's."""
    out = [Control(home / "control", home)]
    try:
        from hyperscope.cluster.jobs import store_home
        from hyperscope.cluster.state import list_states

        for state in list_states(home):
            shared = Path(state.shared_dir)
            out.append(Control(shared / "hyperscope" / "control", store_home(state), Path(state.slurm_conf)))
    except (HyperscopeError, OSError):
        pass  # a broken cluster record does not stop a capture elsewhere
    return out


def running(places: Sequence[Control], *, now_ns: int | None = None) -> list[RunningJob]:
    """The runs whose ranks answered within ``request.STALE_S`` (a run per control dir and key)."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    out = []
    for place in places:
        groups: dict[str, dict[int, rq.Presence]] = {}
        for p in rq.read_presences(place.dir):
            if now_ns - p.ts_ns <= rq.STALE_S * 1e9:
                groups.setdefault(p.key, {})[p.rank] = p
        for key, ranks in sorted(groups.items()):
            world = max(p.world_size for p in ranks.values())
            out.append(RunningJob(place, key, ranks, world))
    return out


def find(job: str, places: Sequence[Control], *, now_ns: int | None = None) -> RunningJob:
    """The one running job called ``job``, or the reason there is none."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    live = [r for r in running(places, now_ns=now_ns) if job in r.names or job == r.key]
    if len(live) > 1:
        listed = "; ".join(f"{r.key} ({', '.join(r.names)})" for r in live)
        raise UsageError(f"{job!r} names {len(live)} running jobs: {listed}; give one of their run ids")
    if live:
        return live[0]
    stale = [p for place in places for p in rq.read_presences(place.dir) if job in p.names or job == p.key]
    if stale:
        last = max(stale, key=lambda p: p.ts_ns)
        ago = (now_ns - last.ts_ns) / 1e9
        raise CaptureError(
            f"job {job!r} is not running: its ranks last answered {ago:.0f} s ago (rank {last.rank}, "
            f"step {last.step}, on {last.node}); a process that is stopped or frozen cannot be profiled"
        )
    raise CaptureError(_why_not_found(job, places))


def _why_not_found(job: str, places: Sequence[Control]) -> str:
    where = ", ".join(str(p.dir) for p in places)
    never = (
        f"job {job!r} is running but none of its ranks has called hyperscope.step() (no presence "
        f"file in {where}): on-demand capture reaches a job through step(); call it once per "
        "training step (or run the job under `hyperscope profile`)"
    )
    for place in places:
        catalog = place.store / CATALOG_FILE
        if catalog.is_file():
            cat = Catalog(catalog)
            try:
                found = cat.job(job)
            except JobNotFound:
                found = None
            finally:
                cat.close()
            if found is not None and found.status is JobStatus.IN_PROGRESS:
                return never
            if found is not None:
                return f"job {job!r} is not running (the catalog says {found.status.value})"
        if place.slurm_conf is not None and job.isdigit():
            state = _slurm_state(place.slurm_conf, int(job))
            if state == "RUNNING":
                return never
            if state:
                return f"job {job!r} is not running (Slurm says {state})"
    return (
        f"no running job {job!r}: no process that calls hyperscope.step() names it (looked in {where}); "
        "`hyperscope capture --list` shows the running ones"
    )


def _slurm_state(conf: Path, job_id: int) -> str:
    from hyperscope.cluster.slurm import Slurm, SlurmError

    try:
        return next((j.state for j in Slurm(conf).jobs() if j.id == job_id), "")
    except (SlurmError, OSError):
        return ""


Progress = Callable[[str], None]


def capture_running(
    job: str,
    home: Path,
    *,
    steps: int | None = None,
    duration_s: float | None = None,
    ranks: Sequence[int] | None = None,
    cpu_ops: bool = False,
    places: Sequence[Control] | None = None,
    timeout_s: float = 15.0,
    lead_s: float = 2.0,
    wait: bool = True,
    progress: Progress | None = None,
) -> CaptureResult:
    """Profile ``steps`` steps (or about ``duration_s`` seconds) of every asked rank of a running
    job, all starting on the same step; the new profile's id and where it is.

    ``timeout_s`` bounds each wait for the ranks (to answer, to reach the start step); a rank that
    stops answering while it records ends the wait with an error too.
    """
    if (steps is None) == (duration_s is None):
        raise UsageError("give the length of the capture as steps or as a duration, not both" if steps
                         else "give the length of the capture: --steps N or --duration S")  # fmt: skip
    if steps is not None and steps < 1:
        raise UsageError(f"--steps is {steps}; expected at least 1 step")
    if duration_s is not None and not duration_s > 0:
        raise UsageError(f"--duration is {duration_s}; expected seconds > 0")
    say = progress or (lambda _line: None)
    target = find(job, controls(home) if places is None else places)
    wanted = _wanted(target, ranks)
    first = target.ranks[min(target.ranks)]
    catalog_job = next((p.job for p in target.ranks.values() if p.job), "") or job
    store = Path(next((p.home for p in target.ranks.values() if p.home), "") or target.control.store)
    paths = rq.Paths(target.control.dir)
    req = rq.Request(
        id=uuid.uuid4().hex[:10], phase="ask", ranks=None if ranks is None else wanted,
        steps=steps or 0, cpu_ops=cpu_ops, job=catalog_job, home=str(store), created_ns=time.time_ns(),
    )  # fmt: skip
    say(
        f"asking {len(wanted)} rank(s) of {target.key} (world size {target.world_size}, "
        f"rank {first.rank} at step {first.step})"
    )
    rq.write_atomic(paths.request(target.key), req.to_json())
    try:
        acks = _gather(paths, target, req, wanted, {rq.ACK, rq.BUSY}, timeout_s, "answer")
        busy = [a for a in acks.values() if a.phase == rq.BUSY]
        if busy:
            listed = ", ".join(str(a.rank) for a in busy)
            why = busy[0].message
            raise CaptureError(f"rank(s) {listed} of job {job!r} are being profiled already: {why}")
        n = steps if steps is not None else rq.steps_for_duration(acks.values(), duration_s or 0.0)
        start, own = rq.plan_starts(list(acks.values()), time.time_ns(), lead_s)
        go = dataclasses.replace(req, phase="go", steps=n, start_step=start,
                                 starts={str(r): s for r, s in own.items()} or None)  # fmt: skip
        rq.write_atomic(paths.request(target.key), go.to_json())
        if own:
            at = ", ".join(f"rank {r} at step {s}" for r, s in sorted(own.items()))
            say(f"the ranks do not step together: each records {n} steps from about now ({at})")
            start = max(own.values())
        else:
            say(f"all ranks answered; recording steps {start} to {start + n - 1}")
        # how long the slowest to get there needs, at its pace
        reach = lead_s + max((go.start_for(a.rank) - a.step) * a.step_ns / 1e9 for a in acks.values())
        goal = f"reach step {start}" if not own else "reach its start step"
        begun = _gather(paths, target, go, wanted, {rq.STARTED, rq.LATE, rq.DONE, rq.FAILED},
                        timeout_s + reach, goal)  # fmt: skip
        _raise_failed(begun.values())
        notes = [f"rank {a.rank}: {a.message}" for a in begun.values() if a.phase == rq.LATE]
        profile = next(iter(begun.values())).profile_id
        say(f"recording: profile {profile} of job {catalog_job!r} in {store}")
        finished = False
        if wait:
            done = _gather(paths, target, go, wanted, {rq.DONE, rq.FAILED}, None, "finish the capture")
            _raise_failed(done.values())
            finished = True
        starts = {a.rank: a.start_step for a in begun.values()}
        low = min(starts.values())
        return CaptureResult(catalog_job, store, profile, low, low + n - 1, wanted, finished, notes,
                             starts, n)  # fmt: skip
    finally:  # still recording (wait=False): the ranks write their last answers after this
        _clean(paths, target.key, req.id, wanted if wait else ())


def _wanted(target: RunningJob, ranks: Sequence[int] | None) -> tuple[int, ...]:
    if ranks is None:
        return tuple(range(target.world_size))
    bad = [r for r in ranks if not 0 <= r < target.world_size]
    if bad:
        raise UsageError(
            f"--ranks names rank(s) {', '.join(map(str, bad))}; job {target.key} has ranks 0 to "
            f"{target.world_size - 1}"
        )
    return tuple(sorted(set(ranks)))


def _gather(
    paths: rq.Paths,
    target: RunningJob,
    req: rq.Request,
    wanted: Sequence[int],
    phases: set[str],
    timeout_s: float | None,
    what: str,
) -> dict[int, rq.Answer]:
    """Each wanted rank's answer in one of ``phases``; an error naming the ranks that did not give
    one within ``timeout_s`` (None: as long as they keep answering)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        got = {}
        for rank in wanted:
            a = rq.read_answer(paths.answer(target.key, req.id, rank))
            if a is not None and a.phase in phases:
                got[rank] = a
        if len(got) == len(wanted):
            return got
        missing = [r for r in wanted if r not in got]
        if deadline is not None and time.monotonic() > deadline:
            raise CaptureError(_missing(target, missing, what, f"within {timeout_s:.0f} s"))
        if deadline is None:
            gone = [r for r in missing if _silent(paths, target.key, r)]
            if gone:
                raise CaptureError(_missing(target, gone, what, "and stopped answering"))
        time.sleep(0.05)


def _silent(paths: rq.Paths, key: str, rank: int) -> bool:
    try:
        p = rq.Presence.from_json(paths.live(key, rank).read_text())
    except (OSError, ValueError, TypeError, KeyError):
        return True
    return time.time_ns() - p.ts_ns > rq.STALE_S * 1e9


def _missing(target: RunningJob, missing: Sequence[int], what: str, how: str) -> str:
    shown = []
    for r in missing:
        p = target.ranks.get(r)
        shown.append(f"{r} (on {p.node}, last at step {p.step})" if p else f"{r} (never seen)")
    return (
        f"timed out: rank(s) {', '.join(shown)} of job {target.key} did not {what} {how}; "
        "nothing was recorded by them"
    )


def _raise_failed(answers: Iterable[rq.Answer]) -> None:
    failed = [a for a in answers if a.phase == rq.FAILED]
    if failed:
        raise CaptureError("; ".join(f"rank {a.rank}: {a.message}" for a in failed))


def _clean(paths: rq.Paths, key: str, request_id: str, wanted: Sequence[int]) -> None:
    """The request leaves nothing behind: a rank restarted later must not act on it."""
    try:
        current = rq.Request.from_json(paths.request(key).read_text())
        if current.id == request_id:
            paths.request(key).unlink(missing_ok=True)
    except (OSError, ValueError, TypeError, KeyError):
        pass
    for rank in wanted:
        paths.answer(key, request_id, rank).unlink(missing_ok=True)
