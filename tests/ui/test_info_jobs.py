"""Profile info and the Jobs table in real Chromium: the GPUs each rank ran on (not every GPU its
trace lists as visible), hosts a trace does not name, the jobs' events/size/duration/nodes
columns, and creation times typed as ISO dates in a stated time zone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hyperscope import Store
from hyperscope.store.synth import SynthSpec, write_job
from tests.ui.conftest import Served, _serve, screenshot
from tests.ui.pages import TIMEOUT_MS, load_job, open_jobs, wait_jobs

JOB = "info-4ranks"
NAMELESS = "no-host-2ranks"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """4 generated ranks on node-0 (rank r on GPU r, each trace listing 8 GPUs), and a job whose
    traces name no host, as Kineto's do."""
    root = tmp_path_factory.mktemp("ui-info")
    home = root / "home"
    with Store(home) as store:
        store.import_traces(write_job(root / "a", SynthSpec(ranks=4, steps=3, ops_per_step=10)), JOB)
        store.import_traces(
            write_job(root / "b", SynthSpec(ranks=2, steps=2, ops_per_step=5, node="")), NAMELESS
        )
    yield from _serve(home, JOB, 4)


def open_info(pg: Any, served: Served, job: str) -> None:
    open_jobs(pg, served.url)
    load_job(pg, job)
    pg.click("a[data-route=info]")
    pg.wait_for_function(
        "(job) => { const i = document.querySelector('#info'); return i.dataset.state === 'ready' && "
        "i.querySelector('[data-field=Job]').textContent.includes(job); }",
        arg=job,
        timeout=TIMEOUT_MS,
    )


def test_info_lists_the_gpus_each_rank_ran_on(page: Any, served: Served) -> None:
    open_info(page, served, JOB)
    gpus = page.eval_on_selector_all(
        ".ranks-table tbody tr", "rs => rs.map(r => r.querySelector('[data-col=gpus]').textContent)"
    )
    assert gpus == [f"GPU {r} · NVIDIA H100 80GB HBM3 · 85.05 GB" for r in range(4)]
    visible = page.eval_on_selector_all(
        ".ranks-table tbody tr", "rs => rs.map(r => r.querySelector('[data-col=visible]').textContent)"
    )
    assert visible == ["8"] * 4
    assert page.inner_text("[data-field=Devices]") == "4 × NVIDIA H100 80GB HBM3 (each trace lists 8 visible)"
    assert page.inner_text("[data-field=Hosts]") == "node-0"
    screenshot(page, "info-gpus-per-rank")


def test_info_says_when_no_host_is_recorded(page: Any, served: Served) -> None:
    open_info(page, served, NAMELESS)
    assert page.inner_text("[data-field=Hosts]") == "not recorded in the traces"
    assert "imported Kineto traces do not name their host" in page.inner_text("#info .notes")
    assert page.inner_text("[data-field=Devices]").startswith("2 × NVIDIA H100 80GB HBM3")


def _cells(pg: Any, job: str) -> dict[str, str]:
    return dict(
        pg.eval_on_selector_all(
            f"#jobs-table tr[data-job='{job}'] td[data-col]",
            "cs => cs.map(c => [c.dataset.col, c.textContent])",
        )
    )


def _profile(served: Served, job: str) -> tuple[int, int, int, int]:
    """events, bytes on disk, traced span and the job's creation time, as the catalog has them."""
    with Store(served.home) as store:
        p = store.profile(job)
        found = store.catalog.job(job)
        assert p.meta.ts_min_ns is not None and p.meta.ts_max_ns is not None
        return p.meta.events, found.profiles[-1].bytes, p.meta.ts_max_ns - p.meta.ts_min_ns, found.created_ns


def test_jobs_table_has_events_size_duration_and_nodes(page: Any, served: Served) -> None:
    open_jobs(page, served.url)
    events, size, span_ns, _ = _profile(served, JOB)
    cells = _cells(page, JOB)
    assert cells["events"] == f"{events:,}"
    assert cells["size"].endswith(("KB", "MB")) and float(cells["size"].split()[0]) > 0
    sel = f"#jobs-table tr[data-job='{JOB}'] td[data-col=%s]"
    assert page.get_attribute(sel % "size", "title") == f"{size:,} bytes on disk"
    assert page.get_attribute(sel % "duration", "title") == f"{span_ns:,} ns traced"
    assert cells["duration"].endswith((" ms", " s")), cells["duration"]
    assert cells["nodes"] == "node-0"
    assert _cells(page, NAMELESS)["nodes"] == "not recorded"
    # the new columns sort, on the server
    page.click("#jobs-table th[data-sort=events]")
    wait_jobs(page, [JOB, NAMELESS])
    page.click("#jobs-table th[data-sort=events]")
    wait_jobs(page, [NAMELESS, JOB])
    page.click("#jobs-table th[data-sort=size]")
    wait_jobs(page, [JOB, NAMELESS])
    screenshot(page, "jobs-columns")


