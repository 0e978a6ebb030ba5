"""Who this process is in a distributed run: rank, local rank, world size, node, and the run.

Launchers say it in the environment before any process group exists (torchrun: ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``; Slurm: ``SLURM_PROCID``, ``SLURM_LOCALID``, ``SLURM_NTASKS``; Open
MPI: ``OMPI_COMM_WORLD_*``), so capture can name its files from the first step. A process group
initialised later only confirms or fills in what the environment left out.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

_RANK_VARS: Final = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
_LOCAL_VARS: Final = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
_WORLD_VARS: Final = ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")


@dataclass(frozen=True, slots=True)
class DistContext:
    rank: int
    local_rank: int
    world_size: int
    node: str
    #: the same in every process of one run, different between runs: names the shared profile
    run_id: str

    @classmethod
    def detect(cls, environ: Mapping[str, str] | None = None) -> DistContext:
        env = os.environ if environ is None else environ
        rank = _first_int(env, _RANK_VARS)
        world = _first_int(env, _WORLD_VARS)
        local = _first_int(env, _LOCAL_VARS)
        node = env.get("SLURMD_NODENAME") or socket.gethostname()
        return cls(
            rank=rank if rank is not None else 0,
            local_rank=local if local is not None else 0,
            world_size=max(world or 1, (rank or 0) + 1),
            node=node,
            run_id=_run_id(env, distributed=rank is not None),
        )

    def refined(self) -> DistContext:
        """This context corrected by an initialised ``torch.distributed`` process group, if any.

        A script that starts profiling after ``init_process_group`` (ranks started by
        ``mp.spawn`` carry no rank in their environment) is named right this way.
        """
        dist: Any = sys.modules.get("torch.distributed")  # never import torch for this
        try:
            if dist is not None and dist.is_available() and dist.is_initialized():
                return replace(self, rank=dist.get_rank(), world_size=dist.get_world_size())
        except Exception:  # a broken or absent torch must not stop capture
            pass
        return self

    def profile_id(self, job: str) -> str:
        """The profile every rank of this run writes into, without talking to the others."""
        return hashlib.sha256(f"{job}\0{self.run_id}".encode()).hexdigest()[:16]


def _first_int(env: Mapping[str, str], names: tuple[str, ...]) -> int | None:
    for name in names:
        text = env.get(name, "").strip()
        if text.isdigit():
            return int(text)
    return None


def _run_id(env: Mapping[str, str], *, distributed: bool) -> str:
    """The most specific id of this run that every rank can read for itself.

    ``HYPERSCOPE_RUN_ID`` (set by ``hyperscope profile``) wins; then Slurm's job and step; then
    torchrun's rendezvous id, unless it is torchrun's default "none"; then the launching parent
    process (torchrun's agent: shared by the ranks of one node); then this process alone.
    """
    if env.get("HYPERSCOPE_RUN_ID"):
        return env["HYPERSCOPE_RUN_ID"]
    if env.get("SLURM_JOB_ID") and distributed:
        return f"slurm-{env['SLURM_JOB_ID']}.{env.get('SLURM_STEP_ID', '0')}"
    if env.get("TORCHELASTIC_RUN_ID", "none") not in ("", "none"):
        return f"torchelastic-{env['TORCHELASTIC_RUN_ID']}"
    pid = os.getppid() if distributed else os.getpid()
    return f"{socket.gethostname()}-{pid}-{_start_time(pid)}"


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot: with the pid, unique on this host."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "0"
