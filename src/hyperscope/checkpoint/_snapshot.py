"""A copy of the training state in host memory, taken on the training thread.

An asynchronous save may only block training for this copy: once it returns, the model may be
updated in place while the copy is serialized and written on another thread. The copy reuses the
buffers of the previous save when the state has the same layout (the usual case: the same model
saved every N steps), so after the first save it costs a memory copy, not fresh allocations and
their page faults (which, measured, doubled its cost).
"""

from __future__ import annotations

import copy
from typing import Any


def host_copy(state: Any, reuse: Any = None) -> Any:
    """``state`` with every tensor copied to (pinned, when from a GPU) host memory, into the
    tensors of ``reuse`` (an earlier result no longer in use) where shapes and dtypes match."""
    import torch

    gpus: set[Any] = set()

    def visit(value: Any, old: Any) -> Any:
        if isinstance(value, torch.Tensor):
            tensor = value.detach()
            if (
                isinstance(old, torch.Tensor)
                and old.shape == tensor.shape
                and old.dtype == tensor.dtype
                and old.device.type == "cpu"
                and old.is_contiguous()
            ):
                out = old
            else:
                pinned = tensor.device.type != "cpu" and torch.cuda.is_available()
                out = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu", pin_memory=pinned)
            if tensor.device.type != "cpu":
                gpus.add(tensor.device)
            out.copy_(tensor, non_blocking=tensor.device.type != "cpu")
            return out
        if isinstance(value, dict):
            mapping = value.copy()  # keeps the mapping's type (OrderedDict, defaultdict)
            earlier: dict[Any, Any] = old if isinstance(old, dict) else {}
            for key in mapping:
                mapping[key] = visit(mapping[key], earlier.get(key))
            return mapping
        if isinstance(value, list | tuple):
            previous = (
                old if isinstance(old, list | tuple) and len(old) == len(value) else [None] * len(value)
            )
            items = [visit(v, o) for v, o in zip(value, previous, strict=True)]
            if isinstance(value, list):
                return items
            return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
        return copy.deepcopy(value)

    snapshot = visit(state, reuse)
    for device in gpus:  # the non-blocking copies must land before the caller goes on
        torch.cuda.synchronize(device)
    return snapshot
