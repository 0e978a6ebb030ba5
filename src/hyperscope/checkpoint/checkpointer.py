"""Save training state so that a job resumed after a failure starts from the last valid step.

One process: the state goes through ``torch.save`` into a checkpoint directory that appears only
whole (see ``_layout``). Asynchronous saves block the training thread only for the copy to host
memory; serialization, checksums, fsync and the rename happen on one background thread, one save
at a time. Several processes (``torch.distributed`` initialised with more than one rank): the
state goes through ``torch.distributed.checkpoint`` (each rank writes its shards), and rank 0
writes the manifest and renames once every rank is done; those saves are synchronous.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hyperscope.checkpoint import _layout
from hyperscope.checkpoint._snapshot import host_copy
from hyperscope.errors import CheckpointError, UsageError
from hyperscope.recovery import heartbeat

log = logging.getLogger("hyperscope.checkpoint")

#: Where checkpoints go when no directory is given (set by `hyperscope submit` on a cluster).
DIRECTORY_ENV = "HYPERSCOPE_CHECKPOINT_DIR"


@dataclass(frozen=True, slots=True)
class Loaded:
    """A checkpoint read back: its step, its directory and the state (filled in place for DCP)."""

    step: int
    path: Path
    state: Any


def _world() -> tuple[int, int]:
    try:
        import torch.distributed as dist
    except ImportError:
        return 0, 1
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class Checkpointer:
    """Checkpoints of one training run in ``directory``, keeping the newest ``keep``."""

    def __init__(
        self, directory: str | os.PathLike[str] | None = None, *, keep: int = 3, asynchronous: bool = False
    ) -> None:
        chosen = directory if directory is not None else os.environ.get(DIRECTORY_ENV)
        if not chosen:
            raise UsageError(f"no checkpoint directory: pass one, or set {DIRECTORY_ENV}")
        if keep < 1:
            raise UsageError(f"keep={keep}: expected at least 1 checkpoint to keep")
        self.directory = Path(chosen).expanduser()
        self.keep = keep
        self.asynchronous = asynchronous
        self._pool: ThreadPoolExecutor | None = None
        self._pending: Future[Path] | None = None
        self._staging: Any = None  # the last snapshot: host buffers the next one reuses
        self._lock = threading.Lock()

    # -- saving --------------------------------------------------------------------------------

    def save(self, state: Any, step: int, **extra: Any) -> Future[Path]:
        """Save ``state`` as ``step``; the future's result is the checkpoint's directory.

        Synchronous saves return a future that is already done. An asynchronous save first waits
        for the previous one (at most one copy of the state waits in memory) and raises its error,
        if it failed, so a failing disk is never silent.
        """
        if step < 0:
            raise UsageError(f"step={step}: expected a non-negative training step")
        # a long save is progress too (the agent must not call it a hang), but not a step: counted
        # as one, it made a window of a millisecond per step and its rank's peers "stragglers"
        heartbeat.alive()
        rank, world = _world()
        if world > 1:
            done: Future[Path] = Future()
            done.set_result(self._save_distributed(state, step, rank, world, extra))
            return done
        self.wait()
        if not self.asynchronous:
            done = Future()
            done.set_result(self._write(state, step, extra))
            return done
        # The only part the training thread waits for; the previous snapshot is written by now,
        # so its buffers can take this one.
        snapshot = host_copy(state, reuse=self._staging)
        self._staging = snapshot
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hyperscope-ckpt")
            self._pending = self._pool.submit(self._write, snapshot, step, extra)
            return self._pending

    def wait(self) -> Path | None:
        """Block until the save in flight is on disk; raise its error if it failed."""
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is None:
            return None
        return pending.result()

    def close(self) -> None:
        try:
            self.wait()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
            self._staging = None

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self, state: Any, step: int, extra: dict[str, Any]) -> Path:
        import torch

        t0 = time.perf_counter()
        work, final = _layout.tmp_dir(self.directory, step), _layout.step_dir(self.directory, step)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
            state_file = work / _layout.STATE_FILE
            # torch.save to a path takes PyTorch's own C++ writer; through a Python file object it
            # went 3-4x slower (measured), more than reading the file back for its checksum costs.
            torch.save(state, str(state_file))
            with state_file.open("rb+") as fh:
                os.fsync(fh.fileno())
            size, sha = _layout.file_digest(state_file)
            manifest = _layout.Manifest(
                step=step,
                format="torch.save",
                created_ns=time.time_ns(),
                world_size=1,
                files={_layout.STATE_FILE: (size, sha)},
                extra=extra,
            )
            _layout.finish(work, manifest, final)
        except (OSError, RuntimeError) as exc:
            shutil.rmtree(work, ignore_errors=True)  # never leave a half checkpoint behind
            raise CheckpointError(f"{work}: checkpoint of step {step} not written: {exc}") from exc
        removed = _layout.prune(self.directory, self.keep)
        log.info(
            "hyperscope: checkpoint %s written in %.2f s (%s MB)%s",
            final,
            time.perf_counter() - t0,
            f"{size / 1e6:,.1f}",
            f"; removed {', '.join(p.name for p in removed)}" if removed else "",
        )
        return final

    def _save_distributed(self, state: Any, step: int, rank: int, world: int, extra: dict[str, Any]) -> Path:
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp

        work, final = _layout.tmp_dir(self.directory, step), _layout.step_dir(self.directory, step)
        if rank == 0:
            self.directory.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
        dist.barrier()
        dcp.state_dict_saver.save(state, checkpoint_id=str(work))
        dist.barrier()  # every rank's shards are written
        if rank == 0:
            files = {
                str(p.relative_to(work)): _layout.file_digest(p)
                for p in sorted(work.rglob("*"))
                if p.is_file()
            }
            manifest = _layout.Manifest(step, "dcp", time.time_ns(), world, files, extra)
            _layout.finish(work, manifest, final)
            _layout.prune(self.directory, self.keep)
        dist.barrier()  # nobody reads or saves again before the rename
        return final

    # -- loading -------------------------------------------------------------------------------

    def load_latest(
        self, state: Any = None, *, map_location: Any = "cpu", weights_only: bool = True
    ) -> Loaded | None:
        """The newest intact checkpoint, or ``None`` when there is none.

        Incomplete or corrupt ones are skipped with a warning that names the file and the problem,
        and the one before is tried. A sharded (``dcp``) checkpoint is loaded into ``state`` in
        place (pass the model's and optimizer's state dicts); a ``torch.save`` one is returned.
        """
        import torch

        for step, path in _layout.steps_on_disk(self.directory):
            try:
                manifest = _layout.validate(path)
                if manifest.format == "dcp":
                    if state is None:
                        raise UsageError(f"{path}: a sharded checkpoint loads into a state: pass state=")
                    import torch.distributed.checkpoint as dcp

                    dcp.state_dict_loader.load(state, checkpoint_id=str(path))
                    return Loaded(step, path, state)
                loaded = torch.load(
                    path / _layout.STATE_FILE, map_location=map_location, weights_only=weights_only
                )
                return Loaded(step, path, loaded)
            except CheckpointError as exc:
                message = f"hyperscope: skipping checkpoint of step {step}: {exc}; trying the one before"
                log.warning(message)
                warnings.warn(message, RuntimeWarning, stacklevel=2)
        return None

    def steps(self) -> list[int]:
        """Steps of the complete checkpoints on disk, newest first (not checksummed)."""
        return [s for s, p in _layout.steps_on_disk(self.directory) if (p / _layout.COMPLETE).is_file()]
