"""Reads ../shared/traces/HTA_REFERENCE.txt: the tables HTA 0.5.0 printed for each trace, so the
tests compare against HTA's own output rather than numbers copied into the tests."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field


@dataclass
class Section:
    name: str  # the hta_out file name without .txt (dlrm_default, ...), else from the DEV heading
    temporal: list[dict[str, float]] | None = None  # None: HTA failed
    kernel_types: dict[str, float] = field(default_factory=dict)
    kernels: list[tuple[int, str, str, float]] = field(default_factory=list)  # rank, type, name prefix, sum
    overlap: dict[int, float] = field(default_factory=dict)  # NaN where HTA printed NaN


#: Sections whose heading has no ``(file hta_out/...)`` line: the trace path → the section's name.
UNNAMED: dict[str, str] = {"kineto/resnet50_autograd_legacy": "resnet50_legacy_default"}


def _heading_name(trace: str) -> str:
    """The name of a section that gives no file: fixed for the known ones, else from the path."""
    return UNNAMED.get(trace, re.sub(r"\W", "_", trace.rsplit("/", 1)[-1]) + "_default")


def parse(text: str) -> dict[str, Section]:
    """Every ``=== DEV <trace> ...`` heading starts a section, named by the ``=== (file
    hta_out/<name>.txt)`` line that follows it, or (when none does) by :func:`_heading_name`."""
    sections: dict[str, Section] = {}
    current: Section | None = None
    fresh = False  # the current section was opened by a DEV heading and may still be renamed
    mode = ""
    for line in text.splitlines():
        m = re.match(r"=== \(file hta_out/(\w+)\.txt\)", line)
        if m:
            if fresh and current is not None:
                del sections[current.name]
            current = sections.setdefault(m.group(1), Section(m.group(1)))
            mode, fresh = "", False
            continue
        m = re.match(r"=== DEV (\S+)", line)
        if m:
            name = _heading_name(m.group(1))
            assert name not in sections, f"two HTA_REFERENCE sections are named {name}"
            current = sections[name] = Section(name)
            mode, fresh = "", True
            continue
        fresh = False
        if current is None:
            continue
        if line.startswith("## get_temporal_breakdown"):
            mode, current.temporal = "temporal", []
        elif line.startswith("## get_gpu_kernel_breakdown") and "kernel_type_df" in line:
            mode = "types"
        elif line.startswith("## get_gpu_kernel_breakdown") and "kernel_df" in line:
            mode = "kernels"
        elif line.startswith("## get_comm_comp_overlap"):
            mode = "overlap"
        elif line.startswith("FAILED") and mode == "temporal":
            current.temporal = None
        elif (
            not line.strip()
            or line.lstrip().startswith(("rank", "kernel_type", "name", "#"))
            or line.startswith("=")
        ):
            continue
        else:
            tok = line.split()
            if mode == "temporal" and current.temporal is not None:
                keys = ["rank", "idle", "compute", "non_compute", "kernel"]
                current.temporal.append(dict(zip(keys, map(float, tok[1:6]), strict=True)))
            elif mode == "types":
                current.kernel_types[" ".join(tok[1:-2])] = float(tok[-2])
            elif mode == "kernels":
                current.kernels.append((int(tok[-1]), tok[-2], " ".join(tok[1:-7]), float(tok[-7])))
            elif mode == "overlap":
                current.overlap[int(tok[1])] = float(tok[2]) if tok[2] != "NaN" else math.nan
    return sections
