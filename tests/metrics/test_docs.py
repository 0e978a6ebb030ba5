"""docs/metrics.md and the Grafana dashboard name only series ``hyperscope metrics`` exports; the
dashboard is valid JSON and the scrape config valid YAML pointing at the default port."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import yaml

from hyperscope.metrics import DEFAULT_PORT, GpuStat, cluster_families, gpu_families
from tests.metrics.test_families import recorded, scrape

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "examples" / "grafana" / "hyperscope-dashboard.json"
DOC = ROOT / "docs" / "metrics.md"
NAME = re.compile(r"\bhyperscope_[a-z_]+[a-z]")


def exported() -> set[str]:
    snap = recorded()
    timed = [dataclasses.replace(b, step_ns=10**8, ts_ns=snap.now_ns) for b in snap.beats]
    snap = dataclasses.replace(snap, beats=timed)  # the recorded beats are untimed (an older format)
    gpu = GpuStat(0, "g", 1.0, 1.0, 1, 2, 50.0, 100.0, 0, 1, 79)
    got = scrape([*cluster_families(snap, {("1", 0): 0.05}), *gpu_families("n", [gpu])])
    return {*got, "hyperscope_cluster_known"}  # the exporter's own, beside the families


def test_the_dashboard_parses_and_queries_only_exported_series() -> None:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert len(exprs) >= 16
    named = {m for e in exprs for m in NAME.findall(e)}
    assert named and named <= exported(), named - exported()
    for needed in (
        "node_healthy",
        "job_goodput_ratio",
        "job_rank_step_seconds",
        "agent_actions_total",
        "gpu_",
    ):
        assert any(needed in n for n in named), needed
    variables = [v["query"] for v in dash["templating"]["list"] if v["type"] == "query"]
    assert all(set(NAME.findall(q["query"])) <= exported() for q in variables)


def test_the_docs_scrape_config_and_series_names() -> None:
    text = DOC.read_text()
    block = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert block is not None
    config = yaml.safe_load(block.group(1))
    assert config["scrape_configs"][0]["static_configs"][0]["targets"] == [f"127.0.0.1:{DEFAULT_PORT}"]
    named = set(NAME.findall(text))
    assert named <= exported(), named - exported()
    assert f"http://127.0.0.1:{DEFAULT_PORT}/metrics" in text
