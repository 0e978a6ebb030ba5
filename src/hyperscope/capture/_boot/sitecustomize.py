"""Started by ``hyperscope profile`` through PYTHONPATH: profile this process, then hand over to the
``sitecustomize`` this one shadows, if the environment has one."""

import importlib.machinery
import importlib.util
import os
import sys

try:
    from hyperscope.capture.autostart import autostart

    autostart()
except Exception as exc:  # never stop the user's program from starting
    print(f"hyperscope: profiling is off for this process: {exc!r}", file=sys.stderr)

_here = os.path.dirname(os.path.abspath(__file__))
_rest = [p for p in sys.path if os.path.abspath(p or ".") != _here]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _rest)
if _spec is not None and _spec.loader is not None:
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
