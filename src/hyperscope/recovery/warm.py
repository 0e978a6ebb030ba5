"""A warm restart of one rank (``python -m hyperscope.recovery.warm [--max-restarts N] [--preload
MOD,...] -- train.py ARGS``), what ``hyperscope restart-in-place`` runs on each task when the step's
ranks should not start cold: the launcher imports the heavy modules once (PyTorch by default: ~3
s of CPU, 10 s at a load of 15 here, paid again by every cold restart and every requeue), then
forks the training script. When the script fails (it crashed, or its peer did and the collective
raised), the launcher forks it again, warm, with ``HYPERSCOPE_RESTART`` one higher and a
rendezvous port of its own for that restart (``MASTER_PORT`` + restart: every rank's launcher
counts the same restarts, since one rank's crash ends its peers' collectives too); the script
reloads its checkpoint. A rank that hangs is not seen here: the step's supervisor
(:mod:`hyperscope.recovery.inplace`) ends the step and starts it again, cold.

Fork is safe here because the launcher only imports: it starts no thread and runs no operator
before forking (PyTorch's thread pools start with the first operator, in the child).
"""

from __future__ import annotations

import atexit
import importlib
import os
import runpy
import sys
from collections.abc import Sequence

from hyperscope.recovery.inplace import NOT_RETRIED, RESTART_ENV

#: what a PyTorch training imports anyway; torch.distributed.checkpoint alone took 6 s here, loaded
DEFAULT_PRELOAD = (
    "torch",
    "torch.distributed",
    "torch.distributed.checkpoint",
    "torch.nn",
    "hyperscope.checkpoint",
)


def _child(script: str, args: Sequence[str], restart: int, port: str) -> None:
    """In the forked process: run the script as ``__main__`` and exit with its status."""
    os.environ[RESTART_ENV] = str(restart)
    if port:
        os.environ["MASTER_PORT"] = port
    sys.argv = [script, *args]
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # printed as Python would, then the status says it
        import traceback

        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()  # the script's own (its checkpointer, its profiler)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def run(
    script: str, args: Sequence[str], *, max_restarts: int = 3, preload: Sequence[str] = DEFAULT_PRELOAD
) -> int:
    """Run ``script`` warm until it succeeds or ``max_restarts`` restarts failed; its status."""
    for name in preload:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            print(
                f"hyperscope warm: cannot preload {name}: {exc} (it will be imported cold)", file=sys.stderr
            )
    base_port = os.environ.get("MASTER_PORT", "")
    #: the step's own restarts (``restart-in-place``, cold: each with a new MASTER_PORT) go on counting
    restart = first = int(os.environ.get(RESTART_ENV, "0") or 0)
    while True:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            port = str(int(base_port) + restart - first) if base_port.isdigit() else ""
            _child(script, args, restart, port)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code == 0:
            return 0
        made = restart - first
        if code in NOT_RETRIED or made >= max_restarts:
            why = "not retried" if code in NOT_RETRIED else f"after {made} warm restart(s)"
            print(f"hyperscope warm: rank {os.environ.get('SLURM_PROCID', '?')} failed ({code}), {why}",
                  file=sys.stderr, flush=True)  # fmt: skip
            return code if code >= 0 else 128 - code
        restart += 1
        print(f"hyperscope warm: rank {os.environ.get('SLURM_PROCID', '?')} failed ({code}): warm "
              f"restart {made + 1} of {max_restarts}", flush=True)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m hyperscope.recovery.warm", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--max-restarts", type=int, default=3)
    p.add_argument(
        "--preload", default=",".join(DEFAULT_PRELOAD), help="modules imported once, comma-separated"
    )
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    return run(a.script, args, max_restarts=a.max_restarts, preload=[m for m in a.preload.split(",") if m])


if __name__ == "__main__":
    sys.exit(main())
