"""Checkpoints with real PyTorch on the real filesystem: round trips, async snapshots, keeping K,
corrupt and half-written checkpoints skipped, disk errors surfaced, resuming gives the same model."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import hyperscope.checkpoint as checkpoint
from hyperscope.checkpoint import Checkpointer, CheckpointError
from hyperscope.errors import UsageError

torch = pytest.importorskip("torch", reason="checkpoint tests need PyTorch (./dev test installs it)")


def _model(seed: int = 0) -> Any:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def _train(model: Any, opt: Any, steps: range) -> None:
    for step in steps:
        gen = torch.Generator().manual_seed(step)  # the data of a step depends on the step alone
        x = torch.randn(8, 16, generator=gen)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()


def _state(model: Any, opt: Any) -> dict[str, Any]:
    return {"model": model.state_dict(), "optim": opt.state_dict()}


def test_public_surface() -> None:
    assert sorted(checkpoint.__all__) == ["CheckpointError", "Checkpointer", "DIRECTORY_ENV", "Loaded"]
    for name in checkpoint.__all__:
        assert hasattr(checkpoint, name)


def test_round_trip_keeps_the_newest_k(tmp_path: Path) -> None:
    model = _model()
    opt = torch.optim.AdamW(model.parameters())
    ckpt = Checkpointer(tmp_path / "ck", keep=2)
    for step in (10, 20, 30):
        _train(model, opt, range(step - 10, step))
        ckpt.save(_state(model, opt), step, note="hello").result()
    assert ckpt.steps() == [30, 20]
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["step-00000020", "step-00000030"]
    latest = ckpt.load_latest()
    assert latest is not None and latest.step == 30
    for key, value in model.state_dict().items():
        assert torch.equal(latest.state["model"][key], value)
    manifest = (latest.path / "MANIFEST.json").read_text()
    assert '"note": "hello"' in manifest and '"sha256"' in manifest


def test_async_save_snapshots_the_state_before_training_goes_on(tmp_path: Path) -> None:
    model = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with Checkpointer(tmp_path / "ck", asynchronous=True) as ckpt:
        future = ckpt.save({"model": model.state_dict()}, 1)
        with torch.no_grad():  # training changes the weights in place right away
            for p in model.parameters():
                p.add_(1.0)
        assert future.result().name == "step-00000001"
        loaded = ckpt.load_latest()
    assert loaded is not None
    for key, value in before.items():
        assert torch.equal(loaded.state["model"][key], value)


def test_corrupt_newest_falls_back_to_the_one_before_with_a_warning(tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path / "ck", keep=3)
    for step in (1, 2):
        ckpt.save({"w": torch.full((1000,), float(step))}, step)
    newest = tmp_path / "ck" / "step-00000002" / "state.pt"
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte, same size
    newest.write_bytes(bytes(data))
    with pytest.warns(RuntimeWarning, match=r"step 2: .*state\.pt: SHA-256 .* \(corrupt\)"):
        loaded = ckpt.load_latest()
    assert loaded is not None and loaded.step == 1 and float(loaded.state["w"][0]) == 1.0


def test_truncated_and_unfinished_checkpoints_are_skipped(tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path / "ck", keep=5)
    for step in (1, 2, 3):
        ckpt.save({"w": torch.ones(100) * step}, step)
    state = tmp_path / "ck" / "step-00000003" / "state.pt"
    state.write_bytes(state.read_bytes()[:50])
    (tmp_path / "ck" / "step-00000002" / "COMPLETE").unlink()
    with pytest.warns(RuntimeWarning) as caught:
        loaded = ckpt.load_latest()
    assert loaded is not None and loaded.step == 1
    messages = [str(w.message) for w in caught]
    assert any("expected" in m and "truncated" in m for m in messages)
    assert any("no COMPLETE marker" in m for m in messages)


def test_nothing_to_resume_from(tmp_path: Path) -> None:
    assert Checkpointer(tmp_path / "none").load_latest() is None


def test_a_directory_is_required(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(checkpoint.DIRECTORY_ENV, raising=False)
    with pytest.raises(UsageError, match="HYPERSCOPE_CHECKPOINT_DIR"):
        Checkpointer()
    monkeypatch.setenv(checkpoint.DIRECTORY_ENV, str(tmp_path / "env"))
    assert Checkpointer().directory == tmp_path / "env"


def test_a_full_disk_is_an_error_naming_the_checkpoint_and_loses_nothing(tmp_path: Path) -> None:
    """A real full filesystem (a 4 MB tmpfs; mounting needs root, which CI has)."""
    from tests.capture.test_disk_failure import mounted

    small = tmp_path / "small"
    small.mkdir()
    with mounted("-t", "tmpfs", "-o", "size=4m", "tmpfs", target=small):
        ckpt = Checkpointer(small / "ck", keep=3)
        ckpt.save({"w": torch.ones(100_000)}, 1)  # 400 kB: fits
        with pytest.raises(CheckpointError, match=r"step-00000002\.tmp: checkpoint of step 2 not written"):
            ckpt.save({"w": torch.ones(2_000_000)}, 2)  # 8 MB: does not
        assert sorted(p.name for p in (small / "ck").iterdir()) == ["step-00000001"]
        loaded = ckpt.load_latest()
        assert loaded is not None and loaded.step == 1


def test_a_failed_async_save_is_raised_at_the_next_save(tmp_path: Path) -> None:
    target = tmp_path / "file-not-dir"
    target.write_text("in the way")  # the directory cannot be created: an OSError on the writer
    ckpt = Checkpointer(target, asynchronous=True)
    ckpt.save({"w": torch.ones(1)}, 1)
    with pytest.raises(CheckpointError, match="file-not-dir"):
        ckpt.save({"w": torch.ones(1)}, 2)
    ckpt.close()


def test_a_process_killed_mid_save_leaves_the_previous_checkpoints_intact(tmp_path: Path) -> None:
    directory = tmp_path / "ck"
    Checkpointer(directory).save({"w": torch.zeros(10)}, 1)
    script = textwrap.dedent(
        f"""
        import sys, torch
        from hyperscope.checkpoint import Checkpointer
        ckpt = Checkpointer({str(directory)!r}, asynchronous=True)
        ckpt.save({{"w": torch.ones(64 * 1024 * 1024)}}, 2)  # 256 MB: still writing when killed
        print("saving", flush=True)
        sys.stdin.read()
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "saving"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    ckpt = Checkpointer(directory)
    loaded = ckpt.load_latest()
    assert loaded is not None and loaded.step in (1, 2)  # 2 only if it finished before the kill
    if loaded.step == 1:
        assert torch.equal(loaded.state["w"], torch.zeros(10))
    ckpt.save({"w": torch.ones(3)}, 3)  # the next save clears what the dead one left
    assert not [p for p in directory.iterdir() if p.name.startswith(".")]


def test_resuming_from_the_last_checkpoint_gives_the_same_weights(tmp_path: Path) -> None:
    """The property auto-resume relies on: train 30 steps, or train 17, crash, resume from step 15."""
    straight = _model()
    opt = torch.optim.AdamW(straight.parameters(), lr=1e-2)
    _train(straight, opt, range(30))

    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ckpt = Checkpointer(tmp_path / "ck", asynchronous=True)
    for step in range(17):  # "crashes" after step 16; the last checkpoint is step 15's
        _train(model, opt, range(step, step + 1))
        if step % 5 == 0:
            ckpt.save(_state(model, opt), step)
    ckpt.close()

    resumed = _model(seed=123)  # a fresh process: other initial weights
    opt = torch.optim.AdamW(resumed.parameters(), lr=1e-2)
    latest = Checkpointer(tmp_path / "ck").load_latest()
    assert latest is not None and latest.step == 15
    resumed.load_state_dict(latest.state["model"])
    opt.load_state_dict(latest.state["optim"])
    _train(resumed, opt, range(latest.step + 1, 30))
    for key, value in straight.state_dict().items():
        assert torch.equal(resumed.state_dict()[key], value), key
