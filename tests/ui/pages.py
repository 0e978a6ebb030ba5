"""What the browser tests do on the page, and how they read values back from chart options."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from tests.ui.harness import OPTION_JS

TIMEOUT_MS = 60_000


# Recorded from the page's first script on: the address changes, tab clicks and route changes a
# failed wait reports (a tab click once left CI's page on the timeline, not reproduced here).
NAVIGATION_LOG_JS = """
(() => {
  const log = [];
  window.__navlog = log;
  const push = (line) => {
    log.push(`${Math.round(performance.now())} ${line}`);
    if (log.length > 200) log.shift();
  };
  const replace = history.replaceState.bind(history);
  history.replaceState = (s, t, url) => { push(`replaceState ${url}`); return replace(s, t, url); };
  window.addEventListener(
    "hashchange", (e) => push(`hashchange to #${e.newURL.split("#")[1]}, now ${location.hash}`), true
  );
  document.addEventListener("click", (e) => {
    const a = e.target instanceof Element ? e.target.closest("a, button") : null;
    push(`click ${a ? a.outerHTML.slice(0, 90) : String(e.target)}`);
    const route = () => document.body.dataset.route;
    setTimeout(() => push(`after: prevented=${e.defaultPrevented} hash=${location.hash} route=${route()}`));
  }, true);
})();
"""


def navigation_log(pg: Any) -> str:
    """The last address changes, clicks and routes of the page (see NAVIGATION_LOG_JS)."""
    try:
        lines = pg.evaluate("(window.__navlog || []).slice(-40)")
    except Exception as exc:  # the page itself may be what failed
        return f"(no navigation log: {exc})"
    return "\n  ".join(["navigation log:", *map(str, lines)])


def open_jobs(pg: Any, url: str) -> None:
    pg.goto(f"{url}/#/jobs")
    pg.wait_for_selector("#jobs-page[data-state=ready]", timeout=TIMEOUT_MS)


def job_names(pg: Any) -> list[str]:
    rows = pg.eval_on_selector_all("#jobs-table tbody tr[data-job]", "rs => rs.map(r => r.dataset.job)")
    return [str(n) for n in rows]


def wait_jobs(pg: Any, expect: list[str]) -> None:
    pg.wait_for_function(
        """(want) => {
            const page = document.querySelector('#jobs-page');
            const rows = document.querySelectorAll('#jobs-table tbody tr[data-job]');
            const got = [...rows].map(r => r.dataset.job);
            return page.dataset.state === 'ready' && JSON.stringify(got) === JSON.stringify(want);
        }""",
        arg=expect,
        timeout=TIMEOUT_MS,
    )


def search(pg: Any, text: str, expect: list[str]) -> None:
    pg.fill("#job-search", text)
    wait_jobs(pg, expect)


def wait_dashboard(pg: Any, renders_before: int = 0) -> None:
    """Until the dashboard finished a render after ``renders_before`` (fails on an error state)."""
    pg.wait_for_function(
        """(n) => {
            const hs = window.__hyperscope;
            return (hs.renders > n && hs.state !== 'loading') || hs.state === 'error';
        }""",
        arg=renders_before,
        timeout=TIMEOUT_MS,
    )
    state = pg.evaluate("window.__hyperscope.state")
    assert state == "ready", f"dashboard state {state}: {pg.inner_text('#dash-status')}"


def wait_info(pg: Any) -> None:
    """Until the Profile info page shows its panel; its state and text if it does not."""
    try:
        pg.wait_for_selector("#info[data-state=ready], #info[data-state=error]", timeout=TIMEOUT_MS)
    except Exception as exc:
        state = pg.evaluate("document.querySelector('#info')?.dataset.state ?? 'absent'")
        text = pg.inner_text("#info")
        raise AssertionError(
            f"Profile info still {state} after {TIMEOUT_MS} ms at {pg.url}: {text}\n{navigation_log(pg)}"
        ) from exc
    state = pg.evaluate("document.querySelector('#info').dataset.state")
    assert state == "ready", f"Profile info {state}: {pg.inner_text('#info')}"


def renders(pg: Any) -> int:
    return int(pg.evaluate("window.__hyperscope.renders"))


def load_job(pg: Any, job: str) -> None:
    before = renders(pg)
    pg.click(f"#jobs-table tr[data-job='{job}'] button[data-testid=load-job]")
    pg.wait_for_selector("#dashboard:not([hidden])")
    wait_dashboard(pg, before)


def option(pg: Any, name: str) -> dict[str, Any] | None:
    result = pg.evaluate(OPTION_JS, name)
    return result if result is None else dict(result)


def values(series: dict[str, Any]) -> list[Any]:
    return [d["value"] if isinstance(d, dict) else d for d in series["data"]]


def names(series: dict[str, Any]) -> list[str]:
    return [d["name"] for d in series["data"]]


def approx(x: Any) -> Any:
    return pytest.approx(x, rel=1e-9, abs=1e-9)


def check_charts(pg: Any, tables: dict[str, Any]) -> list[str]:
    """Every dashboard chart holds the analysis' numbers; returns the charts checked."""
    checked = []

    def chart(name: str) -> dict[str, Any] | None:
        opt = option(pg, name)
        empty = pg.get_attribute(f"[data-chart='{name}']", "data-empty") == "true"
        assert (opt is None) == empty, f"{name}: a chart and an empty state at once, or neither"
        checked.append(name)
        return opt

    job = tables["gpu_time_job"]["rows"]
    opt = chart("gpu_time_job")
    if job and job[0]["busy_ns"] > 0:
        assert opt is not None
        r = job[0]
        assert values(opt["series"][0]) == [r["busy_ns"], r["idle_ns"]]
        assert values(opt["series"][1]) == [r["compute_ns"], r["communication_ns"], r["memory_ns"]]
    else:
        assert opt is None
        assert "No GPU activity" in pg.inner_text("[data-chart='gpu_time_job']")

    for name, key in (("gpu_activity", "activity"), ("memory_ops", "kind"), ("precision", "precision")):
        rows = tables[name]["rows"]
        opt = chart(name)
        if opt is not None:
            assert names(opt["series"][0]) == [r[key] for r in rows]
            assert values(opt["series"][0]) == [r["total_ns"] for r in rows]

    kernels = tables["kernels"]["rows"]
    for name, column in (("kernels", "total_ns"), ("kernel_launches", "launches")):
        opt = chart(name)
        if kernels:
            assert opt is not None
            assert opt["yAxis"][0]["data"] == [r["name"] for r in [kernels[-1], *kernels[:-1]]]
            assert values(opt["series"][0]) == [r[column] for r in [kernels[-1], *kernels[:-1]]]

    for name in ("step_histogram", "latency_histogram"):
        rows = tables[name]["rows"]
        opt = chart(name)
        if any(r["count"] for r in rows):
            assert opt is not None
            assert values(opt["series"][0]) == [r["count"] for r in rows]

    rows = tables["ranks"]["rows"]
    opt = chart("ranks")
    if rows:
        assert opt is not None
        assert len(opt["xAxis"][0]["data"]) == len(rows)
        by_name = {s["name"]: values(s) for s in opt["series"]}
        for got, want in zip(by_name["mean step"], [r["mean_step_ns"] for r in rows], strict=True):
            assert got == (None if want is None else approx(want))
        assert by_name["GPU busy"] == [r["busy_ns"] for r in rows]
        assert by_name["communication"] == [r["communication_ns"] for r in rows]

    rows = tables["cpu_time"]["rows"]
    opt = chart("cpu_time")
    if rows and sum(r["active_ns"] for r in rows) > 0:
        assert opt is not None
        want = [sum(r["active_ns"] for r in rows), sum(r["idle_ns"] for r in rows)]
        assert values(opt["series"][0]) == want

    nodes = tables["gpu_utilization_nodes"]["rows"]
    opt = chart("gpu_utilization_nodes")
    if nodes:
        assert opt is not None
        lines = {s["name"]: [p[1] for p in s["data"]] for s in opt["series"]}
        per_node: dict[str, dict[int, float]] = defaultdict(dict)
        for r in nodes:
            per_node[r["node"] or "(unnamed node)"][r["bucket_start_ns"]] = r["util_pct"]
        for node, ys in per_node.items():
            assert lines[node] == approx(list(ys.values()))
        # all nodes: the node lines weighted by their GPU counts
        gpus: dict[str, set[tuple[int, int]]] = defaultdict(set)
        for r in tables["gpu_utilization"]["rows"]:
            gpus[r["node"] or "(unnamed node)"].add((r["rank"], r["device"]))
        weight = {node: max(1, len(gpus[node])) for node in per_node}
        starts = sorted({b for ys in per_node.values() for b in ys})
        want = [
            sum(ys.get(b, 0.0) * weight[n] for n, ys in per_node.items()) / sum(weight.values())
            for b in starts
        ]
        assert lines["all nodes"] == approx(want)

    for name in ("gpu_utilization", "cpu_utilization"):
        rows = tables[name]["rows"]
        opt = chart(name)
        if rows:
            assert opt is not None
            got = sorted(y for s in opt["series"] for _, y in s["data"])
            assert got == approx(sorted(r["util_pct"] for r in rows))
            assert sum(len(s["data"]) for s in opt["series"]) == len(rows)
    return checked


def tooltip_text(pg: Any, name: str, series: int = 0, index: int = 0) -> str:
    """Show a chart's tooltip for one data item; its text."""
    pg.evaluate(
        """([n, s, i]) => window.__hyperscope.charts[n].dispatchAction(
            {type: 'showTip', seriesIndex: s, dataIndex: i})""",
        [name, series, index],
    )
    selector = f"[data-chart='{name}'] .chart-body > div:last-child"
    pg.wait_for_function(
        "(sel) => { const el = document.querySelector(sel); return el && el.innerText.trim().length > 0; }",
        arg=selector,
        timeout=TIMEOUT_MS,
    )
    return str(pg.inner_text(selector))
