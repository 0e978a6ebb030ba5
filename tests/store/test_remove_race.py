"""Four `hyperscope import`s into one job while `hyperscope rm` removes it, as real processes:
each import reports its own profile, and no profile directory outlives the catalog's rows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from hyperscope import Store
from hyperscope.store.synth import SynthSpec, write_job


def _cli(home: Path, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["HYPERSCOPE_HOME"] = str(home)
    env["COLUMNS"] = "400"
    return subprocess.Popen(
        [sys.executable, "-m", "hyperscope", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_imports_racing_a_remove_leave_no_orphans(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    write_job(traces, SynthSpec(ranks=2, steps=2, ops_per_step=10))
    home = tmp_path / "home"
    Store(home).close()
    imports = [_cli(home, "import", str(traces), "--job", "shared") for _ in range(4)]
    deadline = time.monotonic() + 240
    while True:  # rm as soon as the first import has put the job in the catalog
        with Store(home) as store:
            if any(j.name == "shared" for j in store.jobs()):
                break
        running = any(p.poll() is None for p in imports)
        assert running and time.monotonic() < deadline, "no import created the job"
        time.sleep(0.02)
    rm = _cli(home, "rm", "shared")
    rm_out, rm_err = rm.communicate(timeout=240)
    assert rm.returncode == 0, rm_err
    ids = []
    for proc in imports:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0 and "Traceback" not in err, err
        # on stdout, or, where the rm came between its import and its summary, in the warning
        # that says the job was removed meanwhile (stderr)
        found = re.search(r"\(profile ([0-9a-f]+)\)", (out + err).replace("\n", ""))
        assert found, (out, err)
        ids.append(found.group(1))
    assert len(set(ids)) == 4, ids  # each import names its own profile
    with Store(home) as store:
        listed = {p.id for j in store.jobs() for p in j.profiles}
    on_disk = {p.name for p in (home / "profiles").iterdir()}
    assert on_disk == listed, (on_disk, listed)  # no orphan folders, no staging left behind
    for pid in listed:
        assert (home / "profiles" / pid / "meta.json").is_file()
    assert set(ids) >= listed and "removed job shared and" in rm_out
