"""Categories as Kineto has written them over the years and for every device it knows: a trace
whose categories are renamed imports to the same kinds, GPU report and device rows; categories
hyperscope does not know, that look device-side, are named in a warning."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hyperscope import Store
from hyperscope.analysis import gpu_time
from hyperscope.store.synth import SynthSpec, write_job
from hyperscope.timeline.index import load

#: today's names → the names of another era or device
ERAS: dict[str, dict[str, str]] = {
    # PyTorch 1.8-1.10 (TensorBoard plugin samples): capitalised names, "stream N" device tids
    "legacy": {
        "cpu_op": "Operator",
        "cuda_runtime": "Runtime",
        "kernel": "Kernel",
        "gpu_memcpy": "Memcpy",
        "gpu_memset": "Memset",
        "user_annotation": "user_annotation",
    },
    "mtia": {"kernel": "mtia_ccp_events", "cuda_runtime": "mtia_runtime"},
    "privateuse1": {"cuda_runtime": "privateuse1_runtime"},
    "xpu": {"cuda_runtime": "xpu_runtime"},
}


def _renamed(src: Path, dst: Path, names: dict[str, str], *, stream_tids: bool = False) -> Path:
    """The generated trace (one event a line) with its categories renamed, bytes otherwise kept
    (a JSON round trip through floats would move the timestamps)."""
    lines = []
    for line in src.read_text().splitlines(keepends=True):
        cat = re.search(r'"cat":"([^"]*)"', line)
        if cat and cat.group(1) in names:
            line = line.replace(cat.group(0), f'"cat":"{names[cat.group(1)]}"')
        stream = re.search(r'"stream":(\d+)', line)
        if stream_tids and stream:
            line = re.sub(r'"tid":\d+', f'"tid":"stream {stream.group(1)}"', line)
        lines.append(line)
    dst.write_text("".join(lines))
    return dst


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_job(tmp_path_factory.mktemp("cats"), SynthSpec(ranks=1, steps=2, ops_per_step=12))[0]


@pytest.mark.parametrize("era", sorted(ERAS))
def test_every_era_imports_to_the_same_report(era: str, one_rank: Path, store: Store, tmp_path: Path) -> None:
    renamed = _renamed(one_rank, tmp_path / "rank0.json", ERAS[era], stream_tids=era == "legacy")
    assert renamed.read_bytes() != one_rank.read_bytes()
    today = store.import_traces([one_rank], "today")
    other = store.import_traces([renamed], era)
    assert other.warnings == [] and today.warnings == []
    a, b = store.profile("today"), store.profile(era)
    kinds = "SELECT kind, count(*), sum(dur_ns) FROM events GROUP BY kind ORDER BY kind"
    assert a.connect().sql(kinds).fetchall() == b.connect().sql(kinds).fetchall()
    assert gpu_time(a) == gpu_time(b) and gpu_time(b).rows[0].compute_ns > 0
    rows_a = [(r.side, r.a, r.b, r.stop - r.start) for r in load(a).rows]
    rows_b = [(r.side, r.a, r.b, r.stop - r.start) for r in load(b).rows]
    assert rows_a == rows_b and any(side == "device" for side, *_ in rows_b)


def test_unknown_device_categories_are_named_in_a_warning(
    one_rank: Path, store: Store, tmp_path: Path
) -> None:
    # an accelerator hyperscope does not know, and a category of no telling name but with a stream
    renamed = _renamed(one_rank, tmp_path / "rank0.json", {"kernel": "npu_kernel", "gpu_memset": "zap"})
    report = store.import_traces([renamed], "npu")
    assert len(report.warnings) == 1
    warning = report.warnings[0]
    assert str(renamed) in warning and "'npu_kernel'" in warning and "'zap'" in warning
    assert "'gpu_memcpy'" not in warning and "'cuda_runtime'" not in warning
    kinds = dict(
        store.profile("npu").connect().sql("SELECT cat, any_value(kind) FROM events GROUP BY cat").fetchall()
    )
    assert kinds["npu_kernel"] == "other"  # kept as written, every event stored


def test_the_cli_prints_the_warning(one_rank: Path, tmp_path: Path) -> None:
    renamed = _renamed(one_rank, tmp_path / "rank0.json", {"kernel": "npu_kernel"})
    env = {**os.environ, "HYPERSCOPE_HOME": str(tmp_path / "home"), "COLUMNS": "400"}
    proc = subprocess.run(
        [sys.executable, "-m", "hyperscope", "import", str(renamed), "--job", "npu"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "warning:" in proc.stderr and "npu_kernel" in proc.stderr
