"""Real recordings that ship inside the package.

``hyperscope demo`` on a machine without a GPU imports :data:`H200_TRACE` as a second job, so a
newcomer sees every GPU chart and a full timeline without owning a GPU; the tests read it too.
README.txt beside it says how and where it was recorded.
"""

from __future__ import annotations

from pathlib import Path

#: torch.profiler's Kineto trace of a bf16 transformer on one NVIDIA H200 (PyTorch 2.11.0+cu130)
H200_TRACE = Path(__file__).with_name("h200_transformer_bf16.pt.trace.json.gz")

#: how the demo names the job it imports the recording as (made unique like the demo's own)
H200_JOB = "h200-sample"
