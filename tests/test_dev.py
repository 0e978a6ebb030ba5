"""`./dev`'s web UI step, run for real by bash on a copy of ui/'s layout: the bundle is rebuilt only
when a source under ui/ is newer than it, so `./dev test` does not re-run `npm ci` and Vite (~10 s of
output) on every run. npm is left off PATH, so "would build" shows as the note that npm is missing."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from tests.conftest import REPO

SOURCES = (
    "src/main.ts",
    "index.html",
    "package.json",
    "package-lock.json",
    "vite.config.ts",
    "tsconfig.json",
)
BUNDLE = "src/hyperscope/server/static/index.html"


def _build_ui_stale(root: Path) -> str:
    """What `build_ui stale`, as `./dev` defines it, says on stderr in ``root``."""
    text = (REPO / "dev").read_text()
    found = re.search(r"^UI_BUNDLE=.*?^build_ui\(\) \{.*?^\}$", text, re.S | re.M)
    assert found, "build_ui is no longer defined in ./dev"
    bin_ = root / "bin"
    bin_.mkdir(exist_ok=True)
    find = shutil.which("find")
    assert find
    if not (bin_ / "find").exists():
        (bin_ / "find").symlink_to(find)
    bash = shutil.which("bash")
    assert bash
    done = subprocess.run(
        [bash, "-c", f"set -euo pipefail\n{found.group(0)}\nbuild_ui stale"],
        cwd=root,
        env={"PATH": str(bin_)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stderr


def test_dev_rebuilds_the_ui_only_when_a_source_is_newer_than_the_bundle(tmp_path: Path) -> None:
    for name in SOURCES:
        path = tmp_path / "ui" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
        os.utime(path, (1_000_000_000, 1_000_000_000))
    os.utime(tmp_path / "ui" / "src", (1_000_000_000, 1_000_000_000))  # a file added there counts too
    assert "npm not found" in _build_ui_stale(tmp_path)  # no bundle yet: it would build
    bundle = tmp_path / BUNDLE
    bundle.parent.mkdir(parents=True)
    bundle.write_text("<html>")
    os.utime(bundle, (1_500_000_000, 1_500_000_000))  # built after the sources
    assert _build_ui_stale(tmp_path) == ""  # nothing changed under ui/: not built again
    os.utime(tmp_path / "ui" / "src" / "main.ts", None)  # now: newer than the bundle
    assert "npm not found" in _build_ui_stale(tmp_path)
