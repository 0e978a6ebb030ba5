"""The real ``hyperscope ui`` and CLI over a store on a read-only mount and on a full disk: every
page answers, the server stays up, nothing half-written is left behind.

They mount a tmpfs and read-only bind mounts, so they need root (CI runs as root); elsewhere they
skip and say why.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hyperscope import Store
from hyperscope.errors import StoreError
from hyperscope.schema.layout import profile_dir
from hyperscope.store.profile import Profile
from hyperscope.timeline import index as timeline_index
from tests.server.conftest import H200, H200_PROFILE

URL = re.compile(r"hyperscope UI on (https?://\S+/)")
HYPERSCOPE = [sys.executable, "-m", "hyperscope"]


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, text=True)


@contextmanager
def mounted(*args: str, target: Path) -> Iterator[None]:
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a filesystem for the test")
    try:
        _mount(*args, str(target))
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot mount a filesystem for the test: {exc.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(target)], capture_output=True)


def fill(path: Path, leave: int) -> None:
    """Take every byte of the filesystem of ``path`` but ``leave``."""
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    os.truncate(path, max(0, path.stat().st_size - leave))


@contextmanager
def ui(home: Path, logs: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``hyperscope ui`` as a user starts it (prewarm on, the default); stderr to a file."""
    err = open(logs / "ui-err.txt", "w")  # noqa: SIM115 - open for the server's whole life
    proc = subprocess.Popen(
        [*HYPERSCOPE, "ui", "--port", "0", "--no-browser", "--home", str(home)],
        stdout=subprocess.PIPE, stderr=err, text=True, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "Ctrl+C" in line:
                break
        found = next((URL.search(x) for x in lines if URL.search(x)), None)
        assert found, f"no address printed: {lines} {(logs / 'ui-err.txt').read_text()}"
        yield found.group(1), proc
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        err.close()


def get(url: str) -> tuple[int, bytes]:
    for _ in range(100):
        try:
            with urllib.request.urlopen(url, timeout=60) as answer:
                return int(answer.status), answer.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except urllib.error.URLError:
            time.sleep(0.1)
    raise AssertionError(f"{url}: no answer")


def rows_when_built(base: str, proc: subprocess.Popen[str]) -> tuple[int, bytes]:
    """``/rows``: 503 while the index is built in the background, then the rows."""
    url = f"{base}api/profiles/{H200_PROFILE}/timeline/rows"
    deadline = time.monotonic() + 180
    while True:
        code, body = get(url)
        assert proc.poll() is None, f"the server died (exit {proc.returncode})"
        if code != 503 or time.monotonic() > deadline:
            return code, body
        time.sleep(0.2)


def serves_everything(base: str, proc: subprocess.Popen[str], logs: Path) -> None:
    code, body = get(f"{base}api/jobs")
    assert code == 200, body[:500]
    assert [j["name"] for j in json.loads(body)["jobs"]] == ["h200-transformer"]
    for path in ("", "/filters", "/dashboard", "/dashboard?steps=3:5"):
        code, body = get(f"{base}api/profiles/{H200_PROFILE}{path}")
        assert code == 200, (path, body[:500])
    code, body = rows_when_built(base, proc)
    assert code == 200, body[:500]
    assert proc.poll() is None
    assert "Traceback" not in (logs / "ui-err.txt").read_text()  # the prewarm thread included


def cli_reads(home: Path) -> None:
    """``hyperscope jobs``, ``show`` and ``report``, each answered in full."""
    for command, expected in (
        (["jobs"], "h200-transformer"),
        (["show", "h200-transformer"], "span (ms)"),
        (["report", "h200-transformer"], "Kernel"),
    ):
        done = subprocess.run(
            [*HYPERSCOPE, *command, "--home", str(home)], capture_output=True, text=True,
            env={**os.environ, "COLUMNS": "200"},
        )  # fmt: skip
        assert done.returncode == 0, (command, done.stderr[-2000:])
        assert expected in done.stdout, (command, done.stdout[:1000])


def fresh_copy(where: Path) -> Path:
    """The H200 capture without its derived data: the timeline index must be built."""
    shutil.copytree(H200, where, ignore=shutil.ignore_patterns("README.txt", "derived"))
    return where


def test_a_read_only_store_is_read(tmp_path: Path) -> None:
    home = fresh_copy(tmp_path / "data" / "home")
    with Store(home) as store:  # as an archive is: closed, its WAL checkpointed and gone
        assert store.job("h200-transformer").profiles
    view = tmp_path / "view"
    view.mkdir()
    with mounted("--bind", str(tmp_path / "data"), target=view):
        _mount("-o", "remount,bind,ro", str(view))
        ro = view / "home"
        assert not (ro / "catalog.sqlite-shm").exists()
        cli_reads(ro)
        with Store(ro) as store:  # the Python API reads it too, and refuses to write, saying why
            assert store.read_only and [j.name for j in store.jobs()] == ["h200-transformer"]
            with pytest.raises(StoreError, match=r"cannot write the jobs catalog.*read-only"):
                store.remove("h200-transformer")
        with ui(ro, tmp_path) as (base, proc):
            serves_everything(base, proc, tmp_path)
    assert not list(home.glob("profiles/*/derived"))  # nothing was written


def test_a_full_disk_never_takes_the_server_down(tmp_path: Path) -> None:
    small = tmp_path / "small"
    small.mkdir()
    with mounted("-t", "tmpfs", "-o", "size=16m", "tmpfs", target=small):
        home = fresh_copy(small / "home")
        with Store(home):
            pass
        fill(small / "filler", leave=120 * 1024)  # the index (~400 KB) does not fit
        cli_reads(home)
        with ui(home, tmp_path) as (base, proc):
            serves_everything(base, proc, tmp_path)  # the index built in memory instead
            assert "No space left on device" in (tmp_path / "ui-err.txt").read_text()
        derived = profile_dir(home, H200_PROFILE) / "derived"
        assert not [p.name for p in derived.glob(".timeline-*")]  # no half-built index left
        (small / "filler").unlink()  # space again: the build is stored the next time
        assert timeline_index.store(Profile.open(profile_dir(home, H200_PROFILE)))
        assert [p.name for p in derived.glob("timeline-*")]


def test_a_dead_builds_staging_directory_is_removed(tmp_path: Path) -> None:
    """A build killed by a signal cannot remove its own staging directory; the next one does."""
    home = fresh_copy(tmp_path / "home")
    profile = Profile.open(profile_dir(home, H200_PROFILE))
    where = timeline_index.index_dir(profile)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    abandoned = where.with_name(f".{where.name}.{dead.pid}-abcdef")
    mine = where.with_name(f".{where.name}.{os.getpid()}-abcdef")  # a live process's build
    for d in (abandoned, mine):
        d.mkdir(parents=True)
    assert timeline_index.store(profile)
    assert not abandoned.exists() and mine.exists()
