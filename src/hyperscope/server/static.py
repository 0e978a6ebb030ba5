"""The built front end: ``index.html`` at ``/`` (and at any page path of the single-page app),
``/assets/*`` from the Vite build, and a page that says how to build it when it is missing.

Files are served only from what the build directory holds: a request picks an entry of a listing
(``StaticFiles`` for ``/assets``, a name match for the top level), so no request text is ever
joined onto a path; and only regular files that are inside the bundle once links are resolved
(a symbolic link to a file outside it, ``/etc/passwd`` say, is not served).

Every answer carries headers that keep the pages from being framed (clickjacking), sniffed into
another type, or running script from anywhere but the bundle (``SECURITY_HEADERS``).
"""

from __future__ import annotations

import mimetypes
from pathlib import Path
from typing import Final

# What Starlette's FileResponse (the bundle's assets) loads at its first answer, loaded with the
# server instead: on 2 loaded cores, reading /etc/mime.types and importing anyio's file module
# cost the first page of a fresh server 60 + 120 ms (the timeline's first paint).
from anyio import open_file  # noqa: F401
from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse, HTMLResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

STATIC_DIR: Final = Path(__file__).resolve().parent / "static"

MISSING_PAGE: Final = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>hyperscope</title></head>
<body style="font-family: sans-serif; max-width: 40em; margin: 3em auto">
<h1>hyperscope</h1>
<p>The UI bundle is not built, so there is no page to show yet. Build it from a clone of the
repository with <code>./dev build-ui</code>, then reload this page.</p>
<p>The JSON API works without it: <a href="/api/jobs">/api/jobs</a>, and its documentation at
<a href="/api/docs">/api/docs</a>.</p>
</body></html>
"""


#: the front end: script only from the bundle, no framing, no plugins; styles may be inline (the
#: components set them), images also as data: and blob: URLs (icons, exported images)
CSP: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
#: /api/docs is FastAPI's Swagger page, whose script and styles come from its CDN
DOCS_CSP: Final = (
    "default-src 'self'; script-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net; "
    "style-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net; img-src 'self' data: https:; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS: Final = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",  # frame-ancestors' older form
    "Referrer-Policy": "no-referrer",
}


def install_headers(app: FastAPI) -> None:
    """``SECURITY_HEADERS`` and a Content-Security-Policy on every answer (errors included)."""
    app.add_middleware(SecurityHeaders)


class SecurityHeaders:
    """The headers of ``install_headers``, added to each answer's start as it is sent (a plain ASGI
    middleware: no task group or memory streams per request, see ``auth.Guard``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        csp = DOCS_CSP if str(scope.get("path", "")).startswith("/api/docs") else CSP

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
                headers.setdefault("Content-Security-Policy", csp)
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _served(entry: Path, directory: Path) -> bool:
    """A regular file of the bundle: not a link, and inside ``directory`` once resolved."""
    if entry.is_symlink() or not entry.is_file():
        return False
    return entry.resolve().is_relative_to(directory.resolve())


class _Assets(StaticFiles):
    """Starlette's static files, where a missing folder is a 404 rather than a server error: the
    bundle may be built (``./dev build-ui``) while the server runs."""

    async def check_config(self) -> None:
        return None


def install(app: FastAPI, directory: Path = STATIC_DIR) -> None:
    """Routes for the bundle in ``directory``; registered after the API so ``/api`` wins."""
    mimetypes.init()  # see the imports
    app.mount("/assets", _Assets(directory=directory / "assets", check_dir=False), name="assets")

    def index() -> Response:
        page = directory / "index.html"
        if _served(page, directory):
            # Never cached: it names the hashed asset files of the current build. Read whole
            # (half a KB), with no FileResponse's file thread.
            return HTMLResponse(page.read_bytes(), headers={"Cache-Control": "no-cache"})
        return HTMLResponse(MISSING_PAGE)

    @app.get("/", include_in_schema=False)
    def root() -> Response:
        return index()

    @app.get("/{page:path}", include_in_schema=False)
    def page(page: str) -> Response:
        """Top-level files of the build (favicon), else the app itself: its router reads the path."""
        if page.startswith("api/") or page == "api" or page.startswith("assets/"):
            raise HTTPException(404, f"no such path /{page[:100]}; the API is listed at /api/docs")
        if "/" not in page and directory.is_dir():
            for entry in directory.iterdir():
                if entry.name == page and _served(entry, directory):
                    return FileResponse(entry)
        return index()
