"""The default dashboard of a finished profile, computed once and kept beside it.

At ten million events the whole-profile dashboard takes seconds to compute, and it is the first
thing the UI asks for. A finished profile never changes, so ``hyperscope import``, the end of
``hyperscope profile`` and the server (the first time it computes one) store the answer in
``<profile>/derived/``; later looks, from any process, read it back in milliseconds.

The file name carries a digest of the analysis code itself, so a hyperscope whose analyses
changed never reads an answer an older one computed: it computes and stores its own. Storing is
best effort: a read-only store only loses the speed-up.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import orjson

from hyperscope.analysis._common import ALL
from hyperscope.analysis.dashboard import BUCKETS, TOP_K, dashboard, to_json
from hyperscope.store.derived import DERIVED_DIR, source_digest
from hyperscope.store.profile import Profile

log = logging.getLogger("hyperscope.analysis")

def code_digest() -> str:
    """A digest of every analysis module's source: what the stored answers were computed by."""
    return source_digest(Path(__file__).parent)


def dashboard_path(profile: Profile, top_k: int = TOP_K, buckets: int = BUCKETS) -> Path:
    return profile.path / DERIVED_DIR / f"dashboard-{code_digest()}-k{top_k}-b{buckets}.json"


def load_dashboard(profile: Profile, top_k: int = TOP_K, buckets: int = BUCKETS) -> dict[str, Any] | None:
    """The stored whole-profile dashboard (``to_json`` form), or ``None`` when there is none."""
    try:
        data = orjson.loads(dashboard_path(profile, top_k, buckets).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def save_dashboard(
    profile: Profile, tables: dict[str, Any], top_k: int = TOP_K, buckets: int = BUCKETS
) -> bool:
    """Keep ``tables`` (``to_json`` form) beside the profile; False when the store is read-only."""
    path = dashboard_path(profile, top_k, buckets)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(exist_ok=True)
        tmp.write_bytes(orjson.dumps(tables))
        tmp.replace(path)  # readers see the whole answer or none
    except OSError as exc:
        log.debug("hyperscope: the dashboard of %s is not stored: %s", profile.path, exc)
        tmp.unlink(missing_ok=True)
        return False
    return True


def precompute_dashboard(profile: Profile) -> dict[str, Any]:
    """Compute the default whole-profile dashboard and keep it beside the profile."""
    tables = to_json(dashboard(profile, ALL, top_k=TOP_K, buckets=BUCKETS))
    save_dashboard(profile, tables)
    return tables


def precompute_job(home: Path, job: str, profile_id: str | None = None) -> float | None:
    """Precompute for a job's (newest) profile once it is finished; the seconds it took, or None
    when the job is still running (its profile still grows) or the computation failed."""
    import time

    from hyperscope.store.catalog import JobStatus
    from hyperscope.store.store import Store

    with Store(home) as store:
        if store.job(job).status in (JobStatus.IN_PROGRESS, JobStatus.STOPPING):
            return None
        profile = store.profile(job, profile_id)
    started = time.perf_counter()
    try:
        precompute_dashboard(profile)
    except Exception as exc:  # the profile is stored either way; the UI computes on demand
        log.warning("hyperscope: the dashboard of %s was not precomputed: %s", job, exc)
        return None
    return time.perf_counter() - started
