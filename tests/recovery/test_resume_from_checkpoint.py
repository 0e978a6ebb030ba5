"""Resuming examples/resilient_ddp.py from its checkpoints (one rank, no Slurm): a corrupt newest
checkpoint is skipped with a warning, and the resumed run ends with the weights of one that never
stopped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.capture
torch = pytest.importorskip("torch", reason="the recovery tests train with PyTorch (./dev test installs it)")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "resilient_ddp.py"


def _train(tmp_path: Path, ck: str, out: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "HYPERSCOPE_"))}
    argv = [sys.executable, str(EXAMPLE), "--steps", "10", "--every", "2"]
    argv += ["--checkpoints", str(tmp_path / ck), "--out", str(tmp_path / out), *extra]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)


def test_a_corrupt_newest_checkpoint_is_skipped_and_the_one_before_resumes(tmp_path: Path) -> None:
    assert _train(tmp_path, "ref", "ref.pt").returncode == 0
    first = _train(tmp_path, "ck", "final.pt", "--fail-at", "6")
    assert first.returncode == 3
    newest = tmp_path / "ck" / "step-00000005"
    assert newest.is_dir()
    victim = next(p for p in sorted(newest.iterdir()) if p.name not in ("MANIFEST.json", "COMPLETE"))
    victim.write_bytes(victim.read_bytes()[:-7] + b"garbage")  # same size, wrong content

    resumed = _train(tmp_path, "ck", "final.pt")
    assert resumed.returncode == 0, resumed.stderr
    assert "attempt=1 start=4" in resumed.stdout  # step 3's checkpoint, not step 5's
    assert "step-00000005" in resumed.stderr and str(victim.name) in resumed.stderr
    ref, final = torch.load(tmp_path / "ref.pt"), torch.load(tmp_path / "final.pt")
    assert all(torch.equal(ref[k], final[k]) for k in ref)
