"""Run a function right after a module is imported by the script, without importing it ourselves.

The launcher's process must not import a framework the script does not use (torch into a
TensorFlow run would cost seconds, memory, and decide which profiler records), yet it must patch
the framework before the script's first step: a finder at the front of ``sys.meta_path`` wraps the
loader of the modules asked for, and calls the patch once the module has run.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

log = logging.getLogger("hyperscope.capture")

_waiting: dict[str, list[Callable[[ModuleType], None]]] = {}


def when_imported(name: str, patch: Callable[[ModuleType], None]) -> None:
    """``patch(module)`` once ``name`` is imported (now, if it already is). A failing patch is
    logged and dropped: the import itself always succeeds."""
    module = sys.modules.get(name)
    if module is not None:
        _run(patch, module)
        return
    _waiting.setdefault(name, []).append(patch)
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def _run(patch: Callable[[ModuleType], None], module: ModuleType) -> None:
    try:
        patch(module)
    except Exception as exc:
        log.warning("hyperscope: cannot hook into %s: %r", module.__name__, exc)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _waiting:
            return None
        for finder in sys.meta_path:  # the spec the rest of the import system would give
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            for patch in _waiting.pop(fullname, []):
                _run(patch, module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
