"""How long one scrape of ``hyperscope metrics`` takes on a live local cluster, and how big it is.

A local cluster (2 workers, 1 spare, the agent on) with one 2-rank job beating through the
heartbeat ``hs.step()`` calls; the exporter (``hyperscope.metrics``, this host's GPUs included)
served on a free loopback port; ``--scrapes`` GETs of ``/metrics`` timed one after the other, and
the same number of bare ``fleet.observe`` calls (what the Cluster page's route costs). Each scrape
runs ``scontrol show node -o`` and ``scontrol show job -o``, so this is mostly Slurm's answer
time. There is no incumbent in the same run: Slurm has no Prometheus exporter of its own here.

Needs root with Debian's slurm-wlm and munge (as the cluster tests do); says so and exits 0 without.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml
from _common import REPO_ROOT, print_table, write_results

from hyperscope.cluster import fleet, manage
from hyperscope.cluster.local import LocalProvider, missing_requirements
from hyperscope.cluster.spec import load_spec
from hyperscope.metrics import Exporter, serve

BEATING = (
    f"srun -N 2 -n 2 {sys.executable} -c "
    "'import time; from hyperscope.recovery import heartbeat as h\n"
    "while True: h.beat(); time.sleep(0.05)'"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scrapes", type=int, default=20)
    args = parser.parse_args()
    why = missing_requirements()
    if why:
        print(f"metrics_scrape: real Slurm unavailable ({why}): nothing measured")
        return
    with tempfile.TemporaryDirectory(prefix="hs-bench-metrics-") as tmp:
        work = Path(tmp)
        shutil.copytree(REPO_ROOT / "examples" / "lifecycle", work / "spec" / "lifecycle")
        doc = {
            "name": "bm", "provider": "local", "lifecycle_scripts": "lifecycle",
            "shared_dir": str(work / "shared"),
            "instance_groups": [
                {"name": "controller", "role": "controller", "count": 1},
                {"name": "workers", "role": "worker", "count": 2, "spares": 1},
            ],
        }  # fmt: skip
        (work / "spec" / "cluster.yaml").write_text(yaml.safe_dump(doc))
        home = work / "home"
        provider = LocalProvider(home)
        provider.create(load_spec(work / "spec" / "cluster.yaml"))
        try:
            manage.submit("bm", home, ["--wrap", BEATING, "-N", "2", "-n", "2", "-o", os.devnull])
            time.sleep(8)  # both ranks beating
            server, _ = serve(Exporter(home, "bm", node="bench"), "127.0.0.1", 0)
            url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
            scrapes, body = [], b""
            for _ in range(args.scrapes):
                t0 = time.perf_counter()
                with urllib.request.urlopen(url, timeout=30) as r:
                    body = r.read()
                scrapes.append(time.perf_counter() - t0)
            server.shutdown()
            observes = []
            for _ in range(args.scrapes):
                t0 = time.perf_counter()
                fleet.observe(home, "bm")
                observes.append(time.perf_counter() - t0)
        finally:
            provider.delete("bm")
    samples = sum(1 for line in body.decode().splitlines() if line.startswith("hyperscope_"))
    rows = [
        ["scrape /metrics", f"{statistics.median(scrapes) * 1e3:.1f}", f"{max(scrapes) * 1e3:.1f}"],
        ["fleet.observe", f"{statistics.median(observes) * 1e3:.1f}", f"{max(observes) * 1e3:.1f}"],
    ]
    print_table(["what", "median ms", "max ms"], rows)
    print(f"one scrape: {len(body):,} bytes, {samples} samples; load average {os.getloadavg()[0]:.1f}")
    write_results(
        "metrics_scrape",
        {
            "scrape_ms": [round(s * 1e3, 2) for s in scrapes],
            "observe_ms": [round(s * 1e3, 2) for s in observes],
            "bytes": len(body),
            "samples": samples,
            "load_average": os.getloadavg()[0],
        },
    )


if __name__ == "__main__":
    main()
