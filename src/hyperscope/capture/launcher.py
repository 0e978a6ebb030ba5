"""``hyperscope profile -- CMD``: run a training command with every rank profiled, unmodified.

The command runs as a child with the capture settings in ``HYPERSCOPE_*`` variables and a
``sitecustomize`` on PYTHONPATH that starts the capture in each Python process (torchrun passes
both on to its workers). The launcher stays to forward signals and to settle the job from the exit
code: a rank killed before it could say so itself is recorded as failed here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType

from hyperscope.capture.autostart import ENV_AUTOSTART
from hyperscope.capture.config import ProfilerConfig
from hyperscope.capture.context import DistContext
from hyperscope.errors import HyperscopeError, JobNotFound, UsageError
from hyperscope.schema.layout import CATALOG_FILE
from hyperscope.store.catalog import Catalog, Job, RankStatus
from hyperscope.store.store import Store, default_home

BOOT_DIR = Path(__file__).parent / "_boot"


@dataclass(frozen=True, slots=True)
class LaunchResult:
    returncode: int
    job: Job | None
    profile_id: str
    #: why no profile exists, when none does (the command was not Python, or never started)
    problem: str = ""


def default_job_name(command: Sequence[str]) -> str:
    """The script's name (``train`` for ``python train.py``) and the start time."""
    script = next((Path(a).stem for a in command if a.endswith(".py")), Path(command[0]).name)
    return f"{script}-{time.strftime('%Y%m%d-%H%M%S')}"


def launch_env(config: ProfilerConfig, run_id: str, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.update(config.to_env())
    env["HYPERSCOPE_RUN_ID"] = run_id
    env[ENV_AUTOSTART] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BOOT_DIR), env.get("PYTHONPATH", "")) if p)
    return env


def run(command: Sequence[str], config: ProfilerConfig) -> LaunchResult:
    """Run ``command`` under the profiler and wait for it; the caller exits with its code."""
    if not command:
        raise UsageError("no command to profile; put it after --: hyperscope profile -- python train.py")
    job = config.job or default_job_name(command)
    config = replace(config, job=job)
    home = Path(config.home).expanduser() if config.home is not None else default_home()
    config = replace(config, home=str(home))
    Store(home).close()  # a store that cannot be created fails here, before the training starts
    run_id = uuid.uuid4().hex
    try:
        child = subprocess.Popen(list(command), env=launch_env(config, run_id))
    except OSError as exc:
        raise UsageError(f"cannot run {command[0]!r}: {exc.strerror}") from None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def forward(sig: int, frame: FrameType | None) -> None:
        child.send_signal(sig)

    for sig in previous:
        signal.signal(sig, forward)
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    profile_id = DistContext(0, 0, 1, "", run_id).profile_id(job)
    return _settle(home, job, profile_id, code)


def _settle(home: Path, job: str, profile_id: str, code: int) -> LaunchResult:
    """Ranks still 'running' after the command ended did not get to say how they ended."""
    try:
        return _settle_ranks(home, job, profile_id, code)
    except HyperscopeError as exc:  # a full disk, say: the command's own result still stands
        return LaunchResult(code, None, profile_id, f"the end of the job could not be recorded: {exc}")


def _settle_ranks(home: Path, job: str, profile_id: str, code: int) -> LaunchResult:
    catalog = Catalog(home / CATALOG_FILE)
    try:
        try:
            found = catalog.job(job)
        except JobNotFound:
            return LaunchResult(code, None, profile_id, _no_profile(code))
        if not any(p.id == profile_id for p in found.profiles):
            return LaunchResult(code, found, profile_id, _no_profile(code))
        for rank, _node, status, _message in catalog.rank_statuses(profile_id):
            if status is RankStatus.RUNNING:
                how = f"exited with code {code}" if code >= 0 else f"was killed by signal {-code}"
                events, size = catalog.rank_totals(profile_id, rank)
                catalog.update_capture(
                    profile_id,
                    rank,
                    events=events,
                    bytes=size,
                    status=RankStatus.FAILED if code != 0 else RankStatus.INCOMPLETE,
                    message=f"the process {how} before the capture ended",
                    now_ns=time.time_ns(),
                )
        return LaunchResult(code, catalog.job(job), profile_id)
    finally:
        catalog.close()


def _no_profile(code: int) -> str:
    if code != 0:
        return f"the command exited with code {code} before any Python process started profiling"
    return (
        "no Python process began training (hyperscope starts recording at the first step, "
        "annotation, model forward or optimizer step): is the command a Python program (python, "
        "torchrun)? A program that resets PYTHONPATH or runs with -S/-I skips hyperscope's sitecustomize"
    )
