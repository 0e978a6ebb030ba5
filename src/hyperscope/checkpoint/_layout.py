"""What a checkpoint is on disk, and how one is judged complete and intact.

```
<directory>/
  step-00000042/            one complete checkpoint (only ever appears whole: renamed into place)
    state.pt                torch.save of the state (one process), or torch.distributed.checkpoint
    *.distcp, .metadata     files of every rank (several processes)
    MANIFEST.json           step, format, time, and every file's size and SHA-256
    COMPLETE                the manifest's SHA-256: written last, fsynced, before the rename
  .step-00000043.tmp/       work in progress (ignored by readers; removed when stale)
```

A crash at any moment leaves either the previous checkpoints untouched or a ``.tmp`` directory
that readers skip; a bit flipped on disk or a file truncated later is caught by the checksums.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from hyperscope.errors import CheckpointError

MANIFEST: Final = "MANIFEST.json"
COMPLETE: Final = "COMPLETE"
STATE_FILE: Final = "state.pt"
FORMAT_VERSION: Final = 1
_STEP_DIR: Final = re.compile(r"^step-(\d{8,})$")
_CHUNK: Final = 1 << 20


def step_dir(directory: Path, step: int) -> Path:
    return directory / f"step-{step:08d}"


def tmp_dir(directory: Path, step: int) -> Path:
    return directory / f".step-{step:08d}.tmp"


def steps_on_disk(directory: Path) -> list[tuple[int, Path]]:
    """Every ``step-N`` directory, newest first (complete or not: validation decides)."""
    if not directory.is_dir():
        return []
    found = []
    for entry in directory.iterdir():
        match = _STEP_DIR.match(entry.name)
        if match and entry.is_dir():
            found.append((int(match.group(1)), entry))
    return sorted(found, reverse=True)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def file_digest(path: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


@dataclass(frozen=True, slots=True)
class Manifest:
    step: int
    format: str  # "torch.save" (one process) or "dcp" (torch.distributed.checkpoint)
    created_ns: int
    world_size: int
    files: dict[str, tuple[int, str]]  # relative path -> (bytes, sha256)
    extra: dict[str, Any]

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "version": FORMAT_VERSION,
                "step": self.step,
                "format": self.format,
                "created_ns": self.created_ns,
                "world_size": self.world_size,
                "files": {k: {"bytes": b, "sha256": h} for k, (b, h) in sorted(self.files.items())},
                "extra": self.extra,
            },
            indent=1,
        ).encode()


def finish(work: Path, manifest: Manifest, final: Path) -> None:
    """Write the manifest and the completion marker, then rename ``work`` into place, durably."""
    body = manifest.to_json()
    _write_synced(work / MANIFEST, body)
    _write_synced(work / COMPLETE, hashlib.sha256(body).hexdigest().encode())
    fsync_dir(work)
    if final.exists():  # the same step saved again (a resumed run): the new one replaces it whole
        aside = final.with_name(f".{final.name}.replaced-{time.time_ns()}")
        final.rename(aside)
        work.rename(final)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        work.rename(final)
    fsync_dir(final.parent)


def _write_synced(path: Path, data: bytes) -> None:
    with path.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def validate(path: Path, *, checksums: bool = True) -> Manifest:
    """The manifest of an intact checkpoint; ``CheckpointError`` naming the first problem else."""
    marker, manifest_path = path / COMPLETE, path / MANIFEST
    if not marker.is_file():
        raise CheckpointError(f"{path}: no {COMPLETE} marker (the save did not finish)")
    try:
        body = manifest_path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"{manifest_path}: cannot be read: {exc.strerror}") from None
    if marker.read_bytes().strip().decode(errors="replace") != hashlib.sha256(body).hexdigest():
        raise CheckpointError(f"{manifest_path}: does not match the checksum in {COMPLETE}")
    try:
        raw = json.loads(body)
        manifest = Manifest(
            step=int(raw["step"]),
            format=str(raw["format"]),
            created_ns=int(raw["created_ns"]),
            world_size=int(raw["world_size"]),
            files={k: (int(v["bytes"]), str(v["sha256"])) for k, v in raw["files"].items()},
            extra=dict(raw.get("extra") or {}),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{manifest_path}: malformed ({exc!r})") from None
    for name, (size, sha) in manifest.files.items():
        file = path / name
        if not file.is_file():
            raise CheckpointError(f"{file}: missing (listed in {MANIFEST})")
        actual = file.stat().st_size
        if actual != size:
            raise CheckpointError(f"{file}: {actual:,} bytes, expected {size:,} (truncated or replaced)")
        if checksums:
            _, digest = file_digest(file)
            if digest != sha:
                raise CheckpointError(f"{file}: SHA-256 {digest[:12]}…, expected {sha[:12]}… (corrupt)")
    return manifest


def prune(directory: Path, keep: int, *, busy: Path | None = None) -> list[Path]:
    """Remove all but the newest ``keep`` complete checkpoints, and leftovers of dead saves
    (``busy`` is a save in flight, left alone)."""
    removed = []
    complete = [p for _, p in steps_on_disk(directory) if (p / COMPLETE).is_file()]
    for old in complete[keep:]:
        shutil.rmtree(old, ignore_errors=True)
        removed.append(old)
    for entry in directory.iterdir() if directory.is_dir() else []:
        if entry.name.startswith(".step-") and entry != busy:
            shutil.rmtree(entry, ignore_errors=True)
    return removed