def test_creation_time_search_takes_iso_dates_in_a_stated_zone(browser: Any, served: Served) -> None:
    # a browser 9 hours east of UTC: local and UTC readings of a typed time differ
    context = browser.new_context(viewport={"width": 1400, "height": 900}, timezone_id="Asia/Tokyo")
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        open_jobs(page, served.url)
        assert page.get_attribute("#created-after", "type") == "text"
        zone = page.inner_text("#jobs-tz option:checked")
        assert zone == "Asia/Tokyo (UTC+09:00)"
        assert "UTC+09:00" in page.inner_text("#jobs-table th[data-sort=created]")
        created = {j: _profile(served, j)[3] for j in (JOB, NAMELESS)}
        later = max(created, key=lambda j: created[j])
        stamp = created[later] // 10**9  # whole seconds: what a typed time can say
        utc = page.evaluate(f"new Date({stamp * 1000}).toISOString()")  # YYYY-MM-DDTHH:MM:SS.000Z
        local = page.evaluate(
            f"new Date({stamp * 1000} + 32400000).toISOString()"  # the same instant on Tokyo's clock
        )
        shown = page.inner_text(f"#jobs-table tr[data-job='{later}'] td[data-col=created]")
        assert shown == f"{local[:10]} {local[11:19]}"  # in the stated zone, ISO, 24-hour
        expect_after = [j for j in (NAMELESS, JOB) if created[j] >= stamp * 10**9]

        def typed(field: str, text: str) -> None:
            page.fill(field, text)
            page.press(field, "Enter")

        typed("#created-after", f"{local[:10]} {local[11:19]}")  # local clock time, to the second
        wait_jobs(page, expect_after)
        typed("#created-after", "")
        wait_jobs(page, [NAMELESS, JOB])
        # the same instant read in UTC: switch the zone, type the UTC clock time
        page.select_option("#jobs-tz", "UTC")
        assert "UTC" in page.inner_text("#jobs-table th[data-sort=created]")
        shown = page.inner_text(f"#jobs-table tr[data-job='{later}'] td[data-col=created]")
        assert shown == f"{utc[:10]} {utc[11:19]}"
        typed("#created-after", f"{utc[:10]}T{utc[11:19]}")
        wait_jobs(page, expect_after)
        # a date alone is that day's first second: created before today (UTC), nothing
        typed("#created-after", "")
        typed("#created-before", utc[:10])
        wait_jobs(page, [])
        assert "No jobs match" in page.inner_text("#jobs-table")
        # a US-style date is refused on the page, naming what was typed and what is expected
        typed("#created-before", "12/01/2026 3pm")
        msg = page.inner_text("#jobs-date-error")
        assert "12/01/2026 3pm" in msg and "YYYY-MM-DD" in msg
        assert page.get_attribute("#created-before", "aria-invalid") == "true"
        typed("#created-before", "2026-02-30")  # no such day
        assert "2026-02-30" in page.inner_text("#jobs-date-error")
        screenshot(page, "jobs-date-error")
        typed("#created-before", "")
        wait_jobs(page, [NAMELESS, JOB])
        assert page.inner_text("#jobs-date-error") == ""
    finally:
        context.close()
    assert not errors, errors


def test_info_on_the_dlrm_traces(page: Any, real: Served) -> None:
    """The issue's case: 8 Kineto traces, each listing all 8 V100s and no host."""
    open_info(page, real, real.job)
    gpus = page.eval_on_selector_all(
        ".ranks-table tbody tr", "rs => rs.map(r => r.querySelector('[data-col=gpus]').textContent)"
    )
    assert gpus == [f"GPU {r} · Tesla V100-SXM2-32GB · 34.08 GB" for r in range(8)]
    assert page.inner_text("[data-field=Hosts]") == "not recorded in the traces"
    # one host not named: the 8 ranks' GPU indices are counted as one host's
    assert page.inner_text("[data-field=Devices]") == "8 × Tesla V100-SXM2-32GB (each trace lists 8 visible)"
