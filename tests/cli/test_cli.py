"""The real `hyperscope` command, end to end, as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tracejson import load, normalized_events


def run(home: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HYPERSCOPE_HOME": str(home), "COLUMNS": "200"}
    proc = subprocess.run(
        [sys.executable, "-m", "hyperscope", *args], capture_output=True, text=True, env=env, timeout=300
    )
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_demo_imports_a_sample_and_prints_its_summary(tmp_path: Path) -> None:
    proc = run(tmp_path, "demo", "--synthetic", "--no-serve", "--ranks", "2", "--steps", "3")
    assert "imported as job demo" in proc.stdout
    assert "ncclKernel_AllReduce" in proc.stdout  # the top-kernels table
    # a generated sample's GPU rows are made up: the real GPU recording comes beside it
    assert "a real GPU recording" in proc.stdout and "job h200-sample" in proc.stdout
    again = run(tmp_path, "demo", "--synthetic", "--no-serve", "--ranks", "2", "--steps", "3")
    assert "imported as job demo-2" in again.stdout  # never overwrites an earlier job
    assert "is job h200-sample already" in again.stdout  # the recording is imported once
    listed = json.loads(run(tmp_path, "jobs", "--json").stdout)
    assert [j["name"] for j in listed] == ["demo-2", "h200-sample", "demo"]
    assert listed[0]["ranks"] == 2 and listed[0]["status"] == "Completed"
    none = run(tmp_path / "other", "demo", "--synthetic", "--no-serve", "--no-gpu-sample", "--ranks", "1")
    assert "h200-sample" not in none.stdout


def test_demo_on_a_machine_without_a_gpu_imports_the_real_gpu_recording(tmp_path: Path) -> None:
    """What a newcomer without a GPU gets besides the CPU run: the shipped H200 recording, with
    its kernels, launches and copies, as a job of its own whose dashboard is ready."""
    run(tmp_path, "demo", "--synthetic", "--no-serve", "--ranks", "1", "--steps", "2")
    listed = {j["name"]: j for j in json.loads(run(tmp_path, "jobs", "--json").stdout)}
    sample = listed["h200-sample"]
    assert sample["status"] == "Completed" and sample["profiles"][0]["events"] > 10_000
    report = json.loads(run(tmp_path, "report", "h200-sample", "--json").stdout)
    (gpu,) = report["tables"]["gpu_time"]["rows"]
    assert gpu["compute_ns"] > 0 and gpu["memory_ns"] > 0  # kernels and copies, on one GPU


@pytest.mark.capture
def test_demo_profiles_the_example_for_real(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    proc = run(tmp_path, "demo", "--no-serve", "--steps", "3")
    assert "profiling train_transformer.py" in proc.stdout and "profiled as job demo" in proc.stdout
    listed = {j["name"]: j for j in json.loads(run(tmp_path, "jobs", "--json").stdout)}
    assert listed["demo"]["status"] == "Completed"
    assert (
        listed["demo"]["profiles"][0]["source"] == "capture" and listed["demo"]["profiles"][0]["events"] > 0
    )
    # no GPU here: the CPU run recorded no kernel, so the real GPU recording was imported too
    assert "a real GPU recording" in proc.stdout and set(listed) == {"demo", "h200-sample"}


def test_import_jobs_export_rm(tmp_path: Path, synth_job: list[Path]) -> None:
    home = tmp_path / "home"
    proc = run(home, "import", str(synth_job[0].parent), "--job", "resnet-a")
    assert "4 rank(s)" in proc.stdout and " 0 skipped" in proc.stdout
    run(home, "import", str(synth_job[1]), "--job", "llama", "--rank", "5")

    assert "resnet-a" in run(home, "jobs", "--search", "resnet").stdout
    assert "llama" not in run(home, "jobs", "--search", "resnet").stdout
    assert "no jobs match" in run(home, "jobs", "--status", "Failed").stdout
    assert "llama" in run(home, "jobs", "--since", "2000-01-01").stdout
    assert "no jobs match" in run(home, "jobs", "--since", "2999-01-01").stdout
    bad = run(home, "jobs", "--since", "yesterday", ok=False)
    assert bad.returncode == 2 and "2026-11-30" in bad.stderr

    out = tmp_path / "llama.json.gz"
    assert "wrote" in run(home, "export", "llama", "--chrome", str(out)).stdout
    assert load(out)["distributedInfo"]["rank"] == 1  # the file's own distributedInfo is kept
    assert normalized_events(load(out)) == normalized_events(load(synth_job[1]))
    run(home, "export", "resnet-a", "--chrome", str(tmp_path / "r.json"))
    assert sorted(p.name for p in tmp_path.glob("r.rank*.json")) == [f"r.rank{i}.json" for i in range(4)]

    assert "removed job llama" in run(home, "rm", "llama").stdout
    missing = run(home, "export", "llama", "--chrome", str(out), ok=False)
    assert missing.returncode != 0 and "no job named" in missing.stderr


def test_show_summarizes_steps_and_kernels(tmp_path: Path, synth_job: list[Path]) -> None:
    run(tmp_path, "import", *map(str, synth_job), "--job", "s")
    shown = run(tmp_path, "show", "s").stdout
    assert "top kernels by time" in shown and "step 12" in shown.replace(",", "")


@pytest.mark.parametrize("command", ["import", "jobs", "export", "rm", "show", "demo"])
def test_help_teaches(tmp_path: Path, command: str) -> None:
    text = run(tmp_path, command, "--help").stdout
    assert "Usage: " in text and "--home" in text
    assert len(text.splitlines()) > 6


def test_top_level_help_shows_the_workflow(tmp_path: Path) -> None:
    text = run(tmp_path, "--help").stdout
    for word in ("demo", "import", "jobs", "export", "HYPERSCOPE_HOME"):
        assert word in text
    # every command's first sentence whole, not cut short with "..."
    commands = text.split("Commands:", 1)[1]
    assert "..." not in commands
    assert "then serve the web UI on it" in " ".join(commands.split())  # demo: to its end
