"""The built front end: index at / and at the app's own paths, assets, and a page when unbuilt."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from hyperscope.server import create_app
from tests.server.conftest import Home, local

INDEX = "<!doctype html><title>hyperscope app</title>"


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    root = tmp_path / "static"
    (root / "assets").mkdir(parents=True)
    (root / "index.html").write_text(INDEX)
    (root / "assets" / "index-abc123.js").write_text("export const x = 1;")
    (root / "favicon.svg").write_text("<svg/>")
    return root


def test_index_assets_and_app_paths(home: Home, bundle: Path) -> None:
    with local(create_app(home.path, static_dir=bundle)) as client:
        root = client.get("/")
        assert root.status_code == 200 and root.text == INDEX and root.headers["cache-control"] == "no-cache"
        assert client.get("/jobs/3").text == INDEX  # the app's router owns its paths
        asset = client.get("/assets/index-abc123.js")
        assert asset.status_code == 200 and "export const" in asset.text
        assert asset.headers["content-type"].startswith(("text/javascript", "application/javascript"))
        assert client.get("/favicon.svg").text == "<svg/>"
        assert client.get("/assets/missing.js").status_code == 404
        assert client.get("/api/jobs").status_code == 200  # the API is not shadowed


@pytest.mark.parametrize(
    "path",
    [
        "/catalog.sqlite",
        "/../catalog.sqlite",
        "/assets/..%2F..%2Fcatalog.sqlite",
        "/assets/../../../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/..%2F..%2F..%2Fetc%2Fpasswd",
        "/profiles",
    ],
)
def test_no_file_outside_the_bundle(home: Home, bundle: Path, path: str) -> None:
    with local(create_app(home.path, static_dir=bundle)) as client:
        answer = client.get(path)
        assert answer.status_code in (200, 404)
        assert answer.content in (INDEX.encode(), answer.content if answer.status_code == 404 else b"")
        assert b"SQLite format" not in answer.content and b"root:" not in answer.content


def test_missing_bundle_says_how_to_build_it(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "./dev build-ui" in page.text and "/api/jobs" in page.text
    assert "./dev build-ui" in client.get("/jobs/3").text
    assert client.get("/assets/index.js").status_code == 404


def test_a_link_out_of_the_bundle_is_not_followed(home: Home, bundle: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0")
    (bundle / "passwd").symlink_to("/etc/passwd")
    (bundle / "secret.txt").symlink_to(secret)
    (bundle / "assets" / "leak.js").symlink_to(secret)
    with local(create_app(home.path, static_dir=bundle)) as client:
        for path in ("/passwd", "/secret.txt"):
            answer = client.get(path)
            assert answer.status_code == 200 and answer.text == INDEX  # the app, not the file
        assert client.get("/assets/leak.js").status_code == 404
        assert client.get("/favicon.svg").text == "<svg/>"  # regular files still are


def test_pages_and_answers_carry_security_headers(home: Home, bundle: Path) -> None:
    with local(create_app(home.path, static_dir=bundle, token="t0ken")) as client:
        for path, headers in (
            ("/", {"Authorization": "Bearer t0ken"}),
            ("/assets/index-abc123.js", {"Authorization": "Bearer t0ken"}),
            ("/api/jobs", {"Authorization": "Bearer t0ken"}),
            ("/api/jobs", {}),  # a 401 too
        ):
            answer = client.get(path, headers=headers)
            assert answer.headers["x-content-type-options"] == "nosniff", path
            csp = answer.headers["content-security-policy"]
            assert "frame-ancestors 'none'" in csp and "script-src 'self';" in csp, path
            assert answer.headers["x-frame-options"] == "DENY"
        docs = client.get("/api/docs", headers={"Authorization": "Bearer t0ken"})
        assert docs.status_code == 200 and "frame-ancestors 'none'" in docs.headers["content-security-policy"]
