"""Build and configure hyperscope's SPANK plugin (``srun --auto-resume[=N]``).

The plugin is C against Slurm's ``spank.h`` (Debian's ``libslurm-dev``), compiled on the machine
that runs Slurm so that it matches the installed Slurm; see ``auto_resume.c`` for what it does.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from hyperscope.errors import HyperscopeError

SOURCE = Path(__file__).with_name("auto_resume.c")
HEADER = Path("/usr/include/slurm/spank.h")


class SpankBuildError(HyperscopeError):
    """The plugin cannot be built here; the message says what to install."""


def build(out_dir: Path, *, cc: str = "gcc") -> Path:
    """Compile the plugin into ``out_dir`` (reused when the source has not changed)."""
    if not HEADER.is_file():
        raise SpankBuildError(
            f"{HEADER} is missing: install Slurm's development headers (Debian: apt-get install libslurm-dev)"
        )
    compiler = shutil.which(cc)
    if compiler is None:
        raise SpankBuildError(f"no C compiler '{cc}' on PATH (Debian: apt-get install gcc)")
    digest = hashlib.sha256(SOURCE.read_bytes() + HEADER.read_bytes()).hexdigest()[:12]
    target = out_dir / f"hyperscope_auto_resume-{digest}.so"
    if target.is_file():
        return target
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".so.tmp")
    done = subprocess.run(
        [compiler, "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-o", str(tmp), str(SOURCE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        raise SpankBuildError(f"{SOURCE}: {cc} failed:\n{done.stderr.strip()}")
    tmp.replace(target)
    return target


def plugstack_line(plugin: Path, *, slurm_conf: Path, log: Path, scontrol: str = "scontrol") -> str:
    """The ``plugstack.conf`` line that loads the plugin for every srun, sbatch and salloc."""
    found = shutil.which(scontrol) or scontrol
    return f"required {plugin} scontrol={found} conf={slurm_conf} log={log}\n"
