"""Running the real ``hyperscope ui`` server and Debian's chromium for the browser tests and the
UI benchmark: no Playwright browser downloads, no stand-in server."""

from __future__ import annotations

import json
import os
import selectors
import shutil
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "src" / "hyperscope" / "server" / "static" / "index.html"
ARTIFACTS = REPO / "test-artifacts" / "ui"

# Every chart's option as plain JSON (formatters are functions: left out).
OPTION_JS = """(name) => {
  const chart = window.__hyperscope.charts[name];
  if (!chart) return null;
  return JSON.parse(JSON.stringify(chart.getOption(), (k, v) => (typeof v === "function" ? undefined : v)));
}"""


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if chromium_path() is None:
        return "Debian's chromium is not installed (./dev test installs it as root: apt-get install chromium)"
    if not BUNDLE.is_file():
        return f"the UI bundle is not built ({BUNDLE.relative_to(REPO)} is absent): run ./dev build-ui"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright Python package is not installed (pip install -e .[dev])"
    return None


@contextmanager
def ui_server(
    home: Path, timeout_s: float = 60.0, command: tuple[str, ...] = ("ui",), seen: list[str] | None = None
) -> Iterator[str]:
    """``hyperscope ui --port 0`` over ``home`` in a child process; yields its base URL.
    ``command``: another command that ends serving the UI (``demo``); ``seen``: its output lines
    up to the URL."""
    argv = [sys.executable, "-m", "hyperscope", *command, "--port", "0", "--no-browser", "--home", str(home)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    assert proc.stdout is not None
    want_all = seen is not None
    seen = [] if seen is None else seen
    try:
        url = None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout_s
        # Raw reads of the pipe, split into lines here: a buffered readline() after select() can
        # take several lines from the pipe at once, and select() then never fires for the rest
        # (the demo's last two lines, printed together, were lost so, and the test waited 600 s).
        pending = b""
        # the URL, and with ``seen`` asked for every line the server prints before it serves
        while url is None or (want_all and not seen[-1].startswith("press Ctrl+C")):
            if b"\n" not in pending:
                if proc.poll() is not None or time.monotonic() > deadline:
                    rest = proc.stdout.read().decode(errors="replace") if proc.poll() is not None else ""
                    printed = "".join(seen) + pending.decode(errors="replace") + rest
                    raise RuntimeError(f"hyperscope ui did not start: {printed}")
                if not sel.select(timeout=0.5):
                    continue
                chunk = os.read(proc.stdout.fileno(), 65536)
                pending += chunk
                if chunk:
                    continue
            head, _, pending = pending.partition(b"\n")
            line = head.decode(errors="replace") + "\n"
            seen.append(line)
            for word in line.split():
                if url is None and word.startswith("http://"):
                    url = word.rstrip("/")
        sel.close()
        _wait_ready(url, deadline)
        _Drain(proc.stdout, pending)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class _Drain(threading.Thread):
    """Reads the server's output for as long as it runs: a pipe left unread fills (64 KB of
    warnings, say) and the server then blocks on its next write, every request with it. The
    last lines are kept for a failing test's report and echoed to stderr (pytest shows them)."""

    def __init__(self, out: Any, pending: bytes) -> None:
        super().__init__(daemon=True)
        self.out = out
        self.tail: deque[str] = deque(pending.decode(errors="replace").splitlines(), maxlen=200)
        self.start()

    def run(self) -> None:
        for raw in iter(self.out.readline, b""):
            line = raw.decode(errors="replace").rstrip("\n")
            self.tail.append(line)
            print(f"[hyperscope ui] {line}", file=sys.stderr)


def _wait_ready(url: str, deadline: float) -> None:
    import urllib.request

    while True:
        try:
            with urllib.request.urlopen(f"{url}/api/jobs?limit=1", timeout=5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def api(url: str, path: str) -> tuple[int, Any]:
    """GET ``path`` from the server: (status, JSON body)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}{path}", timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def launch_chromium(playwright: Any) -> Any:
    return playwright.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
