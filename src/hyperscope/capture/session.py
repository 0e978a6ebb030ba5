"""A capture in progress in this process: when to record, what to flush, how to end.

One session per process. The training thread calls it at every step and annotation, so the common
path is a few attribute reads and a list append; the rest (Kineto's results, samples, Parquet) goes
to the writer's thread. Every failure inside is caught here: it is logged once, the capture stops
or carries on without the broken part, and the training never sees an exception from hyperscope.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from hyperscope.capture import recorders
from hyperscope.capture.config import ProfilerConfig
from hyperscope.capture.context import DistContext
from hyperscope.capture.parts import (
    Mark,
    marks_table,
    one_part,
    startup_table,
    step_marks,
    typed_events,
    typed_xspace_events,
)
from hyperscope.capture.writer import CaptureTarget, RankWriter
from hyperscope.schema.events import EVENT_SCHEMA, EventKind
from hyperscope.schema.layout import RankMeta
from hyperscope.store.catalog import RankStatus
from hyperscope.store.home import default_home

log = logging.getLogger("hyperscope.capture")


class Session:
    """One process's capture.

    ``deferred`` (the launcher's sessions, begun at interpreter start) waits for the training to
    begin, its first step, annotation or model forward, before it opens anything: start-up
    (imports, data loading, model building) is then one mark of its own, not step 0, and a process
    that never trains (the parent that ``mp.spawn`` starts the ranks from) is not a rank at all.
    """

    def __init__(
        self, config: ProfilerConfig, ctx: DistContext | None = None, *, deferred: bool = False
    ) -> None:
        self.config = config  # also sets what step() reads of it (the property below)
        self._given_ctx = ctx
        self._identify()
        self.pid = os.getpid()
        #: under the launcher, before the training began: nothing opened, nothing recorded yet
        self.waiting = deferred
        self.startup_ns: int | None = None
        self.step_no = 0
        self.recording = False
        self.finished = False
        self.notes: list[str] = []
        self.dropped_marks = 0
        self._marks: list[Mark] = []
        #: step() calls left that may take the fast path (nothing but a clock read and an append:
        #: no flush, no stop, no change of what is recorded can come before) and until when
        self._fast_left = 0
        self._fast_until_ns = 0
        #: step ends taken on the fast path, not yet marks: (first step, its start, thread, ends)
        self._fast_ends: list[int] = []
        self._fast_from: tuple[int, int, int] = (0, 0, 0)
        self._step_runs: list[tuple[int, int, int, list[int]]] = []
        self._lock = threading.Lock()
        self._open: dict[int, tuple[str, int, int]] = {}
        self._next_handle = 1
        self._start_ns = time.time_ns()
        self._step_start_ns = self._start_ns
        self._deadline_ns = (
            self._start_ns + int(config.duration_s * 1e9) if config.duration_s is not None else None
        )
        self._steps_since_flush = 0
        self._last_flush_ns = self._start_ns
        self._events_per_step: float | None = None
        self._min_gap_ns = int(config.flush_min_gap_s * 1e9)
        self._kineto: Any = None
        #: a framework profiler's window that failed to decode on the writer's thread
        self._backend_error: str | None = None
        self._startup_mark: tuple[int, int] | None = None
        self._held: Mark | None = None
        self._provisional_seen = False
        self._own_events = 0  # rows of hyperscope's own (the start-up mark), not the training's
        self._sampler: Any = None
        self._writer: RankWriter | None = None
        #: an on-demand capture of some ranks of a run: the profile is complete with these
        self.ranks_expected: int | None = None
        #: stop() has returned: the rank's end is in the catalog (``finished`` is set as it begins)
        self.closed = False

    @property
    def config(self) -> ProfilerConfig:
        return self._config

    @config.setter
    def config(self, config: ProfilerConfig) -> None:
        # step() runs once per training step, on the training thread, right after the step's own
        # work has evicted it from the caches: what it needs of the config is worked out here,
        # once (a list's membership and any max() are linear, a range's max() walks it).
        self._config = config
        self._fast_left = 0  # what the fast path assumed of the config is worked out again
        steps = config.steps
        self._wanted: range | frozenset[int] | None = (
            None if steps is None else steps if isinstance(steps, range) else frozenset(steps)
        )
        self._last_step = config.last_step
        self._max_marks = config.max_buffered_events

    def _identify(self) -> None:
        self.ctx = self._given_ctx or DistContext.detect().refined()
        # Ranks of one run must agree on the job without talking: unnamed, it is named after the run.
        self.job = self.config.job_name(self.ctx.profile_id("")[:8] if self.ctx.world_size > 1 else None)
        self.profile_id = self.ctx.profile_id(self.job)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Open the profile and start recording (a deferred session: once the training begins);
        on any failure, run without capture."""
        if not self.waiting:
            self._open_capture()

    def training_begins(self) -> None:
        """The first sign of training in a deferred session: start-up ends, step 0 starts now."""
        if not self.waiting or self.finished:
            return
        self.waiting = False
        now = time.time_ns()
        self.startup_ns = now - self._start_ns
        # Identity again: a rank started by mp.spawn may have joined its process group since.
        self._identify()
        self._start_ns = self._step_start_ns = self._last_flush_ns = now
        self.notes.append(f"start-up (interpreter start to training) took {self.startup_ns / 1e9:.2f} s")
        self._startup_mark = (now, self.startup_ns)
        self._open_capture()

    def _open_capture(self) -> None:
        home = default_home() if self.config.home is None else self.config.home
        settings = self.config.settings() | {"run_id": self.ctx.run_id}
        target = CaptureTarget(
            home=Path(home).expanduser(),
            job=self.job,
            profile_id=self.profile_id,
            created_ns=self._start_ns,
            settings=settings,
            ranks_expected=self.ranks_expected,
        )
        meta = RankMeta(
            rank=self.ctx.rank,
            node=self.ctx.node,
            world_size=self.ctx.world_size,
            local_rank=self.ctx.local_rank,
            clock="epoch_ns",
            device_properties=recorders.device_properties(),
            distributed_info={"rank": self.ctx.rank, "world_size": self.ctx.world_size},
        )
        self._writer = RankWriter(target, self.ctx, meta)
        self._writer.open()
        try:
            self._kineto = recorders.framework_profiler(self.config, self.notes, self._note)
            self._sampler = recorders.system_sampler(self.config, self.ctx, self._writer, self._note)
            if self.config.duration_s is not None:  # from when recording starts, not before opening
                self._deadline_ns = time.time_ns() + int(self.config.duration_s * 1e9)
            self._enter_step(self.step_no)
        except Exception as exc:  # the job must not stay InProgress for a capture that never ran
            self.stop(RankStatus.INCOMPLETE, f"the capture could not start: {exc}")
            raise

    def stop(self, status: RankStatus = RankStatus.COMPLETED, message: str = "") -> None:
        """End the capture: last flush, sampler stopped, the rank's end recorded."""
        if self.finished:
            return
        self.finished = True
        self._fast_left = 0
        try:
            self._stop(status, message)
        finally:
            self.closed = True

    def _stop(self, status: RankStatus, message: str) -> None:
        if self.waiting:  # the process never trained: it is no rank, and leaves nothing behind
            return
        self._commit_held()
        try:  # the time since the last step() is not a step: nothing says it finished one
            self._flush(restart=False)
        except Exception as exc:
            self._note(f"the last flush failed: {exc}")
        self.recording = False
        if self._sampler is not None:
            try:
                self._sampler.stop()
                self.notes.extend(self._sampler.notes)
            except Exception as exc:
                self._note(f"the system sampler failed to stop: {exc}")
        writer = self._writer
        if writer is not None:
            writer.meta.notes = list(dict.fromkeys(self.notes))
            if self.dropped_marks:
                writer.meta.notes.append(f"{self.dropped_marks} annotations dropped (max_buffered_events)")
            writer.close(status, message, empty_reason=self._why_empty(), own_events=self._own_events)

    # -- the training thread's calls -----------------------------------------------------------

    def _why_empty(self) -> str:
        """Why a rank that ends with no events has none, for the job's message."""
        first = None if self.config.steps is None else min(self.config.steps)
        if first is not None and self.step_no < first:
            return (f"the run ended in step {self.step_no}, before the first step to record "
                    f"({first}, from steps={self.config.settings()['steps']})")  # fmt: skip
        return "the run marked no step and no annotation, and PyTorch recorded no device activity"

    def step(self, *, provisional: bool = False) -> None:
        """End the current step. The first ``provisional`` end (the launcher's optimizer hook) is
        held back, and no file written, until the next step, so that a script's own first
        ``step()`` can still move it; later ones are final (the script marks no steps itself)."""
        # The fast path: a clock read and an append. Right after a training step the caches are
        # cold, and each line of Python here costs microseconds (a lock and a tuple: ~20 us after
        # a 3 ms JAX step); whether anything else must happen is worked out in the slow path below
        # for as many steps ahead as it can be known.
        if self._fast_left and not provisional:
            now = time.time_ns()
            if now < self._fast_until_ns:
                self._fast_left -= 1
                self._fast_ends.append(now)
                self.step_no += 1
                return
        self._settle()
        if self.waiting:  # the first step() ends start-up; the steps count from here
            self.training_begins()
            return
        if provisional:
            provisional, self._provisional_seen = not self._provisional_seen, True
        now = time.time_ns()
        if self._held is not None:
            self._commit_held()
        if self.recording:
            if provisional:
                self._record_step_end(now, hold=True)
            else:
                self._record_step_end(now)
        self.step_no += 1
        self._steps_since_flush += 1
        self._step_start_ns = now
        self._enter_step(self.step_no, now, may_flush=not provisional)
        if not provisional:
            self._plan_fast_path(now)

    def _plan_fast_path(self, now: int) -> None:
        """How many of the next step() calls can only record their end, and until when.

        The conditions are ``_enter_step``'s, solved for the steps and time ahead: the same steps
        are recorded and the same flushes happen as if each step() took the slow path.
        """
        self._fast_left = 0
        if not self.recording or self.finished or self.waiting or self._held is not None:
            return
        wanted, step, config = self._wanted, self.step_no, self.config
        if wanted is None:
            left = 1 << 62
        elif isinstance(wanted, range) and wanted.step == 1:
            left = wanted.stop - 1 - step  # steps step+1 .. stop-1 are recorded, stop ends it
        else:
            return
        if self._first_window_short and self._events_per_step is None:
            return  # the first window flushes after one step, to learn the events' rate
        if self._events_per_step:
            fit = int(config.max_buffered_events / self._events_per_step)
            left = min(left, fit - self._steps_since_flush - 1)
        with self._lock:
            left = min(left, self._max_marks - len(self._marks) - self._steps_in_runs() - 1)
        until = self._last_flush_ns + int(config.flush_every_s * 1e9)
        if self._deadline_ns is not None:
            until = min(until, self._deadline_ns)
        by_count = config.flush_every_steps - 1 - self._steps_since_flush
        if by_count > 0:
            left = min(left, by_count)
        else:  # enough steps for a flush: it waits for flush_min_gap_s after the last one
            until = min(until, self._last_flush_ns + self._min_gap_ns)
        if left > 0 and now < until:
            self._fast_left, self._fast_until_ns = left, until
            self._fast_from = (step, now, threading.get_native_id())

    @property
    def _first_window_short(self) -> bool:
        """Whether the first window of the framework's profiler ends after one step (Kineto's)."""
        return self._kineto is not None and not self._kineto.rows_on_writer

    def _steps_in_runs(self) -> int:
        return sum(len(ends) for *_, ends in self._step_runs)

    def _settle(self) -> None:
        """The fast path's step ends as a run of steps, and the counters they moved."""
        ends = self._fast_ends
        if not ends:
            return
        self._fast_ends = []
        self._fast_left = 0
        first, start, tid = self._fast_from
        with self._lock:
            self._step_runs.append((first, start, tid, ends))
        self._steps_since_flush += len(ends)
        self._step_start_ns = ends[-1]

    def _record_step_end(self, now: int, *, hold: bool = False) -> None:
        mark = (EventKind.STEP, f"ProfilerStep#{self.step_no}", threading.get_native_id(),
                self._step_start_ns, now - self._step_start_ns, self.step_no)  # fmt: skip
        if hold:
            self._held = mark
        else:
            self._add(mark)

    def _commit_held(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            self._add(held)

    def retime_step(self) -> None:
        """The script marks its own steps from now on: the step the optimizer's hook ended a moment
        ago ends here instead, where the script says, and no empty step comes between."""
        self._settle()
        now = time.time_ns()
        held, self._held = self._held, None
        if held is not None:
            kind, name, tid, start, _, step = held
            self._add((kind, name, tid, start, now - start, step))
        self._step_start_ns = now

    def _enter_step(self, step: int, now: int | None = None, *, may_flush: bool = True) -> None:
        now = time.time_ns() if now is None else now
        expired = self._deadline_ns is not None and now >= self._deadline_ns
        last = self._last_step
        want = (self._wanted is None or step in self._wanted) and not expired
        since = now - self._last_flush_ns
        due = (
            # every N steps, but not more often than flush_min_gap_s: a flush has fixed costs
            (self._steps_since_flush >= self.config.flush_every_steps and since >= self._min_gap_ns)
            or since >= self.config.flush_every_s * 1e9
            # Kineto's buffers grow with events: bounded by the rate seen in the last window (the
            # first file comes after one step, to learn that rate; not with TF's and JAX's
            # profilers, whose restart costs 5-150 ms of the training thread: their first window
            # ends at the first flush the steps and seconds call for)
            or (self._first_window_short and self._steps_since_flush >= 1 and self._events_per_step is None)
            or (self._events_per_step or 0) * self._steps_since_flush >= self.config.max_buffered_events
        )
        if self.recording and (not want or (due and may_flush)):
            self._flush(restart=want)
        elif want and not self.recording and self._kineto is not None:
            self._kineto.start()
        self.recording = want
        if expired or (last is not None and step > last):
            self.stop()

    def begin(self, name: str) -> int:
        if self.waiting:
            self.training_begins()
        if not self.recording:
            return 0
        with self._lock:
            handle = self._next_handle
            self._next_handle += 1
        self._open[handle] = (name, threading.get_native_id(), time.time_ns())
        return handle

    def end(self, handle: int) -> None:
        opened = self._open.pop(handle, None)
        if opened is None:
            return
        name, tid, start = opened
        self._add((EventKind.ANNOTATION, name, tid, start, time.time_ns() - start, self.step_no))

    def _add(self, mark: Mark) -> None:
        with self._lock:  # annotations may come from any thread; a flush swaps the list
            if len(self._marks) >= self._max_marks:
                self.dropped_marks += 1
                return
            self._marks.append(mark)

    # -- flushing -------------------------------------------------------------------------------

    def _flush(self, *, restart: bool) -> None:
        writer = self._writer
        if writer is None:
            return
        self._settle()
        steps = self._steps_since_flush
        self._steps_since_flush = 0
        self._last_flush_ns = time.time_ns()
        # One part per flush: the framework's rows, the start-up mark and the steps and
        # annotations together, since a part's fixed costs (a Parquet footer of ~4 KB, the rank's
        # metadata and the catalog rewritten) are paid per file, on the writer's thread.
        rank, node, pid = self.ctx.rank, self.ctx.node, self.pid
        parts: list[Callable[[], pa.Table]] = []
        if self._backend_error is not None and self._kineto is not None:  # seen by the writer
            self._note(f"the framework's profiler failed and was switched off: {self._backend_error}")
            backend, self._kineto = self._kineto, None
            if backend.running:
                with contextlib.suppress(Exception):
                    backend.discard(backend.stop())
        if self._kineto is not None and self._kineto.running:
            try:
                result = self._kineto.stop()
                if self._kineto.rows_on_writer:
                    # TF's and JAX's XSpace is a file by now: decoding it is the writer's work,
                    # off the training thread (it took most of a cpu_ops flush on short steps)
                    parts.append(self._decoder(self._kineto, result, steps))
                    if self._events_per_step is None:  # the rate is learned once the writer has read it
                        self._events_per_step = 0.0
                else:
                    # Read here, before Kineto starts again (see KinetoSession.stop); typing and
                    # writing the rows happen on the writer's thread.
                    raw = self._kineto.rows(result)
                    self._events_per_step = raw.num_rows / max(steps, 1)
                    parts.append(lambda: typed_events(raw, rank, node))
            except Exception as exc:
                self._note(f"the framework's profiler failed and was switched off: {exc}")
                self._kineto = None
            if restart and self._kineto is not None:
                self._kineto.start()
        with self._lock:
            marks, self._marks = self._marks, []
            runs, self._step_runs = self._step_runs, []
        if self._startup_mark is not None:
            at, took = self._startup_mark
            self._startup_mark = None
            self._own_events += 1
            parts.append(lambda: startup_table(at, took, rank=rank, node=node, pid=pid))
        if marks or runs:
            parts.append(lambda: marks_table(marks + step_marks(runs), rank=rank, node=node, pid=pid))
        if parts:
            writer.submit(lambda: ("events", one_part([make() for make in parts])))

    def _decoder(self, backend: Any, result: Any, steps: int) -> Callable[[], pa.Table]:
        """The writer's work for a window whose rows are read there: a failure switches the
        framework's profiler off at the next flush, and the steps and annotations go on."""
        rank, node = self.ctx.rank, self.ctx.node

        def decode() -> pa.Table:
            try:
                raw = backend.rows(result)
            except Exception as exc:
                self._backend_error = str(exc)
                return EVENT_SCHEMA.empty_table()
            self._events_per_step = raw.num_rows / max(steps, 1)
            return typed_xspace_events(raw, rank, node)

        return decode

    def _note(self, line: str) -> None:
        if line not in self.notes:
            self.notes.append(line)
            log.warning("hyperscope: %s", line)
