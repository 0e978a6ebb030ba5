"""The access token: header, one-time URL parameter and cookie; 401 for everything else."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from hyperscope.server import create_app
from hyperscope.server.auth import COOKIE, is_loopback, new_token
from tests.server.conftest import Home

TOKEN = "s3cret-token"


@pytest.fixture
def guarded(home: Home, tmp_path: Path) -> Iterator[TestClient]:
    bundle = tmp_path / "bundle"
    (bundle / "assets").mkdir(parents=True)
    (bundle / "index.html").write_text("<!doctype html><title>app</title>")
    (bundle / "assets" / "app.js").write_text("console.log('app')")
    app = create_app(home.path, token=TOKEN, static_dir=bundle)
    with TestClient(app, follow_redirects=False) as client:
        yield client


@pytest.mark.parametrize("path", ["/api/jobs", "/", "/assets/app.js", "/api/openapi.json", "/api/docs"])
def test_everything_needs_the_token(guarded: TestClient, path: str) -> None:
    missing = guarded.get(path)
    assert missing.status_code == 401 and "token" in missing.json()["detail"]
    wrong = guarded.get(path, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and "wrong" in wrong.json()["detail"]
    assert guarded.get(path, headers={"Authorization": "Basic " + TOKEN}).status_code == 401
    assert guarded.get(path, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_wrong_cookie_is_refused(guarded: TestClient) -> None:
    guarded.cookies.set(COOKIE, "nope")
    assert guarded.get("/api/jobs").status_code == 401


def test_url_token_sets_a_cookie_and_redirects_without_it(guarded: TestClient) -> None:
    answer = guarded.get(f"/api/jobs?limit=2&token={TOKEN}&search=h200")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/api/jobs?limit=2&search=h200"
    cookie = answer.headers["set-cookie"]
    assert (
        cookie.startswith(f"{COOKIE}={TOKEN};") and "HttpOnly" in cookie and "samesite=lax" in cookie.lower()
    )
    # the client now holds the cookie: the page, its assets and the API work without the header
    assert guarded.get("/api/jobs?limit=2&search=h200").json()["total"] == 1
    assert guarded.get("/").text.startswith("<!doctype html><title>app")
    assert guarded.get("/assets/app.js").status_code == 200


def test_wrong_url_token_sets_nothing(guarded: TestClient) -> None:
    answer = guarded.get("/?token=nope")
    assert answer.status_code == 401 and "set-cookie" not in answer.headers
    assert guarded.get("/").status_code == 401


def test_redirect_never_leaves_the_site(guarded: TestClient) -> None:
    answer = guarded.get(f"//evil.example/x?token={TOKEN}")
    assert answer.status_code == 303 and answer.headers["location"].startswith("/")
    assert not answer.headers["location"].startswith("//")


def test_no_token_no_check(client: TestClient) -> None:
    assert client.get("/api/jobs").status_code == 200
    assert client.get("/api/jobs?token=anything").status_code == 200  # not a guarded server


@pytest.mark.parametrize("host", ["127.0.0.1:8321", "localhost:8321", "[::1]:8321", "localhost", "127.0.0.2"])
def test_tokenless_server_answers_loopback_names(client: TestClient, host: str) -> None:
    assert client.get("/api/jobs", headers={"Host": host}).status_code == 200


@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:8321", "10.0.0.5:8321", "localhost.evil.example", ""]
)
def test_tokenless_server_refuses_other_host_names(client: TestClient, host: str) -> None:
    """A page on evil.example whose name now resolves to 127.0.0.1 (DNS rebinding) reads nothing."""
    for path in ("/api/jobs", "/"):
        answer = client.get(path, headers={"Host": host})
        assert answer.status_code == 400 and "this machine only" in answer.json()["detail"]


def test_guarded_server_answers_any_host_name(guarded: TestClient) -> None:
    answer = guarded.get(
        "/api/jobs", headers={"Host": "gpu-box.example:8321", "Authorization": f"Bearer {TOKEN}"}
    )
    assert answer.status_code == 200


def test_loopback_and_tokens() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "localhost", "::1", "[::1]", "127.1.2.3"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.5", "example.org", ""))
    assert new_token() != new_token() and len(new_token()) >= 32
