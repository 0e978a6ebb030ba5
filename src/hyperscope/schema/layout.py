"""On-disk layout of a store and of one profile.

```
$HYPERSCOPE_HOME/
  catalog.sqlite             jobs and their profiles
  profiles/<profile_id>/     one directory per profile, visible only once complete
    meta.json                ProfileMeta (schema version, ranks, source, counts)
    events/part-*.parquet    events, sorted by (rank, pid, tid, kind, ts_ns)
    samples/part-*.parquet   samples (absent when the profile has none)
    ranks/r00000.json        a capture's per-rank metadata, rewritten by that rank at each flush
  profiles/.staging-*        work in progress; never read, removed when its writer is gone
```

A profile is a directory of parts so that capture can add one part per rank and flush interval,
while an import writes a single part per table (small profiles pay for one file, not one per rank).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Final

from hyperscope.errors import StoreError
from hyperscope.schema.events import SCHEMA_VERSION

META_FILE: Final = "meta.json"
EVENTS_DIR: Final = "events"
SAMPLES_DIR: Final = "samples"
PROFILES_DIR: Final = "profiles"
CATALOG_FILE: Final = "catalog.sqlite"
RANKS_DIR: Final = "ranks"
STAGING_PREFIX: Final = ".staging-"


@dataclass(slots=True)
class RankMeta:
    """What one rank's source said about itself, kept so export can write it back."""

    rank: int
    node: str = ""
    source_file: str = ""
    world_size: int | None = None
    clock: str = "unknown"  # epoch_us, epoch_us_base_ns, relative
    clock_offset_ns: int = 0  # added to the source timestamps to obtain ts_ns
    device_properties: list[dict[str, Any]] = field(default_factory=list)
    distributed_info: dict[str, Any] = field(default_factory=dict)
    #: every other top-level key of the source file, verbatim (schemaVersion, traceName, ...)
    header: dict[str, Any] = field(default_factory=dict)
    events: int = 0
    samples: int = 0
    ts_min_ns: int | None = None
    ts_max_ns: int | None = None
    local_rank: int | None = None
    #: False when part of this rank's data could not be written (disk full, a profiler error)
    complete: bool = True
    #: what was not captured and why, said once ("perf counters unavailable: ...")
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, path: Path) -> RankMeta:
        try:
            raw = json.loads(text)
            known = {f.name for f in fields(cls)}
            return cls(**{k: v for k, v in raw.items() if k in known})
        except (ValueError, TypeError) as exc:
            raise StoreError(f"{path}: not a valid rank metadata file: {exc}") from exc


@dataclass(slots=True)
class ProfileMeta:
    profile_id: str
    source: str  # "import" or "capture"
    created_ns: int
    schema_version: int = SCHEMA_VERSION
    ranks: list[RankMeta] = field(default_factory=list)
    events: int = 0
    ts_min_ns: int | None = None
    ts_max_ns: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """Compact JSON; ranks of one host list the same devices, so each list is stored once."""
        raw = asdict(self)
        shared: list[list[dict[str, Any]]] = []
        for rank in raw["ranks"]:
            devices = rank.pop("device_properties")
            if devices not in shared:
                shared.append(devices)
            rank["device_set"] = shared.index(devices)
        raw["device_sets"] = shared
        return json.dumps(raw, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, path: Path) -> ProfileMeta:
        try:
            raw = json.loads(text)
            shared = raw.pop("device_sets", [])
            for rank in raw.get("ranks", []):
                rank["device_properties"] = shared[rank.pop("device_set")] if shared else []
            version = raw.get("schema_version")
            if not isinstance(version, int) or version > SCHEMA_VERSION:
                raise StoreError(
                    f"{path}: field 'schema_version' is {version!r}; this hyperscope reads "
                    f"versions up to {SCHEMA_VERSION}. Upgrade hyperscope to read this profile."
                )
            # Keys this version does not know (written by a newer minor version) are ignored.
            rank_keys = {f.name for f in fields(RankMeta)}
            ranks = [RankMeta(**{k: v for k, v in r.items() if k in rank_keys}) for r in raw.pop("ranks", [])]
            known = {f.name for f in fields(cls)}
            return cls(ranks=ranks, **{k: v for k, v in raw.items() if k in known})
        except (ValueError, TypeError) as exc:
            raise StoreError(f"{path}: not a valid profile metadata file: {exc}") from exc

    @property
    def nodes(self) -> list[str]:
        return sorted({r.node for r in self.ranks if r.node})


def profile_dir(home: Path, profile_id: str) -> Path:
    return home / PROFILES_DIR / profile_id
