"""The Profile info answer: where a profile came from, its hosts, and the GPUs each rank ran on.

A Kineto trace's ``deviceProperties`` lists every GPU *visible* to the process: on an 8-GPU host
each rank's file names all eight, so showing that list per rank says nothing about which GPU the
rank used. The GPUs a rank ran on are read from its device-side events (their ``device`` column),
once per finished profile, and named from the properties the trace gave for that index.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import duckdb

from hyperscope.schema.events import DEVICE_WORK_KINDS
from hyperscope.server.cache import ProfileCache
from hyperscope.server.jobs import ProfileHit
from hyperscope.server.limits import QueryLimits, QueryTimeout
from hyperscope.server.models import DeviceOut, ProfileOut, RankOut
from hyperscope.store.profile import Profile

#: What the page says where no source named the host (Kineto traces have no host field).
NO_HOST: Final = "not recorded in the traces"

_KINDS: Final = ", ".join(f"'{k.value}'" for k in DEVICE_WORK_KINDS)


def used_devices(con: duckdb.DuckDBPyConnection) -> dict[int, list[int]]:
    """Each rank's GPU indices, from the device-side work it recorded (ascending)."""
    found = con.execute(
        f"SELECT rank, list(DISTINCT device ORDER BY device) FROM events "
        f"WHERE kind IN ({_KINDS}) AND device IS NOT NULL GROUP BY rank"
    ).fetchall()
    return {int(rank): [int(d) for d in devices] for rank, devices in found}


def _device(index: int, properties: list[dict[str, Any]]) -> DeviceOut:
    props = next((p for p in properties if p.get("id") == index), None)
    if props is None and 0 <= index < len(properties) and "id" not in properties[index]:
        props = properties[index]  # a list without ids: its position is the index
    memory = props.get("totalGlobalMem") if props else None
    return DeviceOut(
        index=index,
        name=str(props.get("name", "?")) if props else "?",
        memory_bytes=int(memory) if isinstance(memory, int | float) else None,
    )


def profile_answer(hit: ProfileHit, profile: Profile, limits: QueryLimits, cache: ProfileCache) -> ProfileOut:
    meta = profile.meta
    work: Callable[[duckdb.DuckDBPyConnection], dict[int, list[int]]] = used_devices
    notes = [m for m in hit.job.message.split("; ") if m]
    try:
        used, _ = cache.answer(
            (hit.ref.id, "used_devices"), hit.live, lambda: limits.run(profile, work, "the GPUs of each rank")
        )
    except QueryTimeout as exc:  # the rest of the panel needs no query: shown without them
        used = {}
        notes.append(f"the GPUs each rank ran on are not shown: {exc}")
    if hit.live:
        notes.append("the profile is still being written: reload for newer data")
    hosts = meta.nodes
    if not hosts and meta.ranks:
        notes.append(f"hosts: {NO_HOST} (imported Kineto traces do not name their host)")
    return ProfileOut(
        id=hit.ref.id,
        job=hit.job.name,
        job_id=hit.job.id,
        status=hit.job.status,
        source=meta.source,
        created_ns=meta.created_ns,
        events=meta.events,
        bytes=hit.ref.bytes,
        ts_min_ns=meta.ts_min_ns,
        ts_max_ns=meta.ts_max_ns,
        world_size=max([r.world_size or 0 for r in meta.ranks] + [len(meta.ranks)]),
        hosts=hosts,
        ranks=[
            RankOut(
                rank=r.rank,
                node=r.node,
                local_rank=r.local_rank,
                events=r.events,
                complete=r.complete,
                devices=[str(d.get("name", "?")) for d in r.device_properties],
                gpus=[_device(i, r.device_properties) for i in used.get(r.rank, [])],
                source_file=r.source_file,
                notes=list(r.notes),
            )
            for r in meta.ranks
        ],
        settings=dict(meta.settings),
        notes=notes,
    )
