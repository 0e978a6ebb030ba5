"""Running the server: bind, say where it is (with the token when one is needed), open a browser.

The socket is bound here rather than by uvicorn, so that port 0 (any free port) can be reported
with the port the system actually chose before the first request arrives.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import socket
import sys
import threading
import time
import webbrowser
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import uvicorn

from hyperscope.server.app import create_app
from hyperscope.server.auth import is_loopback, new_token

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8321
#: glibc's mallopt parameters: at most this many malloc arenas; blocks from this size mapped alone
_M_ARENA_MAX: Final = -8
_M_MMAP_THRESHOLD: Final = -3
MALLOC_ARENAS: Final = 2
MMAP_THRESHOLD_BYTES: Final = 256 * 1024
#: how long a thread may hold the GIL while another waits for it (Python's default: 5 ms)
SWITCH_INTERVAL_S: Final = 0.0005


@dataclass(frozen=True, slots=True)
class Address:
    """Where the server listens, and the URL to open (with ``?token=`` when one is needed)."""

    host: str
    port: int
    token: str | None
    https: bool = False

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        shown = f"[{host}]" if ":" in host else host
        return f"{'https' if self.https else 'http'}://{shown}:{self.port}/"

    @property
    def open_url(self) -> str:
        return self.base_url + (f"?token={self.token}" if self.token else "")


def bound_malloc() -> bool:
    """Keep the server's memory from creeping up with its threads (glibc only; False elsewhere).

    Every request runs on a worker thread (and DuckDB has threads of its own), and glibc gives each
    thread that allocates an arena of its own, up to 8 per core, keeping what is freed in each; it
    also raises its threshold for mapping a large block alone each time one is freed, so a tile's
    arrays (hundreds of KB) end up in those arenas too. Two arenas and a fixed threshold: a large
    block goes back to the system when it is freed.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: their own allocator, no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, MALLOC_ARENAS)) and bool(
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    )


def short_gil_turns() -> None:
    """Let a thread that wants the GIL back wait 0.5 ms for it, not Python's 5 ms.

    The server is bound by its one Python core when many requests run at once. A timeline tile
    costs ~4 ms of CPU, but numpy releases the GIL around each of its ~100 array operations, and
    every time another runnable thread (another request's JSON, the event loop) takes it, the tile
    waits for that thread to reach the switch interval. With four such threads, a tile took 233 ms
    at p50 at 5 ms and 76 ms at 0.5 ms (bench/gil_turns.py, their own work no slower within the
    noise of a loaded machine); in bench/soak.py tiles had waited 375 ms at p50 for ~4 ms of work.
    """
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (0: any free port), IPv6 when the host is one."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, and TCP_NODELAY set here (accepted sockets inherit it): asyncio turns Nagle
    # off only on sockets whose protocol says TCP, and a socket made with protocol 0 kept it on, so
    # every answer (its headers and body are two writes) waited ~40 ms for the client's delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve(
    home: Path,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    open_browser: bool = True,
    *,
    token: str | None = None,
    query_timeout_s: float = 30.0,
    max_rows: int = 100_000,
    prewarm: int = 1,
    announce: Callable[[str], None] | None = None,
    tls: tuple[Path, Path] | None = None,
    open_path: str = "",
) -> None:
    """Serve the UI over the store at ``home`` until interrupted.

    Beyond loopback a token is required (made up here unless given), since anyone on the network
    could otherwise read the profiles. ``announce`` receives the lines a user needs (default:
    printed, flushed at once so a script reading the output sees the port). ``prewarm``: the
    newest finished profiles whose dashboard is computed at start (see ``create_app``). ``tls``:
    (certificate, key) PEM files to serve HTTPS (the token cookie is then ``Secure``); behind a
    TLS reverse proxy on this machine, the proxy's ``X-Forwarded-Proto: https`` does the same.
    ``open_path``: the page the browser opens on (a fragment such as ``#/dashboard/<profile id>``).
    """
    say = announce or (lambda line: print(line, flush=True))
    bound_malloc()  # before the server's threads start
    short_gil_turns()
    if token is None and not is_loopback(host):
        token = new_token()
    app = create_app(home, token=token, query_timeout_s=query_timeout_s, max_rows=max_rows, prewarm=prewarm)
    sock = bind(host, port)
    address = Address(host, int(sock.getsockname()[1]), token, https=tls is not None)
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=2,
        ssl_certfile=str(tls[0]) if tls is not None else None,
        ssl_keyfile=str(tls[1]) if tls is not None else None,
    )
    if tls is not None:
        try:
            config.load()  # a bad certificate or key: said now, before the address is announced
        except (OSError, ValueError) as exc:
            sock.close()
            raise OSError(f"cannot serve HTTPS with {tls[0]} and {tls[1]}: {exc}") from None
    server = uvicorn.Server(config)
    say(f"hyperscope UI on {address.base_url} (store {Path(home).expanduser()})")
    if token:
        say(f"bound to {host}, so requests need a token: open {address.open_url}")
    if open_path:
        say(f"opening {address.base_url}{open_path}")
    say("press Ctrl+C to stop")
    if open_browser:
        url = address.open_url + open_path
        threading.Thread(target=_open_when_ready, args=(server, url), daemon=True).start()
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


def _open_when_ready(server: uvicorn.Server, url: str) -> None:
    """A browser opened before the server accepts would show an error page."""
    for _ in range(200):
        if server.started:
            webbrowser.open(url)
            return
        time.sleep(0.05)
