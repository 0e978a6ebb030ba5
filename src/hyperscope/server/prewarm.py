"""The server's prewarm: what the UI asks first for the newest finished profiles, computed as the
server starts, so that the first look at a large profile (seconds of DuckDB at 10M events) is
answered from the cache.

Two parts, because they cost different things to whoever opens a page at once:

- *first look*: what every page asks first (the profile's information and, where the index is
  stored, its timeline rows). The server waits for these, up to ``FIRST_LOOK_WAIT_S``, before it
  answers any request: computed while a page loaded, they held up its HTML, its script and its own
  rows by 0.5-1 s on 2 cores (the timeline's first paint), and the page would ask for them anyway.
- *the rest* (the dashboard and its filters: the filters alone are a second or more of DuckDB on
  every core at 10M events): computed once a page has asked for a profile and no such request
  has come for ``IDLE_S`` since (or ``REST_AT_MOST_S`` after the start, whatever came), so that
  they never compete with a page's first requests: a browser opened as the server starts takes
  seconds to ask its first. A request for something being computed waits for that computation
  (ProfileCache).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from starlette.applications import Starlette
from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger("hyperscope.server")

#: how long the server's start waits for the first-look answers (a 100M-event profile's may take
#: longer: they are then finished in the background)
FIRST_LOOK_WAIT_S = 3.0
#: quiet needed before the rest is computed, and how long it is put off at most
IDLE_S = 1.0
REST_AT_MOST_S = 30.0


class LastRequest:
    """When the server's last request about a profile came (``time.monotonic()``), and whether one
    has, as ``Activity`` notes them."""

    def __init__(self) -> None:
        self.at = time.monotonic()
        self.asked = False


class Activity:
    """An ASGI middleware noting in ``seen`` each arrival of a request about a profile (what a
    page asks first for the profile it shows: its information, rows, filters or dashboard)."""

    def __init__(self, app: ASGIApp, seen: LastRequest) -> None:
        self.app, self.seen = app, seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and str(scope.get("path", "")).startswith("/api/profiles/"):
            self.seen.at, self.seen.asked = time.monotonic(), True
        await self.app(scope, receive, send)


class Prewarm:
    """``first_look()`` then, once the server is idle, ``rest()``, in a daemon thread. Each yields
    (profile id, computation) pairs; a computation that fails is logged and skipped (the request
    that asks for it reports the error)."""

    def __init__(
        self,
        first_look: Callable[[], Iterable[tuple[str, Callable[[], Any]]]],
        rest: Callable[[], Iterable[tuple[str, Callable[[], Any]]]],
        seen: LastRequest,
    ) -> None:
        self._first_look, self._rest, self.seen = first_look, rest, seen
        self.first_look_done = threading.Event()
        self.stopped = threading.Event()  # the server ends: the rest is not computed

    def start(self) -> None:
        threading.Thread(target=self._run, name="hyperscope-prewarm", daemon=True).start()

    def _run(self) -> None:
        try:
            _each(self._first_look())
        finally:
            self.first_look_done.set()
        started = time.monotonic()
        while time.monotonic() - started < REST_AT_MOST_S and (
            not self.seen.asked or time.monotonic() - self.seen.at < IDLE_S
        ):
            if self.stopped.wait(0.1):
                return
        _each(self._rest())


def _each(work: Iterable[tuple[str, Callable[[], Any]]]) -> None:
    try:
        for profile_id, compute in work:
            try:
                compute()
            except Exception as exc:  # a broken profile is reported when someone asks for it
                log.info("hyperscope: profile %s not prewarmed: %s", profile_id, exc)
    except Exception as exc:  # an unreadable catalog is reported to whoever asks for a page
        log.warning("hyperscope: nothing prewarmed: %s", exc)


def build_routes(app: Starlette) -> None:
    """Have FastAPI build every route's request handling now, not at its first request.

    FastAPI (0.16x) builds a router's routes (their parameters' pydantic validators) the first
    time a request is matched against them: the first page of a fresh server, whose path is
    matched against every route before the page's own, paid ~100 ms for it quiet (250 ms on a
    loaded machine). Matching one path that no API route has (every route is asked) builds them."""
    scope: dict[str, Any] = {"type": "http", "method": "GET", "path": "/", "root_path": "", "headers": []}
    for route in app.router.routes:
        route.matches(scope)
