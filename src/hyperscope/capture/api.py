"""The calls a training script makes: start, stop, annotate, mark steps.

They mirror SageMaker Profiler's Python API. When no capture runs, each is a global read and a
return, so the calls can stay in production code. None of them raises because of the profiler: a
failing capture logs once and steps aside.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import ParamSpec, TypeVar

from hyperscope.capture import ondemand
from hyperscope.capture.config import ENV_AUTOSTART, ProfilerConfig
from hyperscope.capture.session import Session
from hyperscope.recovery import heartbeat
from hyperscope.store.catalog import RankStatus

log = logging.getLogger("hyperscope.capture")

P = ParamSpec("P")
R = TypeVar("R")

_session: Session | None = None
_guard = threading.Lock()
_hooks_installed = False
_unhandled: list[BaseException] = []
_manual_steps = False
_auto_steps = False


def start_profiling(config: ProfilerConfig | None = None) -> bool:
    """Start capturing this process; True when capture runs.

    Without a config, the ``HYPERSCOPE_*`` environment variables decide (all defaults when unset).
    A second call while a capture runs changes nothing. Errors in the config raise ``UsageError``
    (they are the caller's to fix); anything else that goes wrong leaves training unprofiled, with
    a warning in the log. Under ``hyperscope profile`` the launcher's job and store win over the
    config's (ranks started by ``mp.spawn`` included): the run is one job, the operator's.
    """
    if config is None:
        config = ProfilerConfig.from_env()
    started = _start(launcher_identity(config), deferred=False)
    if started:  # the on-demand watch would start at the first step(): it starts here instead
        ondemand.watcher.start_early()
    return started


def start_at_startup(config: ProfilerConfig) -> bool:
    """The launcher's capture, begun at interpreter start: it opens once the training begins."""
    return _start(config, deferred=True)


def launcher_identity(config: ProfilerConfig, environ: Mapping[str, str] | None = None) -> ProfilerConfig:
    """``config`` with the job and store of the ``hyperscope profile`` this process runs under.

    The launcher names the job in ``HYPERSCOPE_JOB`` and marks its processes (and their children)
    with ``HYPERSCOPE_AUTOSTART``; a script that calls ``start_profiling`` with its own config
    would otherwise record into a second job, leaving the launcher's empty.
    """
    env = os.environ if environ is None else environ
    job = env.get("HYPERSCOPE_JOB")
    if env.get(ENV_AUTOSTART) is None or not job:
        return config
    return dataclasses.replace(config, job=job, home=env.get("HYPERSCOPE_HOME") or config.home)


def _start(config: ProfilerConfig, *, deferred: bool) -> bool:
    global _session
    with _guard:
        running = _session
        if running is not None and not running.finished:
            if running.waiting and not deferred:
                # The script starts profiling itself under the launcher: its settings, the
                # launcher's job; the training begins here.
                running.config = config
                try:
                    running.training_begins()
                except Exception as exc:
                    log.warning("hyperscope: profiling is off for this run: %s", exc)
                    _session = None
                    with contextlib.suppress(Exception):
                        running.stop(RankStatus.INCOMPLETE, f"the capture could not start: {exc}")
                    return False
            return True
        session = Session(config, deferred=deferred)
        try:
            session.start()
        except Exception as exc:
            log.warning("hyperscope: profiling is off for this run: %s", exc)
            _session = None
            return False
        _session = session
        _install_exit_hooks()
    return True


def stop_profiling() -> None:
    """Flush everything captured, end the capture and record it as completed."""
    global _session
    with _guard:
        session, _session = _session, None
    if session is None:
        return
    try:
        if _unhandled and isinstance(_unhandled[-1], KeyboardInterrupt):  # Ctrl+C: a stop asked for
            session.stop(RankStatus.STOPPED, "the script was stopped by SIGINT (KeyboardInterrupt)")
        elif _unhandled:
            exc = _unhandled[-1]
            session.stop(RankStatus.FAILED, f"the script raised {type(exc).__name__}: {exc}")
        else:
            session.stop()
    except Exception as exc:  # pragma: no cover - stop() catches its own; this is the last net
        log.warning("hyperscope: ending the capture failed: %s", exc)


def is_profiling() -> bool:
    return _session is not None and _session.recording


def training_begins() -> None:
    """A sign of training (the first model forward, optimizer step, Keras batch, ...): under the
    launcher, start-up ends and step 0 begins here. Otherwise nothing."""
    session = _session
    if session is None or not session.waiting:
        return
    try:
        session.training_begins()
    except Exception as exc:
        _give_up(session, exc)


def step() -> None:
    """Mark the end of a training step (and the start of the next one).

    Call it outside any ``torch.profiler.record_function`` block: a step may restart PyTorch's
    profiler, and a record_function still open across that restart ends in freed memory.

    It is also where ``hyperscope capture`` reaches a running job: one counter and one attribute
    test here (the request itself is looked for on a thread of its own, ``capture.ondemand``).
    """
    if heartbeat._default is not None:  # progress for the agent's hang detection
        heartbeat._default.beat()
    watch = ondemand.watcher
    watch.steps += 1
    if watch.armed is not None or not _manual_steps:  # the first step, or a capture begins
        _first_or_armed_step(watch)
        return
    session = _session
    if session is None or session.finished:
        return
    try:
        session.step()
    except Exception as exc:
        _give_up(session, exc)


def _first_or_armed_step(watch: ondemand.Watcher) -> None:
    """step() off its common path: the script's first mark, or the step() where the watcher
    starts its thread or an on-demand capture (after the step's own end is recorded)."""
    if not _step():
        watch.steps -= 1  # it only moved the end of the step the optimizer counted already
    if watch.armed is not None:
        watch.service()


def _step() -> bool:
    """False where this step() only moves the end of a step the optimizer already counted."""
    global _manual_steps
    if not _manual_steps:
        _manual_steps = True
        if _auto_steps:
            # Under the launcher the optimizer's step() closed this step a moment ago; from now on
            # the script's own marks count: that step ends here, and this is not a second one.
            session = _session
            if session is not None and not session.finished:
                try:
                    session.retime_step()
                except Exception as exc:
                    _give_up(session, exc)
            return False
    session = _session
    if session is None or session.finished:
        return True
    try:
        session.step()
    except Exception as exc:
        _give_up(session, exc)
    return True


def optimizer_step() -> None:
    """A step seen by the launcher's optimizer hook; ignored once the script marks its own steps."""
    if not _manual_steps:
        if heartbeat._default is not None:
            heartbeat._default.beat()
        _optimizer_step()
        watch = ondemand.watcher
        watch.steps += 1
        if watch.armed is not None:
            watch.service()


def _optimizer_step() -> None:
    global _auto_steps
    session = _session
    if _manual_steps or session is None or session.finished:
        return
    _auto_steps = True
    try:
        session.step(provisional=True)
    except Exception as exc:
        _give_up(session, exc)


def annotation_begin(name: str) -> int:
    """Open an annotation for code that is not one block; pass the handle to ``annotation_end``."""
    session = _session
    if session is None or not (session.recording or session.waiting):
        return 0
    try:
        return session.begin(str(name))
    except Exception as exc:
        _give_up(session, exc)
        return 0


def annotation_end(handle: int) -> None:
    session = _session
    if session is None or not handle:
        return
    try:
        session.end(handle)
    except Exception as exc:
        _give_up(session, exc)


class annotate:
    """Time a block (``with annotate("forward"):``) or every call of a function (``@annotate("x")``)."""

    __slots__ = ("_handles", "name")

    def __init__(self, name: str) -> None:
        self.name = str(name)
        self._handles: list[int] = []

    def __enter__(self) -> annotate:
        self._handles.append(annotation_begin(self.name) if _session is not None else 0)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        handle = self._handles.pop() if self._handles else 0
        if handle:
            annotation_end(handle)

    def __call__(self, func: Callable[P, R]) -> Callable[P, R]:
        name = self.name

        @functools.wraps(func)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            if _session is None:
                return func(*args, **kwargs)
            handle = annotation_begin(name)
            try:
                return func(*args, **kwargs)
            finally:
                if handle:
                    annotation_end(handle)

        return wrapper


def _give_up(session: Session, exc: BaseException) -> None:
    """A bug of ours during a step or an annotation: end the capture, keep the training."""
    global _session
    log.warning("hyperscope: profiling stopped after an internal error: %r", exc)
    with _guard:
        if _session is session:
            _session = None
    with contextlib.suppress(Exception):  # the last net: nothing may reach the training
        session.stop(RankStatus.INCOMPLETE, f"capture stopped early after an internal error: {exc!r}")


def _install_exit_hooks() -> None:
    """Record an uncaught exception (the job then shows Failed) and end the capture at exit."""
    global _hooks_installed
    if _hooks_installed:
        return
    _hooks_installed = True
    previous = sys.excepthook

    def excepthook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        _unhandled.append(value)
        previous(kind, value, tb)

    sys.excepthook = excepthook
    atexit.register(stop_profiling)
