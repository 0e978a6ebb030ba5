"""A capture in progress in this process: when to record, what to flush, how to end.

One session per process. The training thread calls it at every step and annotation, so the common
path is a few attribute reads and a list append; the rest (Kineto's results, samples, Parquet) goes
to the writer's thread. Every failure inside is caught here: it is logged once, the capture stops
or carries on without the broken part, and the training never sees an exception from hyperscope.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Final

import duckdb
import pyarrow as pa

from hyperscope.capture.config import ProfilerConfig
from hyperscope.capture.context import DistContext
from hyperscope.capture.writer import CaptureTarget, RankWriter
from hyperscope.schema.events import EVENT_SCHEMA, SORT_KEY, EventKind
from hyperscope.schema.layout import RankMeta
from hyperscope.store.catalog import RankStatus
from hyperscope.store.store import default_home

log = logging.getLogger("hyperscope.capture")

#: Rows of annotations and steps: (kind, name, tid, ts_ns, dur_ns, step).
Mark = tuple[str, str, int, int, int, int]
_CAT: Final = "user_annotation"


class Session:
    def __init__(self, config: ProfilerConfig, ctx: DistContext | None = None) -> None:
        self.config = config
        self.ctx = ctx or DistContext.detect().refined()
        # Ranks of one run must agree on the job without talking: unnamed, it is named after the run.
        self.job = config.job_name(self.ctx.profile_id("")[:8] if self.ctx.world_size > 1 else None)
        self.profile_id = self.ctx.profile_id(self.job)
        self.pid = os.getpid()
        self.step_no = 0
        self.recording = False
        self.finished = False
        self.notes: list[str] = []
        self.dropped_marks = 0
        self._marks: list[Mark] = []
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
        self._sampler: Any = None
        self._writer: RankWriter | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Open the profile and start recording; on any failure, run without capture."""
        home = default_home() if self.config.home is None else self.config.home
        settings = self.config.settings() | {"run_id": self.ctx.run_id}
        target = CaptureTarget(
            home=Path(home).expanduser(),
            job=self.job,
            profile_id=self.profile_id,
            created_ns=self._start_ns,
            settings=settings,
        )
        meta = RankMeta(
            rank=self.ctx.rank,
            node=self.ctx.node,
            world_size=self.ctx.world_size,
            local_rank=self.ctx.local_rank,
            clock="epoch_ns",
            device_properties=_device_properties(),
            distributed_info={"rank": self.ctx.rank, "world_size": self.ctx.world_size},
        )
        self._writer = RankWriter(target, self.ctx, meta)
        self._writer.open()
        try:
            self._start_kineto_backend()
            self._start_sampler()
            self._enter_step(self.step_no)
        except Exception as exc:  # the job must not stay InProgress for a capture that never ran
            self.stop(RankStatus.INCOMPLETE, f"the capture could not start: {exc}")
            raise

    def _start_kineto_backend(self) -> None:
        from hyperscope.capture.torch_backend import KinetoSession, wanted_activities

        activities = wanted_activities(cpu_ops=self.config.records_cpu_ops, device=self.config.device)
        if self.config.device and not activities.cuda:
            self.notes.append("no device activity: CUDA is not available to PyTorch here")
        if not activities.any:
            return
        try:
            self._kineto = KinetoSession(
                activities,
                record_shapes=self.config.record_shapes,
                memory=self.config.memory,
                python_stacks=self.config.python_stacks,
            )
        except Exception as exc:
            self._note(f"no PyTorch profiler activity: {exc}")

    def _start_sampler(self) -> None:
        if self.config.sample_interval_s == 0:
            return
        from hyperscope.capture.sampler import SystemSampler

        writer = self._writer
        assert writer is not None

        def sink(table: pa.Table) -> None:
            writer.submit(lambda: ("samples", table))

        kwargs: dict[str, Any] = {}
        if not self.config.perf_counters:
            kwargs["perf_events"] = ()
        try:
            self._sampler = SystemSampler(
                interval_s=self.config.sample_interval_s,
                rank=self.ctx.rank,
                node=self.ctx.node,
                sink=sink,
                gpus=self.ctx.local_rank == 0,  # one rank per node samples the node's GPUs
                **kwargs,
            )
            self._sampler.start()
        except Exception as exc:
            self._note(f"no system samples: {exc}")
            self._sampler = None

    def stop(self, status: RankStatus = RankStatus.COMPLETED, message: str = "") -> None:
        """End the capture: last flush, sampler stopped, the rank's end recorded."""
        if self.finished:
            return
        self.finished = True
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
            writer.close(status, message)

    # -- the training thread's calls -----------------------------------------------------------

    def step(self) -> None:
        now = time.time_ns()
        if self.recording:
            self._record_step_end(now)
        self.step_no += 1
        self._steps_since_flush += 1
        self._step_start_ns = now
        self._enter_step(self.step_no, now)

    def _record_step_end(self, now: int) -> None:
        self._add(
            (
                EventKind.STEP,
                f"ProfilerStep#{self.step_no}",
                threading.get_native_id(),
                self._step_start_ns,
                now - self._step_start_ns,
                self.step_no,
            )
        )

    def _enter_step(self, step: int, now: int | None = None) -> None:
        now = time.time_ns() if now is None else now
        expired = self._deadline_ns is not None and now >= self._deadline_ns
        last = self.config.last_step
        want = self.config.wants_step(step) and not expired
        since = now - self._last_flush_ns
        due = (
            # every N steps, but not more often than flush_min_gap_s: a flush has fixed costs
            (self._steps_since_flush >= self.config.flush_every_steps and since >= self._min_gap_ns)
            or since >= self.config.flush_every_s * 1e9
            # Kineto's buffers grow with events: bounded by the rate seen in the last window (the
            # first file comes after one step, to learn that rate)
            or (self._kineto is not None and self._steps_since_flush >= 1 and self._events_per_step is None)
            or (self._events_per_step or 0) * self._steps_since_flush >= self.config.max_buffered_events
        )
        if self.recording and (not want or due):
            self._flush(restart=want)
        elif want and not self.recording and self._kineto is not None:
            self._kineto.start()
        self.recording = want
        if expired or (last is not None and step > last):
            self.stop()

    def begin(self, name: str) -> int:
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
            if len(self._marks) >= self.config.max_buffered_events:
                self.dropped_marks += 1
                return
            self._marks.append(mark)

    # -- flushing -------------------------------------------------------------------------------

    def _flush(self, *, restart: bool) -> None:
        writer = self._writer
        if writer is None:
            return
        steps = self._steps_since_flush
        self._steps_since_flush = 0
        self._last_flush_ns = time.time_ns()
        if self._kineto is not None and self._kineto.running:
            from hyperscope.capture import torch_backend

            try:
                # Read here, before Kineto starts again (see KinetoSession.stop); typing and
                # writing the rows happen on the writer's thread.
                raw = torch_backend.kineto_rows(self._kineto.stop())
                self._events_per_step = raw.num_rows / max(steps, 1)
            except Exception as exc:
                self._note(f"PyTorch's profiler failed and was switched off: {exc}")
                self._kineto = None
            else:
                rank, node = self.ctx.rank, self.ctx.node
                writer.submit(lambda: ("events", _typed_events(raw, rank, node)))
            if restart and self._kineto is not None:
                self._kineto.start()
        with self._lock:
            marks, self._marks = self._marks, []
        if marks:
            rank, node, pid = self.ctx.rank, self.ctx.node, self.pid
            writer.submit(lambda: ("events", marks_table(marks, rank=rank, node=node, pid=pid)))

    def _note(self, line: str) -> None:
        if line not in self.notes:
            self.notes.append(line)
            log.warning("hyperscope: %s", line)


