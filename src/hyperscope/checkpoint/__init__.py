"""Checkpoints a job can resume from: atomic, checksummed, asynchronous, newest K kept.

```python
from hyperscope import checkpoint

ckpt = checkpoint.Checkpointer("/shared/ckpt/run-1", keep=3, asynchronous=True)
latest = ckpt.load_latest()
start = latest.step + 1 if latest else 0
if latest:
    model.load_state_dict(latest.state["model"]); optimizer.load_state_dict(latest.state["optim"])
for step in range(start, steps):
    ...
    if step % 100 == 0:
        ckpt.save({"model": model.state_dict(), "optim": optimizer.state_dict()}, step)
ckpt.close()
```
"""

from hyperscope.checkpoint.checkpointer import DIRECTORY_ENV, Checkpointer, Loaded
from hyperscope.errors import CheckpointError

__all__ = ["DIRECTORY_ENV", "CheckpointError", "Checkpointer", "Loaded"]
