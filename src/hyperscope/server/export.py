"""``GET /api/profiles/{id}/export``: a profile, or a time window of it, as Chrome-trace JSON.

The web UI's export button: what ``hyperscope export --chrome`` writes, as a download. One rank
is one Kineto-shaped JSON file (Perfetto, chrome://tracing and HTA load it; ``hyperscope import``
reads it back); several ranks are a ZIP of one such file per rank, since one JSON of several
ranks would mix their process ids (every rank's GPU 0 is pid 0). The file is written to a
temporary file first (a profile of millions of events is hundreds of MB: never in memory) and
removed once sent.
"""

from __future__ import annotations

import os
import re
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Final

from fastapi import APIRouter, Query
from fastapi.responses import FileResponse
from starlette.background import BackgroundTask

from hyperscope.errors import UsageError
from hyperscope.server.jobs import ProfileHit
from hyperscope.server.params import INT64_MAX, INT64_MIN
from hyperscope.store.chrome import write_rank
from hyperscope.store.profile import Profile

_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._-]+")


def file_stem(job: str, profile_id: str, ranks: list[int], window: tuple[int, int] | None) -> str:
    """``<job>-<profile>[-rankN][-window-<start>-<end>]``: only characters any file system takes."""
    stem = f"{_UNSAFE.sub('_', job).strip('._') or 'profile'}-{profile_id}"
    if len(ranks) == 1:
        stem += f"-rank{ranks[0]}"
    if window is not None:
        stem += f"-window-{window[0]}-{window[1]}"
    return stem


def _window(start_ns: int | None, end_ns: int | None) -> tuple[int, int] | None:
    if start_ns is None and end_ns is None:
        return None
    if start_ns is None or end_ns is None:
        raise UsageError("start_ns and end_ns: give both (epoch ns), or neither for the whole profile")
    if end_ns <= start_ns:
        raise UsageError(f"end_ns {end_ns}: expected after start_ns {start_ns}")
    return start_ns, end_ns


def write_export(
    profile: Profile, ranks: list[int], window: tuple[int, int] | None, out: Path, stem: str
) -> str:
    """Writes the download to ``out``; returns its media type."""
    metas = {m.rank: m for m in profile.meta.ranks}
    con = profile.connect()
    try:
        if len(ranks) == 1:
            with out.open("wb") as fh:
                write_rank(fh, con, metas[ranks[0]], window=window)
            return "application/json"
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
            for r in ranks:
                with zf.open(f"{stem}/rank{r}.pt.trace.json", "w", force_zip64=True) as fh:
                    write_rank(fh, con, metas[r], window=window)
        return "application/zip"
    finally:
        con.close()


def router(
    open_profile: Callable[[str], tuple[ProfileHit, Profile]],
    responses: dict[int | str, dict[str, Any]] | None = None,
) -> APIRouter:
    api = APIRouter(tags=["profiles"])

    @api.get(
        "/api/profiles/{profile_id}/export",
        responses={
            **(responses or {}),
            200: {"content": {"application/json": {}, "application/zip": {}}, "description": "the file"},
        },
        response_class=FileResponse,
    )
    def export(
        profile_id: str,
        rank: Annotated[
            list[int] | None, Query(description="only these ranks (repeatable); default all")
        ] = None,
        start_ns: Annotated[
            int | None, Query(ge=INT64_MIN, le=INT64_MAX, description="window start, epoch ns")
        ] = None,
        end_ns: Annotated[
            int | None, Query(ge=INT64_MIN, le=INT64_MAX, description="window end, epoch ns")
        ] = None,
    ) -> FileResponse:
        """Chrome-trace JSON of one rank, or a ZIP of one file per rank; with start_ns and end_ns,
        only the events overlapping that window (and every metadata event)."""
        hit, profile = open_profile(profile_id)
        have = [m.rank for m in profile.meta.ranks]
        wanted = sorted(set(rank)) if rank else have
        missing = [r for r in wanted if r not in have]
        if missing:
            raise UsageError(
                f"rank {missing[0]}: the profile has ranks {', '.join(map(str, have)) or 'none'}"
            )
        if not wanted:
            raise UsageError(f"profile {hit.ref.id}: it has no ranks to export yet")
        window = _window(start_ns, end_ns)
        stem = file_stem(hit.job.name, hit.ref.id, wanted, window)
        fd, tmp = tempfile.mkstemp(prefix="hyperscope-export-")
        os.close(fd)
        path = Path(tmp)
        try:
            media = write_export(profile, wanted, window, path, stem)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        suffix = ".json" if media == "application/json" else ".zip"
        return FileResponse(
            path,
            media_type=media,
            filename=stem + suffix,
            background=BackgroundTask(path.unlink, missing_ok=True),
        )

    return api
