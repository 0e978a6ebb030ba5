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
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Final

from hyperscope.capture.autostart import ENV_AUTOSTART
from hyperscope.capture.config import ProfilerConfig
from hyperscope.capture.context import DistContext
from hyperscope.errors import JobNotFound, UsageError
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
    #: the stop signal the launcher itself received (and passed on), if any: it should end soon
    asked_to_stop: int | None = None


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


#: a command that ended from one of these was stopped (asked to stop), not crashed
STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)


def run(command: Sequence[str], config: ProfilerConfig) -> LaunchResult:
    """Run ``command`` under the profiler and wait for it; the caller exits with its code.

    Profiling never decides whether the training runs: a store that cannot be opened for writing
    (a read-only ``HYPERSCOPE_HOME``, a full disk) runs the command unprofiled, with the reason in
    ``problem``. A stop asked for (SIGTERM or SIGINT to the launcher, or the command ended by
    one) leaves the ranks that did not say how they ended Stopped; any other end Failed.
    """
    if not command:
        raise UsageError("no command to profile; put it after --: hyperscope profile -- python train.py")
    job = config.job or default_job_name(command)
    config = replace(config, job=job)
    home = Path(config.home).expanduser() if config.home is not None else default_home()
    config = replace(config, home=str(home))
    off = _cannot_store(home)
    run_id = uuid.uuid4().hex
    env = launch_env(config, run_id) if not off else None
    _unignore_stop_signals()
    try:
        child = subprocess.Popen(list(command), env=env)
    except OSError as exc:
        raise UsageError(f"cannot run {command[0]!r}: {exc.strerror}") from None
    code, asked = _wait_forwarding(child)
    profile_id = DistContext(0, 0, 1, "", run_id).profile_id(job)
    stopped_by = asked[0] if asked else None
    if off:
        return LaunchResult(code, None, profile_id, f"profiling was off for this run: {off}", stopped_by)
    return replace(_settle(home, job, profile_id, code, stopped_by), asked_to_stop=stopped_by)


def precompute(home: Path, job: str, profile_id: str) -> str:
    """The UI's first look (``hyperscope.cli.profile.precompute_for_ui``) computed in a child
    process, so that a fault there (a memory map's SIGBUS on a full disk, a bug of ours) costs only
    that speed-up, never the launcher's exit code. A stop asked for meanwhile ends it. "" when it
    ran to the end, else what went wrong (the profile is stored either way)."""
    script = "import sys; from hyperscope.cli.profile import precompute_for_ui as p; p(*sys.argv[1:])"
    try:
        child = subprocess.Popen([sys.executable, "-c", script, str(home), job, profile_id])
    except OSError as exc:
        return f"the dashboard and timeline were not precomputed: {exc}"
    code, asked = _wait_forwarding(child)
    if code == 0:
        return ""
    how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
    why = " (stopped)" if asked else ""
    return (
        f"precomputing the dashboard and timeline for the UI {how}{why}; the profile is stored, "
        "the UI computes them at the first look"
    )


def _unignore_stop_signals() -> None:
    """SIGTERM and SIGINT back to their defaults where the launcher was started ignoring them (a
    non-interactive shell's ``cmd &`` ignores SIGINT): the training inherits what is ignored, and
    would not stop on the signals the launcher forwards to it (it ran to its end, Completed)."""
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) is signal.SIG_IGN:
            signal.signal(sig, signal.SIG_DFL)


def _wait_forwarding(child: subprocess.Popen[bytes]) -> tuple[int, list[int]]:
    """Wait for ``child``, passing it SIGTERM and SIGINT; its code and the signals passed."""
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    asked: list[int] = []

    def forward(sig: int, frame: FrameType | None) -> None:
        asked.append(sig)
        child.send_signal(sig)

    for sig in previous:
        signal.signal(sig, forward)
    try:
        return child.wait(), asked
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _cannot_store(home: Path) -> str:
    """Why nothing could be stored under ``home`` ("" when a capture can write there)."""
    try:
        with Store(home) as store:
            return store.read_only
    except Exception as exc:  # whatever it is, the training runs all the same
        return str(exc)


def _settle(home: Path, job: str, profile_id: str, code: int, stopped_by: int | None = None) -> LaunchResult:
    """Ranks still 'running' after the command ended did not get to say how they ended."""
    try:
        return _settle_ranks(home, job, profile_id, code, stopped_by)
    except Exception as exc:  # a full disk, say: the command's own result stands
        return LaunchResult(code, None, profile_id, f"the end of the job could not be recorded: {exc}")


def stop_signal(code: int, stopped_by: int | None) -> int | None:
    """The signal that stopped the command, when it was asked to stop rather than crashed: one the
    launcher forwarded, or one it died of (``-N``, or a shell's ``128 + N``)."""
    if stopped_by is not None:
        return stopped_by
    for sig in STOP_SIGNALS:
        if code in (-sig, 128 + sig):
            return int(sig)
    return None


def _settle_ranks(home: Path, job: str, profile_id: str, code: int, stopped_by: int | None) -> LaunchResult:
    catalog = Catalog(home / CATALOG_FILE)
    try:
        try:
            found = catalog.job(job)
        except JobNotFound:
            return LaunchResult(code, None, profile_id, _no_profile(code))
        if not any(p.id == profile_id for p in found.profiles):
            return LaunchResult(code, found, profile_id, _no_profile(code))
        stop = stop_signal(code, stopped_by)
        for rank, _node, status, _message in catalog.rank_statuses(profile_id):
            if status is RankStatus.RUNNING:
                if stop is not None:
                    ended = RankStatus.STOPPED
                    how = f"was stopped by {signal.Signals(stop).name}"
                else:
                    ended = RankStatus.FAILED if code != 0 else RankStatus.INCOMPLETE
                    how = f"exited with code {code}" if code >= 0 else f"was killed by signal {-code}"
                events, size = catalog.rank_totals(profile_id, rank)
                catalog.update_capture(
                    profile_id,
                    rank,
                    events=events,
                    bytes=size,
                    status=ended,
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
