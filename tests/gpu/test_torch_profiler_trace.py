"""A trace that torch.profiler records on a real GPU today imports losslessly.

Runs where PyTorch sees a CUDA device (the GPU machine); skips elsewhere. Set
HYPERSCOPE_KEEP_TRACE to a directory to keep the recorded trace (it becomes a fixture).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from hyperscope import Store
from tests.tracejson import counts_by_kind, linked_in_source, linked_in_store, load, normalized_events

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]


def _record(path: Path) -> None:
    from torch.profiler import ProfilerActivity, profile, schedule

    model = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(d_model=256, nhead=4, batch_first=True), num_layers=2
    ).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    host_batch = torch.randn(16, 128, 256).pin_memory()
    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        schedule=schedule(wait=1, warmup=1, active=3),
        record_shapes=True,
        profile_memory=True,
        with_stack=True,
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for _ in range(5):
            batch = host_batch.cuda(non_blocking=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(batch).float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=False)  # memsets on the device
            loss.item()  # a sync and a DtoH copy
            prof.step()


def test_a_fresh_gpu_trace_imports_and_exports_losslessly(tmp_path: Path) -> None:
    keep = os.environ.get("HYPERSCOPE_KEEP_TRACE")
    trace = (Path(keep) if keep else tmp_path) / f"{torch.cuda.get_device_name(0).replace(' ', '_')}.json.gz"
    trace.parent.mkdir(parents=True, exist_ok=True)
    _record(trace)
    source = load(trace)
    with Store(tmp_path / "home") as store:
        report = store.import_traces([trace], "gpu")
        con = store.profile("gpu").connect()
        stored = Counter(
            {
                (ph, cat): n
                for ph, cat, n in con.sql("SELECT ph, cat, count(*) FROM events GROUP BY ALL").fetchall()
            }
        )
        assert stored == counts_by_kind(source)
        kinds = dict(con.sql("SELECT kind, count(*) FROM events GROUP BY kind").fetchall())
        for kind in ("kernel", "runtime", "memcpy", "step", "memory", "python", "cpu_op"):
            assert kinds.get(kind, 0) > 0, f"no {kind} events in {sorted(kinds)}"
        linked = linked_in_store(con)
        assert linked == linked_in_source([trace])
        assert linked >= kinds["kernel"]  # every kernel, memcpy and memset finds its launch
        out = store.export_chrome("gpu", tmp_path / "back.json")
        assert normalized_events(load(out[0])) == normalized_events(source)
        print(f"{trace.name}: {report.profile.events} events, kinds {kinds}, {linked} linked kernels")
