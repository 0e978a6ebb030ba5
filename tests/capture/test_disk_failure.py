"""The disk dies mid-capture: training finishes, what was written stays readable, the error is clear.

These tests mount a read-only bind mount and a tiny tmpfs, so they need root (CI runs as root);
elsewhere they skip and say why.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from hyperscope import JobStatus, Store
from hyperscope.store.catalog import RankStatus
from tests.conftest import REPO

pytest.importorskip("torch", reason="capture tests need PyTorch (./dev test installs it)")
pytestmark = pytest.mark.capture

PLAIN = REPO / "tests" / "data" / "capture" / "plain_train.py"


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, text=True)


@contextmanager
def mounted(*args: str, target: Path) -> Iterator[None]:
    try:
        _mount(*args, str(target))
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = exc.stderr.strip() if isinstance(exc, subprocess.CalledProcessError) else str(exc)
        pytest.skip(f"needs root to mount a filesystem for the test ({detail or exc})")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(target)], capture_output=True)


def read_only(path: Path) -> None:
    """Remount a bind mount read-only. The kernel refuses (EBUSY) while a file on it is open for
    writing, as a part being written is: try again until the writer is between two parts."""
    for _ in range(200):
        try:
            _mount("-o", "remount,bind,ro", str(path))
            return
        except subprocess.CalledProcessError:
            time.sleep(0.02)
    done = subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, f"cannot remount {path} read-only: {done.stderr}"


def start(home: Path, job: str, steps: int, logs: Path) -> subprocess.Popen[str]:
    """The launcher on a plain script; its output goes to files (a full pipe would stall it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPERSCOPE_")}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hyperscope",
            "profile",
            "--home",
            str(home),
            "--job",
            job,
            "--flush-steps",
            "1",
            "--flush-min-gap",
            "0",
            "--cpu-ops",
            "--sample-interval",
            "0.05",
            "--",
            sys.executable,
            str(PLAIN),
            "--steps",
            str(steps),
            "--sleep",
            "0.05",
        ],
        stdout=open(logs / "out.txt", "w"),
        stderr=open(logs / "err.txt", "w"),
        text=True,
        env=env,
        cwd=REPO,
    )


def finish(proc: subprocess.Popen[str], logs: Path) -> tuple[str, str]:
    proc.wait(timeout=240)
    return (logs / "out.txt").read_text(), (logs / "err.txt").read_text()


def wait_for_parts(home: Path, count: int, proc: subprocess.Popen[str], logs: Path) -> Path:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        parts = list((home / "profiles").glob("*/events/*.parquet"))
        if len(parts) >= count:
            return parts[0].parent
        time.sleep(0.05)
    found = sorted(str(p.relative_to(home)) for p in home.rglob("*")) if home.exists() else []
    raise AssertionError(
        f"no {count} parts under {home} (exit code {proc.poll()}); files: {found[:20]}\n"
        f"stdout: {(logs / 'out.txt').read_text()[-2000:]}\nstderr: {(logs / 'err.txt').read_text()[-4000:]}"
    )


def test_events_directory_turns_read_only(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a read-only bind mount")
    home = tmp_path / "home"
    proc = start(home, "ro", steps=80, logs=tmp_path)
    try:
        events = wait_for_parts(home, 2, proc, tmp_path)
        with mounted("--bind", str(events), target=events):
            read_only(events)
            out, err = finish(proc, tmp_path)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert "trained 80 steps" in out
    assert err.count("stopped writing") == 1 and "Read-only file system" in err
    with Store(home) as store:
        job = store.job("ro")
        rank = store.catalog.rank_statuses(job.profiles[0].id)[0]
        profile = store.profile("ro")
        steps = profile.connect().sql("SELECT count(*) FROM events WHERE kind = 'step'").fetchall()[0][0]
    assert job.status is JobStatus.COMPLETED
    assert rank[2] is RankStatus.INCOMPLETE
    assert str(events) in rank[3] and "Read-only file system" in rank[3]
    assert not profile.meta.ranks[0].complete
    assert 1 <= steps < 80  # what was written before the failure is kept and readable


def test_disk_fills_up(tmp_path: Path) -> None:
    small = tmp_path / "small"
    small.mkdir()
    with mounted("-t", "tmpfs", "-o", "size=8m", "tmpfs", target=small):
        home = small / "home"
        proc = start(home, "full", steps=60, logs=tmp_path)
        try:
            events = wait_for_parts(home, 2, proc, tmp_path)
            filler = small / "filler"
            with open(filler, "wb") as f:  # take every byte that is left
                try:
                    while True:
                        f.write(b"\0" * 65536)
                        f.flush()
                except OSError:
                    pass
            out, err = finish(proc, tmp_path)
        finally:
            proc.kill()
        assert proc.returncode == 0, err[-3000:]
        assert "trained 60 steps" in out
        assert "No space left on device" in err and str(home) in err
        assert "Traceback" not in err
        filler.unlink()  # with space again, everything already stored reads back
        parts = sorted(events.glob("*.parquet"))
        assert parts and all(pq.read_metadata(p).num_rows > 0 for p in parts)
        assert not list(events.glob(".*.tmp"))  # no half-written part left behind
        with Store(home) as store:
            job = store.job("full")
            assert job.status in (JobStatus.COMPLETED, JobStatus.IN_PROGRESS)
            con = store.profile("full").connect()
            assert con.sql("SELECT count(*) FROM events").fetchall()[0][0] > 0
