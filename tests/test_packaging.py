"""`pip install .` with no extras gives a working `import`, `report` and `ui`: every module the
package imports at run time is a declared dependency, and the wheel a release would build (with
the UI bundle) works in a fresh virtualenv that sees nothing of this one."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os
import re
import signal
import subprocess
import sys
import tomllib
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest

from hyperscope.store import _creader
from hyperscope.store.synth import SynthSpec, write_job

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "hyperscope"
#: imported only where the user asked for it (capture), and installed by the user: torch itself, and
#: the frameworks of the `tensorflow` and `jax` extras, with protobuf (`google`), the jax extra's
#: XSpace decoder (module -> the extra that declares it, and its distribution)
OPTIONAL: dict[str, tuple[str, str]] = {
    "torch": ("", "torch"), "jax": ("jax", "jax"), "tensorflow": ("tensorflow", "tensorflow"),
    "google": ("jax", "protobuf"),
}  # fmt: skip


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return {_normal(re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0]) for d in project["dependencies"]}


def _imported_modules() -> dict[str, Path]:
    """Top-level modules the package's source imports (absolute imports only), and one file each."""
    found: dict[str, Path] = {}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "hyperscope":
                    found.setdefault(top, path)
    return found


def test_every_module_imported_at_run_time_is_a_declared_dependency() -> None:
    declared = _declared()
    owners = importlib.metadata.packages_distributions()
    modules = _imported_modules()
    assert {"numpy", "duckdb", "pyarrow", "fastapi"} <= set(modules)  # the scan sees imports
    missing = []
    for module, where in sorted(modules.items()):
        if module in OPTIONAL:
            continue
        dists = {_normal(d) for d in owners.get(module, [module])}
        if not dists & declared:
            missing.append(f"{module} ({where.relative_to(REPO)}; distribution {sorted(dists)})")
    assert not missing, f"imported but not in [project] dependencies: {missing}"
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for module, (extra, dist) in OPTIONAL.items():
        if extra:  # an optional framework is declared by its extra
            assert extra in extras and any(_normal(d).startswith(dist) for d in extras[extra]), module


def _cache() -> Path:
    """Wheels of the dependencies, kept between runs: a fresh venv installs from them offline."""
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "hyperscope-tests" / "wheelhouse"
    root.mkdir(parents=True, exist_ok=True)
    return root


def _pip(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )


@pytest.mark.slow
def test_the_wheel_works_in_a_fresh_venv(tmp_path: Path) -> None:
    if not (SRC / "server" / "static" / "index.html").is_file():
        pytest.skip("the UI bundle is not built (./dev builds it with npm): a release wheel ships it")
    isolation = [] if importlib.util.find_spec("hatchling") is None else ["--no-build-isolation"]
    built = _pip(
        Path(sys.executable), "wheel", "--no-deps", *isolation, "-w", str(tmp_path / "dist"), str(REPO)
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("hyperscope-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        assert "hyperscope/server/static/index.html" in zf.namelist()
        # the real GPU recording `hyperscope demo` imports where there is no GPU
        assert "hyperscope/_samples/h200_transformer_bf16.pt.trace.json.gz" in zf.namelist()
        # the compiled reader's C files (without them an import quietly takes the DuckDB path)
        root = Path(_creader.__file__).parents[2]  # the directory that holds hyperscope/
        for c_file in (*_creader.SOURCES, *_creader.HEADERS):
            assert c_file.relative_to(root).as_posix() in zf.namelist(), c_file
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    house = _cache()
    offline = ["install", "--no-index", "--find-links", str(house), str(wheel)]
    installed = _pip(python, *offline)
    if installed.returncode != 0:  # first run, or the dependencies changed: fill the wheelhouse
        fetched = _pip(python, "download", "-d", str(house), str(wheel))
        assert fetched.returncode == 0, fetched.stderr
        for ours in house.glob("hyperscope-*"):
            ours.unlink()
        installed = _pip(python, *offline)
    assert installed.returncode == 0, installed.stderr
    # nothing of this checkout or venv: not its source on sys.path, not its packages
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "HYPERSCOPE"))}
    env |= {"COLUMNS": "200", "HYPERSCOPE_HOME": str(tmp_path / "home")}
    where = subprocess.run(
        [str(python), "-c", "import hyperscope, numpy; print(hyperscope.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=True,
    )
    assert str(venv) in where.stdout, where.stdout
    cli = str(venv / "bin" / "hyperscope")
    traces = write_job(tmp_path / "traces", SynthSpec(ranks=2, steps=2, ops_per_step=8))
    run = {"capture_output": True, "text": True, "env": env, "cwd": tmp_path, "timeout": 300}
    imported = subprocess.run([cli, "import", str(traces[0].parent), "--job", "wheel"], **run)  # type: ignore[call-overload]
    assert imported.returncode == 0 and "Traceback" not in imported.stderr, imported.stderr
    assert "imported 2 file(s)" in imported.stdout
    report = subprocess.run([cli, "report", "wheel"], **run)  # type: ignore[call-overload]
    assert report.returncode == 0 and "Traceback" not in report.stderr, report.stderr
    assert "ncclKernel" in report.stdout
    ui = subprocess.Popen(
        [cli, "ui", "--port", "0", "--no-browser"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    try:
        assert ui.stdout is not None
        lines = []
        for line in ui.stdout:
            lines.append(line)
            if "Ctrl+C" in line:
                break
        found = re.search(r"hyperscope UI on (http://\S+/)", "".join(lines))
        assert found, lines
        with urllib.request.urlopen(found.group(1), timeout=60) as page:
            assert page.status == 200 and b"<html" in page.read().lower()
        with urllib.request.urlopen(found.group(1) + "api/jobs", timeout=60) as answer:
            assert b'"wheel"' in answer.read()
    finally:
        ui.send_signal(signal.SIGINT)
        try:
            ui.wait(timeout=30)
        except subprocess.TimeoutExpired:
            ui.kill()
            ui.wait()
