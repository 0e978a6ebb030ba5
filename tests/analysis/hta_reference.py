"""Reads ../shared/traces/HTA_REFERENCE.txt: the tables HTA 0.5.0 printed for each trace, so the
tests compare against HTA's own output rather than numbers copied into the tests."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field


@dataclass
class Section:
    name: str  # the hta_out file name without .txt: dlrm_default, ns_resolution_nsround_off, ...
    temporal: list[dict[str, float]] | None = None  # None: HTA failed
    kernel_types: dict[str, float] = field(default_factory=dict)
    kernels: list[tuple[int, str, str, float]] = field(default_factory=list)  # rank, type, name prefix, sum
    overlap: dict[int, float] = field(default_factory=dict)  # NaN where HTA printed NaN


def parse(text: str) -> dict[str, Section]:
    sections: dict[str, Section] = {}
    current: Section | None = None
    mode = ""
    for line in text.splitlines():
        m = re.match(r"=== \(file hta_out/(\w+)\.txt\)", line)
        if m:
            current = sections.setdefault(m.group(1), Section(m.group(1)))
            mode = ""
            continue
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
