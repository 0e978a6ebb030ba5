"""Access token for a server reachable from other machines.

On 127.0.0.1 only the local user can connect, so no token is asked for. Bound to any other
address, profiles (kernel names, file paths, host names) would be readable by anyone on the
network: every request then needs the token, as ``Authorization: Bearer <token>`` (scripts) or
the ``hyperscope_token`` cookie (browsers). A browser gets the cookie by opening the URL the server
printed once, with ``?token=``; the server answers with a redirect to the same URL without it, so
the token does not stay in the address bar, the history or a copied link.
"""

from __future__ import annotations

import ipaddress
import secrets
from typing import Final
from urllib.parse import urlencode

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send

COOKIE: Final = "hyperscope_token"
QUERY_PARAM: Final = "token"
#: a browser keeps the cookie this long; a restarted server has a new token anyway
COOKIE_MAX_AGE_S: Final = 30 * 24 * 3600

_MISSING: Final = (
    "this server needs its access token: open the URL it printed at start (with ?token=...) once, "
    "or send 'Authorization: Bearer <token>'"
)
_WRONG: Final = "the access token is wrong: use the one this server printed at start"
_FOREIGN_HOST: Final = (
    "this server answers only to 127.0.0.1, localhost or ::1, not to host {host!r}: it serves "
    "this machine only (start it with --host to serve others, with a token)"
)


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach ``host`` (``localhost``, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def new_token() -> str:
    return secrets.token_urlsafe(24)


def _matches(given: str | None, token: str) -> bool:
    return given is not None and secrets.compare_digest(given.encode(), token.encode())


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def _unauthorized(detail: str) -> Response:
    return JSONResponse({"detail": detail}, status_code=401, headers={"WWW-Authenticate": "Bearer"})


def host_name(header: str) -> str:
    """The host of a ``Host`` header, without its port: ``[::1]:80`` → ``::1``, ``a:80`` → ``a``."""
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


def install(app: FastAPI, token: str | None) -> None:
    """Guard every path of ``app`` (API, docs and static files) with ``token``.

    Without a token the server is for this machine only, and it also refuses requests whose
    ``Host`` is not a loopback name: otherwise a web page the user visits could point its own
    domain at 127.0.0.1 (DNS rebinding) and read the profiles through the user's browser.
    """
    app.add_middleware(Guard, token=token)


class Guard:
    """The check of ``install`` as a plain ASGI middleware: Starlette's ``@app.middleware("http")``
    runs each answer through a task group and memory streams of its own, which cost more server
    time than a cached dashboard's look-up (bench/soak.py)."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        refusal = (
            self._host_refusal(request) if self.token is None else self._token_refusal(request, self.token)
        )
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    @staticmethod
    def _host_refusal(request: Request) -> Response | None:
        host = host_name(request.headers.get("host", ""))
        if not is_loopback(host):
            return JSONResponse({"detail": _FOREIGN_HOST.format(host=host[:100])}, status_code=400)
        return None

    @staticmethod
    def _token_refusal(request: Request, token: str) -> Response | None:
        given = request.query_params.get(QUERY_PARAM)
        if given is not None:
            if not _matches(given, token):
                return _unauthorized(_WRONG)
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != QUERY_PARAM]
            # One leading slash: "//host/x" would send the browser to another site.
            target = "/" + request.url.path.lstrip("/") + (f"?{urlencode(rest)}" if rest else "")
            redirect = RedirectResponse(target, status_code=303)
            redirect.set_cookie(
                COOKIE,
                token,
                max_age=COOKIE_MAX_AGE_S,
                httponly=True,
                samesite="lax",
                secure=request.url.scheme == "https",
                path="/",
            )
            return redirect
        bearer = _bearer(request)
        cookie = request.cookies.get(COOKIE)
        if bearer is None and cookie is None:
            return _unauthorized(_MISSING)
        if not (_matches(bearer, token) or _matches(cookie, token)):
            return _unauthorized(_WRONG)
        return None
