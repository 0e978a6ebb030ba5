"""The built front end: ``index.html`` at ``/`` (and at any page path of the single-page app),
``/assets/*`` from the Vite build, and a page that says how to build it when it is missing.

Files are served only from what the build directory holds: a request picks an entry of a listing
(``StaticFiles`` for ``/assets``, a name match for the top level), so no request text is ever
joined onto a path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse, HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

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


class _Assets(StaticFiles):
    """Starlette's static files, where a missing folder is a 404 rather than a server error: the
    bundle may be built (``./dev build-ui``) while the server runs."""

    async def check_config(self) -> None:
        return None


def install(app: FastAPI, directory: Path = STATIC_DIR) -> None:
    """Routes for the bundle in ``directory``; registered after the API so ``/api`` wins."""
    app.mount("/assets", _Assets(directory=directory / "assets", check_dir=False), name="assets")

    def index() -> Response:
        page = directory / "index.html"
        if page.is_file():
            # Never cached: it names the hashed asset files of the current build.
            return FileResponse(page, headers={"Cache-Control": "no-cache"})
        return HTMLResponse(MISSING_PAGE)

    @app.get("/", include_in_schema=False)
    def root() -> Response:
        return index()

    @app.get("/{page:path}", include_in_schema=False)
    def page(page: str) -> Response:
        """Top-level files of the build (favicon), else the app itself: its router reads the path."""
        if page.startswith("api/") or page == "api" or page.startswith("assets/"):
            raise HTTPException(404, f"no such path /{page}; the API is listed at /api/docs")
        if "/" not in page and directory.is_dir():
            for entry in directory.iterdir():
                if entry.name == page and entry.is_file():
                    return FileResponse(entry)
        return index()
