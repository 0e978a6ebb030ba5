"""The rank's side of ``hyperscope capture``: notice a request, start and stop on the agreed step.

The training thread pays for this in ``hyperscope.step()`` with one counter increment and one
attribute test (``bench/capture_poll.py`` measures it). Everything else runs on a daemon thread
started at the first step: about once a second it rewrites this rank's presence file and looks
(one ``stat``) for a request to its run; while a request is pending it looks every 50 ms. When the
asker says "go" with a start step, the thread arms the watcher, and the step() that begins that
step opens a capture session (the same streaming writer ``start_profiling()`` uses), which ends
itself after the agreed number of steps. A failure here is logged once and the training goes on.

The control directory is ``$HYPERSCOPE_CONTROL_DIR``, else ``control/`` beside the cluster's
heartbeats (``$HYPERSCOPE_HEARTBEAT_DIR/../control``: every node sees it), else ``control/`` in
the store (one machine). ``HYPERSCOPE_CAPTURE_WATCH=0`` turns the watcher off.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Final

from hyperscope.capture import request as rq
from hyperscope.capture.context import DistContext
from hyperscope.recovery.heartbeat import DIR_ENV as HEARTBEAT_ENV

log = logging.getLogger("hyperscope.capture")

CONTROL_ENV: Final = "HYPERSCOPE_CONTROL_DIR"
WATCH_ENV: Final = "HYPERSCOPE_CAPTURE_WATCH"


def control_dir(environ: dict[str, str] | os._Environ[str] | None = None) -> Path:
    """Where this process meets ``hyperscope capture`` (see the module's docstring)."""
    env = os.environ if environ is None else environ
    if env.get(CONTROL_ENV):
        return Path(env[CONTROL_ENV]).expanduser()
    if env.get(HEARTBEAT_ENV):
        return Path(env[HEARTBEAT_ENV]).expanduser().parent / "control"
    from hyperscope.store.home import default_home

    home = env.get("HYPERSCOPE_HOME")
    return (Path(home).expanduser() if home else default_home()) / "control"


def job_names(ctx: DistContext, environ: dict[str, str] | os._Environ[str] | None = None) -> tuple[str, ...]:
    """What a user may call this job: its catalog name, Slurm's job id, the run, the script."""
    env = os.environ if environ is None else environ
    names = [env.get("HYPERSCOPE_JOB", ""), env.get("SLURM_JOB_ID", ""), ctx.run_id]
    if env.get("TORCHELASTIC_RUN_ID", "none") not in ("", "none"):
        names.append(env["TORCHELASTIC_RUN_ID"])
    if sys.argv and sys.argv[0] not in ("", "-c"):
        names.append(Path(sys.argv[0]).stem)
    return tuple(dict.fromkeys(n for n in names if n))


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    request: rq.Request
    start_step: int  # the agreed one, or the next step when the decision came too late


class Watcher:
    """This process's watch for requests. ``steps`` and ``armed`` are the training thread's."""

    __slots__ = ("_asked", "_failed", "_reported", "_stop", "_thread", "armed", "ctx", "key", "names",
                 "paths", "plan", "session", "started_step", "step_ns", "steps")  # fmt: skip

    def __init__(self, *, enabled: bool = True) -> None:
        self.steps = 0
        #: not None: the next step() must look (start the thread; or a plan to start a capture)
        self.armed: object | None = _START if enabled else None
        self.session: Any = None  # the capture session this watcher started
        self.plan: Plan | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._failed = False
        self._asked = False
        self._reported: tuple[str, str] | None = None
        self.started_step = -1
        self.step_ns = 0

    # -- the training thread ----------------------------------------------------------------------

    def service(self) -> None:
        """What the step() that found ``armed`` set does: start the thread, or begin a capture."""
        armed = self.armed
        if armed is _START:
            self.armed = None
            self._start_thread()
        elif isinstance(armed, Plan) and self.steps >= armed.start_step:
            self.armed = None
            self._begin(armed)

    def start_early(self) -> None:
        """Start the thread now, if the first step() has not yet (``start_profiling`` calls it:
        the thread's set-up, some milliseconds, then falls in the capture's start, not in a step)."""
        if self.armed is _START:
            self.armed = None
            self._start_thread()

    def _begin(self, plan: Plan) -> None:
        from hyperscope.capture import api
        from hyperscope.capture.config import ProfilerConfig
        from hyperscope.capture.session import Session

        req = plan.request
        start = self.steps
        self.started_step = start
        try:
            config = ProfilerConfig(
                job=req.job,
                home=req.home or None,
                steps=range(start, start + req.steps),
                cpu_ops=req.cpu_ops,
                tags={"capture": "on-demand", "request": req.id},
            )
            base = DistContext.detect().refined()
            ctx = dataclasses.replace(base, run_id=f"{base.run_id}~capture-{req.id}")
            session = Session(config, ctx)
            session.step_no = start
            if req.ranks is not None:
                session.ranks_expected = len(req.ranks)
            with api._guard:
                running = api._session
                if running is not None and not running.finished:
                    raise RuntimeError("a capture of this process is already running")
                session.start()
                api._session = session
            api._install_exit_hooks()
            self.session = session
        except Exception as exc:
            self._fail(req, f"the capture could not start: {exc}")

    # -- the watcher thread -----------------------------------------------------------------------

    def _start_thread(self) -> None:
        if self._failed:
            return
        try:
            self.ctx = DistContext.detect().refined()
            self.key = rq.safe_key(self.ctx.run_id)
            self.paths = rq.Paths(control_dir())
            self.names = job_names(self.ctx)
            self._thread = threading.Thread(target=self._run, name="hyperscope-capture-watch", daemon=True)
            self._thread.start()
            atexit.register(self.close)
        except Exception as exc:  # no control dir, no thread: the training goes on
            self._failed = True
            log.warning("hyperscope: on-demand capture is off for this process: %s", exc)

    def close(self) -> None:
        """At exit: stop looking and take this rank's presence file away."""
        self._stop.set()
        with contextlib.suppress(Exception):
            self.paths.live(self.key, self.ctx.rank).unlink(missing_ok=True)

    def _run(self) -> None:
        seen: tuple[int, int, int] | None = None
        last_live, last_steps, last_ns = 0, self.steps, time.time_ns()
        while not self._stop.is_set():
            now = time.time_ns()
            try:
                if now - last_live >= rq.IDLE_POLL_S * 1e9:
                    steps = self.steps
                    if steps > last_steps:
                        self.step_ns = (now - last_ns) // (steps - last_steps)
                        last_steps, last_ns = steps, now
                    elif now - last_ns > 2 * rq.IDLE_POLL_S * 1e9:
                        self.step_ns = 0  # no step for a while: the last rate says nothing now
                    last_live = now
                    self._write_presence(now)
                seen = self._look(seen)
                self._report_session()
            except Exception as exc:  # a full disk, a vanished shared dir: say it once, go on
                if not self._failed:
                    self._failed = True
                    log.warning("hyperscope: on-demand capture: %s", exc)
            pending = self.plan is not None and (self.session is None or not self.session.closed)
            self._stop.wait(rq.BUSY_POLL_S if pending or self._asked else rq.IDLE_POLL_S)

    def _capturing(self) -> bool:
        from hyperscope.capture import api

        running = api._session
        return running is not None and not running.finished

    def _write_presence(self, now: int) -> None:
        p = rq.Presence(
            key=self.key, rank=self.ctx.rank, world_size=self.ctx.world_size, node=self.ctx.node,
            pid=os.getpid(), names=self.names, step=self.steps, ts_ns=now, step_ns=self.step_ns,
            home=os.environ.get("HYPERSCOPE_HOME", ""), job=os.environ.get("HYPERSCOPE_JOB", ""),
            capturing=self._capturing(),
        )  # fmt: skip
        rq.write_atomic(self.paths.live(self.key, self.ctx.rank), p.to_json())

    def _look(self, seen: tuple[int, int, int] | None) -> tuple[int, int, int] | None:
        path = self.paths.request(self.key)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            self._asked = False
            return None
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp == seen:
            return seen
        try:
            req = rq.Request.from_json(path.read_text())
        except (OSError, ValueError, TypeError, KeyError):
            return None  # half-replaced on a filesystem without atomic rename: look again
        if not req.wants(self.ctx.rank) or time.time_ns() - req.created_ns > rq.REQUEST_TTL_S * 1e9:
            return stamp  # not for this rank; or left behind by an asker that died, for a process before
        if req.phase == "ask":
            self._asked = True
            if self._capturing():
                self._answer(req, rq.BUSY, message="a capture of this process is already running")
            else:
                self._answer(req, rq.ACK)
        elif req.phase == "go" and (self.plan is None or self.plan.request.id != req.id):
            self._asked = False
            asked = req.start_for(self.ctx.rank)
            late = self.steps >= asked
            self.plan = Plan(req, self.steps + 1 if late else asked)
            self.session = None
            self.armed = self.plan
            _warm_up(req.cpu_ops)
        return stamp

    def _report_session(self) -> None:
        plan, session = self.plan, self.session
        if plan is None or session is None:
            return
        start = self.started_step
        end = start + plan.request.steps - 1
        asked = plan.request.start_for(self.ctx.rank)
        late = start != asked
        # done once the rank's end is in the catalog (stop() has returned), not as stop() begins
        phase = rq.DONE if session.closed else (rq.LATE if late else rq.STARTED)
        if self._reported == (plan.request.id, phase):
            return
        self._reported = (plan.request.id, phase)
        message = f"asked to start at step {asked}, started at {start}" if late else ""
        self._answer(plan.request, phase, start_step=start, end_step=end,
                     profile_id=session.profile_id, message=message)  # fmt: skip
        if session.closed:
            self.plan = None

    def _answer(self, req: rq.Request, phase: str, **extra: Any) -> None:
        a = rq.Answer(id=req.id, rank=self.ctx.rank, phase=phase, step=self.steps,
                      ts_ns=time.time_ns(), step_ns=self.step_ns, **extra)  # fmt: skip
        rq.write_atomic(self.paths.answer(self.key, req.id, self.ctx.rank), a.to_json())

    def _fail(self, req: rq.Request, message: str) -> None:
        log.warning("hyperscope: %s", message)
        self.plan = None
        with contextlib.suppress(Exception):
            self._answer(req, rq.FAILED, message=message)


def _warm_up(cpu_ops: bool) -> None:
    """Import what the capture needs here, off the training thread, before its first step."""
    with contextlib.suppress(Exception):
        import hyperscope.capture.session  # noqa: F401

        if cpu_ops and "torch" in sys.modules:
            import torch.profiler  # noqa: F401


_START: Final = object()

watcher = Watcher(enabled=os.environ.get(WATCH_ENV, "1") != "0")


def _after_fork() -> None:
    """A forked child (a DataLoader worker) has no watcher thread: it starts its own if it steps."""
    global watcher
    watcher = Watcher(enabled=os.environ.get(WATCH_ENV, "1") != "0")


os.register_at_fork(after_in_child=_after_fork)
