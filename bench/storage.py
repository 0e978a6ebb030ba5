"""Bytes on disk of hyperscope's stored profile against the raw Kineto JSON and its gzip, per shared trace.

gzip -6 of the raw JSON is what people already do to keep traces, so it is the bar that matters;
the raw size is what torch.profiler writes. Every figure is taken in this run: the raw bytes by
decompressing ``.gz`` inputs, the gzip bytes by compressing the raw JSON here at level 6 (per file,
summed over the files of a multi-rank set), the stored bytes: every file the profile keeps
(events, samples, metadata, and the dashboard and timeline index that `hyperscope import` computes
and keeps beside them), the catalog aside.

Targets (docs/DESIGN.md), for every trace or set with ≥ 1 MB of raw JSON: stored ≤ raw / 50 and
stored ≤ gzip / 3. Smaller traces are shown without a target: fixed per-profile overhead dominates.
"""

from __future__ import annotations

import gzip
import shutil
import sys
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from _common import MB, RESULTS_DIR, TRACES_DIR, hyperscope_import, print_table, write_results

RAW_TARGET = 50.0
GZIP_TARGET = 3.0
MIN_RAW_FOR_TARGET = MB

# (name, paths relative to TRACES_DIR); a directory is one multi-rank set.
CASES: list[tuple[str, str]] = [
    ("HTA/amd_trace", "HolisticTraceAnalysis/amd_trace"),
    ("HTA/critical_path/alexnet", "HolisticTraceAnalysis/critical_path/alexnet"),
    ("HTA/df_index_resolver", "HolisticTraceAnalysis/df_index_resolver"),
    ("HTA/ns_resolution_trace", "HolisticTraceAnalysis/ns_resolution_trace"),
    ("TraceLens/h100", "TraceLens/h100"),
    ("param/dlrm_kineto (8 ranks)", "param/dlrm_kineto"),
    ("kineto/resnet50_autograd_legacy", "kineto/resnet50_autograd_legacy"),
]


@dataclass(frozen=True, slots=True)
class Row:
    trace: str
    files: int
    raw_bytes: int
    gzip6_bytes: int
    stored_bytes: int
    events: int

    @property
    def has_target(self) -> bool:
        return self.raw_bytes >= MIN_RAW_FOR_TARGET

    @property
    def raw_ratio(self) -> float:
        return self.raw_bytes / self.stored_bytes

    @property
    def gzip_ratio(self) -> float:
        return self.gzip6_bytes / self.stored_bytes

    def met(self) -> bool | None:
        if not self.has_target:
            return None
        return self.raw_ratio >= RAW_TARGET and self.gzip_ratio >= GZIP_TARGET

    def as_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "bytes_per_event": self.stored_bytes / self.events,
            "raw_over_stored": self.raw_ratio,
            "gzip_over_stored": self.gzip_ratio,
            "target_applies": self.has_target,
            "target_met": self.met(),
        }


def trace_files(folder: Path) -> list[Path]:
    """The Kineto files of a case, named as hyperscope's importer picks them (READMEs are skipped)."""
    return sorted(p for p in folder.iterdir() if p.name.endswith((".json", ".json.gz")) and p.is_file())


def raw_and_gzip6(path: Path) -> tuple[int, int]:
    """Raw JSON bytes of one file and the size of gzip -6 of them, streamed to bound memory."""
    opener: Callable[[Path], Any] = gzip.open if path.name.endswith(".gz") else open
    raw = 0
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: gzip container, as `gzip -6`
    packed = 0
    with opener(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            raw += len(chunk)
            packed += len(compressor.compress(chunk))
    packed += len(compressor.flush())
    return raw, packed


def measure(name: str, folder: Path, work: Path) -> Row:
    files = trace_files(folder)
    sizes = [raw_and_gzip6(f) for f in files]
    run = hyperscope_import(files, work)
    return Row(
        trace=name,
        files=len(files),
        raw_bytes=sum(s[0] for s in sizes),
        gzip6_bytes=sum(s[1] for s in sizes),
        stored_bytes=int(run.payload["stored_bytes"]),
        events=int(run.payload["events"]),
    )


def status(row: Row) -> str:
    met = row.met()
    return "no target (< 1 MB)" if met is None else ("MET" if met else "MISSED")


def main() -> int:
    if not TRACES_DIR.is_dir():
        print(f"{TRACES_DIR} is absent: nothing to measure")
        return 0
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="storage-", dir=RESULTS_DIR))
    rows: list[Row] = []
    try:
        for name, rel in CASES:
            folder = TRACES_DIR / rel
            if not folder.is_dir():
                print(f"skipping {name}: {folder} is absent")
                continue
            rows.append(measure(name, folder, work))
            print(f"  measured {name}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    targets = f"raw/stored ≥ {RAW_TARGET:.0f}, gzip/stored ≥ {GZIP_TARGET:.0f}"
    print(f"\ntargets for traces with ≥ 1 MB raw JSON: {targets}")
    print_table(
        [
            "trace",
            "files",
            "raw MB",
            "gzip-6 MB",
            "stored KB",
            "events",
            "B/event",
            "raw/st",
            "gz/st",
            "target",
        ],
        [
            [
                r.trace,
                r.files,
                r.raw_bytes / MB,
                r.gzip6_bytes / MB,
                r.stored_bytes / 1000,
                r.events,
                r.stored_bytes / r.events,
                f"{r.raw_ratio:.1f}x",
                f"{r.gzip_ratio:.2f}x",
                status(r),
            ]
            for r in rows
        ],
    )
    write_results("storage", {"rows": [r.as_json() for r in rows]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