_CONNECTIONS = threading.local()


def _typed_events(raw: pa.Table, rank: int, node: str) -> pa.Table:
    from hyperscope.capture.torch_backend import typed_rows

    con = getattr(_CONNECTIONS, "con", None)
    if con is None:  # one small DuckDB per writer thread, kept for the whole run
        con = duckdb.connect(config={"threads": 1, "memory_limit": "128MB"})
        con.execute("SET enable_progress_bar = false")
        _CONNECTIONS.con = con
    return typed_rows(raw, rank=rank, node=node, con=con)


def marks_table(marks: list[Mark], *, rank: int, node: str, pid: int) -> pa.Table:
    """Annotations and steps as rows of the event schema (no Kineto needed)."""
    n = len(marks)
    kinds, names, tids, starts, durs, steps = (list(c) for c in zip(*marks, strict=True))
    columns: dict[str, pa.Array] = {
        "rank": pa.array([rank] * n, pa.int32()),
        "node": pa.array([node] * n, pa.string()),
        "pid": pa.array([pid] * n, pa.int64()),
        "tid": pa.array(tids, pa.int64()),
        "kind": pa.array([str(k) for k in kinds], pa.string()),
        "cat": pa.array([_CAT] * n, pa.string()),
        "ph": pa.array(["X"] * n, pa.string()),
        "name": pa.array(names, pa.string()),
        "ts_ns": pa.array(starts, pa.int64()),
        "dur_ns": pa.array(durs, pa.int64()),
        "args": pa.array([f'{{"step":{s}}}' for s in steps], pa.string()),
    }
    arrays = [columns.get(f.name, pa.nulls(n, f.type)) for f in EVENT_SCHEMA]
    table = pa.Table.from_arrays(arrays, schema=EVENT_SCHEMA)
    return table.sort_by([(k, "ascending") for k in SORT_KEY])


def _device_properties() -> list[dict[str, Any]]:
    """The GPUs this process sees, as Kineto describes them in its traces' ``deviceProperties``."""
    try:
        import torch

        if not torch.cuda.is_available():
            return []
        out = []
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            out.append(
                {
                    "id": i,
                    "name": p.name,
                    "totalGlobalMem": p.total_memory,
                    "computeMajor": p.major,
                    "computeMinor": p.minor,
                    "numSms": p.multi_processor_count,
                }
            )
        return out
    except Exception:
        return []
