"""`pip install` gives a working UI with no Node.js: the wheel carries the built bundle.

Builds the wheel from this checkout (as a release would), unpacks it apart from the checkout and
serves `/` from that copy alone.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "src" / "hyperscope" / "server" / "static" / "index.html"


def test_the_wheel_serves_the_ui(tmp_path: Path) -> None:
    if not BUNDLE.is_file():
        pytest.skip("the UI bundle is not built here (./dev build-ui; npm missing?)")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(tmp_path / "dist"),
            str(REPO),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("hyperscope-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "hyperscope/server/static/index.html" in names
    assert any(n.startswith("hyperscope/server/static/assets/") and n.endswith(".js") for n in names)
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    script = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import hyperscope\n"
        "assert hyperscope.__file__.startswith(sys.argv[1]), hyperscope.__file__\n"
        "from fastapi.testclient import TestClient\n"
        "from hyperscope.server import create_app\n"
        "client = TestClient(create_app(sys.argv[2]), base_url='http://127.0.0.1:8321')\n"
        "page = client.get('/')\n"
        "assert page.status_code == 200 and '<script' in page.text, page.text[:300]\n"
        "asset = page.text.split('src=\"', 1)[1].split('\"', 1)[0]\n"
        "assert client.get(asset).status_code == 200\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "site"), str(tmp_path / "home")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-2000:]
