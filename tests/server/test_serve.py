"""The real ``hyperscope ui`` command, over HTTP, as a user starts it."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hyperscope.server.serve import SWITCH_INTERVAL_S, Address, bind, bound_malloc, short_gil_turns
from tests.server.conftest import Home

URL = re.compile(r"hyperscope UI on (https?://\S+/)")
TOKEN_URL = re.compile(r"open (https?://\S+\?token=(\S+))")


@contextmanager
def running_ui(home: Path, *args: str, cwd: Path | None = None) -> Iterator[tuple[str, list[str]]]:
    """Start ``hyperscope ui`` and yield its base URL and the lines it printed up to it."""
    env = {**os.environ, "COLUMNS": "200"}
    command = [sys.executable, "-m", "hyperscope", "ui", "--port", "0", "--no-browser", "--home", str(home)]
    proc = subprocess.Popen(
        [*command, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd
    )
    try:
        lines: list[str] = []
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.strip())
            if "Ctrl+C" in line:
                break
        found = next((URL.search(x) for x in lines if URL.search(x)), None)
        assert found, f"no address printed: {lines} {proc.stderr.read() if proc.stderr else ''}"
        yield found.group(1), lines
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def fetch(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """GET, retrying while the server finishes starting (it prints its address just before)."""
    request = urllib.request.Request(url, headers=headers or {})
    for attempt in range(100):
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return int(answer.status), answer.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except (ConnectionError, urllib.error.URLError):
            if attempt == 99:
                raise
            time.sleep(0.1)
    raise AssertionError("unreachable")


def test_ui_serves_the_api_over_http(home: Home) -> None:
    with running_ui(home.path) as (base, lines):
        assert base.startswith("http://127.0.0.1:") and not base.endswith(":0/")
        assert not any("token" in line for line in lines)  # loopback: no token
        status, body = fetch(base + "api/jobs?search=h200")
        assert status == 200
        assert [j["name"] for j in json.loads(body)["jobs"]] == ["h200-transformer"]
        status, body = fetch(base + f"api/profiles/{home.h200}/filters")
        assert status == 200 and json.loads(body)["steps"] == {"min": 0, "max": 39}


def test_ui_over_a_relative_home(home: Home) -> None:
    """``--home store``, as typed in a shell: the catalog is found from the working directory."""
    with running_ui(Path(home.path.name), cwd=home.path.parent) as (base, _):
        status, body = fetch(base + "api/jobs?search=h200")
        assert status == 200, body
        assert [j["name"] for j in json.loads(body)["jobs"]] == ["h200-transformer"]


def test_ui_beyond_loopback_prints_a_token_and_needs_it(home: Home) -> None:
    with running_ui(home.path, "--host", "0.0.0.0") as (base, lines):
        found = next((TOKEN_URL.search(x) for x in lines if TOKEN_URL.search(x)), None)
        assert found, lines
        token = found.group(2)
        assert fetch(base + "api/jobs")[0] == 401
        status, body = fetch(base + "api/jobs", {"Authorization": f"Bearer {token}"})
        assert status == 200 and json.loads(body)["total"] == 3


def test_ui_over_tls_sets_a_secure_cookie(home: Home, tmp_path: Path) -> None:
    """``--certfile/--keyfile``: HTTPS, and the token's cookie only ever goes back over it."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    tls = ("--certfile", str(cert), "--keyfile", str(key))
    with running_ui(home.path, "--host", "0.0.0.0", *tls) as (base, lines):
        assert base.startswith("https://127.0.0.1:")
        found = next((TOKEN_URL.search(x) for x in lines if TOKEN_URL.search(x)), None)
        assert found and found.group(1).startswith("https://"), lines
        context = ssl.create_default_context(cafile=str(cert))
        context.check_hostname = False

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args: object, **kwargs: object) -> None:
                return None

        opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context), NoRedirect)
        with pytest.raises(urllib.error.HTTPError) as redirect:
            opener.open(base + f"?token={found.group(2)}", timeout=30)
        assert redirect.value.code == 303
        cookie = redirect.value.headers["set-cookie"]
        assert "hyperscope_token=" in cookie and "Secure" in cookie and "HttpOnly" in cookie
    bad = subprocess.run(
        [sys.executable, "-m", "hyperscope", "ui", "--no-browser", "--port", "0", "--home", str(home.path),
         "--certfile", str(cert), "--keyfile", str(cert)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 1 and "cannot serve HTTPS" in bad.stderr and "Traceback" not in bad.stderr


def test_addresses() -> None:
    assert Address("::1", 443, "t", https=True).open_url == "https://[::1]:443/?token=t"
    assert Address("0.0.0.0", 8321, None).base_url == "http://127.0.0.1:8321/"
    assert Address("::1", 80, "t").open_url == "http://[::1]:80/?token=t"
    assert Address("10.1.2.3", 9, "t").open_url == "http://10.1.2.3:9/?token=t"


def test_answers_are_not_held_back_by_nagle() -> None:
    """Accepted sockets have TCP_NODELAY and say they are TCP (asyncio sets it only then): each
    answer is two writes, headers and body, and with Nagle on the body waited ~40 ms for the
    client's delayed ACK (every request of bench/soak.py)."""
    listener = bind("127.0.0.1", 0)
    try:
        client = socket.create_connection(listener.getsockname()[:2], timeout=30)
        accepted, _ = listener.accept()
        with client, accepted:
            assert accepted.proto == socket.IPPROTO_TCP
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        listener.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_the_server_bounds_mallocs_arenas() -> None:
    """glibc accepts both settings (mallopt answers 0 for a parameter it does not know)."""
    assert bound_malloc() is True


def test_the_server_hands_the_gil_over_in_short_turns() -> None:
    """A thread waiting for the GIL (a tile between two numpy calls) waits 0.5 ms, not 5."""
    before = sys.getswitchinterval()
    try:
        short_gil_turns()
        assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S) and before > SWITCH_INTERVAL_S
    finally:
        sys.setswitchinterval(before)


def test_port_in_use_is_an_error_not_a_traceback(home: Home) -> None:
    with running_ui(home.path) as (base, _):
        port = base.rstrip("/").rsplit(":", 1)[1]
        command = [
            sys.executable,
            "-m",
            "hyperscope",
            "ui",
            "--port",
            port,
            "--no-browser",
            "--home",
            str(home.path),
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr and "Traceback" not in done.stderr


def test_help_teaches() -> None:
    text = subprocess.run(
        [sys.executable, "-m", "hyperscope", "ui", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for option in ("--host", "--port", "--no-browser", "--query-timeout", "--max-rows", "--home", "token"):
        assert option in text
