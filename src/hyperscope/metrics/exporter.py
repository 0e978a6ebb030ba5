"""``hyperscope metrics``: Prometheus's ``/metrics`` through ``prometheus-client``. Thin: each scrape
observes the cluster (:func:`hyperscope.cluster.fleet.observe`) and this host's GPUs (the NVML seam)
and hands them to the pure builders of :mod:`hyperscope.metrics.families`. The only state kept
between scrapes is what needs two readings (step times), the agent log's read offset and the XID
events counted so far.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar
from wsgiref.simple_server import WSGIServer

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from hyperscope.capture._nvml import NvmlMissing, NvmlSeam, NvmlUnsupported
from hyperscope.cluster import fleet
from hyperscope.cluster.state import clusters_dir
from hyperscope.errors import HyperscopeError
from hyperscope.metrics.families import (
    PREFIX,
    GpuStat,
    StepMemory,
    cluster_families,
    gpu_families,
    step_times,
)

DEFAULT_PORT = 9478
T = TypeVar("T")


class Exporter(Collector):
    """One cluster's series (when ``cluster`` is named) and this host's GPUs (when ``gpus``)."""

    def __init__(
        self,
        home: Path,
        cluster: str | None,
        *,
        node: str,
        gpus: bool = True,
        nvml: Callable[[], NvmlSeam] = NvmlSeam,
    ) -> None:
        self.home, self.cluster, self.node = home, cluster, node
        self._lock = threading.Lock()  # scrapes run on the server's threads
        self._steps: StepMemory = {}
        self._tail = fleet.LogTail(clusters_dir(home) / cluster / fleet.LOG) if cluster else None
        self._make_nvml = nvml
        self._seam: NvmlSeam | None = None
        self._gpu_note = "" if gpus else "GPU metrics turned off (--no-gpus)"
        self._xid_watched: set[int] = set()
        self._xids: dict[int, tuple[int, int]] = {}  # GPU -> (events, last code)
        #: why the last scrape had no cluster series ("" when it had)
        self.cluster_note = ""

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            if self.cluster is not None:
                yield from self._cluster()
            yield from gpu_families(self.node, self._gpus())

    def _cluster(self) -> Iterator[Metric]:
        assert self.cluster is not None
        known = GaugeMetricFamily(
            PREFIX + "cluster_known", "1 when the cluster's state could be read", labels=["cluster"]
        )
        try:
            snap = fleet.observe(self.home, self.cluster, log=self._tail)
        except (HyperscopeError, OSError) as exc:
            self.cluster_note = str(exc)
            known.add_metric([self.cluster], 0.0)
            yield known
            return
        self.cluster_note = ""
        known.add_metric([self.cluster], 1.0)
        yield known
        self._steps, seconds = step_times(self._steps, snap.beats)
        yield from cluster_families(snap, seconds)

    def _open(self) -> NvmlSeam | None:
        if self._seam is not None or self._gpu_note:
            return self._seam
        seam = self._make_nvml()
        try:
            seam.init()
            if seam.device_count() == 0:
                raise NvmlMissing("NVML reports no devices")
        except (NvmlMissing, RuntimeError) as exc:
            self._gpu_note = str(exc)
            seam.shutdown()
            return None
        try:
            self._xid_watched = set(seam.watch_xids())
        except (NvmlUnsupported, RuntimeError):
            self._xid_watched = set()
        self._seam = seam
        return seam

    def _gpus(self) -> list[GpuStat]:
        """Every GPU's reading; a metric a GPU does not report (or an NVML error on it) is left out."""
        seam = self._open()
        if seam is None:
            return []
        for index, code in _quietly(seam.poll_xids) or []:
            n, _ = self._xids.get(index, (0, 0))
            self._xids[index] = (n + 1, code)
        out = []
        for i in range(seam.device_count()):
            util = _quietly(seam.utilization, i)
            mem = _quietly(seam.memory, i)
            events = self._xids.get(i, (0, None)) if i in self._xid_watched else (None, None)
            out.append(
                GpuStat(
                    index=i,
                    name=_quietly(seam.name, i) or "",
                    utilization_pct=util[0] if util else None,
                    memory_utilization_pct=util[1] if util else None,
                    memory_used_bytes=mem[0] if mem else None,
                    memory_total_bytes=mem[1] if mem else None,
                    temperature_c=_quietly(seam.temperature_c, i),
                    power_w=_quietly(seam.power_w, i),
                    ecc_uncorrected=_quietly(seam.ecc_uncorrected, i),
                    xid_errors=events[0],
                    last_xid=events[1],
                )
            )
        return out

    @property
    def gpu_note(self) -> str:
        """Why there are no GPU series ("" when there are, or before the first scrape)."""
        return self._gpu_note

    def close(self) -> None:
        if self._seam is not None:
            self._seam.shutdown()
            self._seam = None


def _quietly(read: Callable[..., T], *args: object) -> T | None:
    try:
        return read(*args)
    except (NvmlUnsupported, RuntimeError):
        return None


def only_cluster(home: Path) -> str | None:
    """The cluster to export when none is named: the only one there is, else None."""
    root = clusters_dir(home)
    names = (
        [d.name for d in sorted(root.iterdir()) if (d / "cluster.json").is_file()] if root.is_dir() else []
    )
    return names[0] if len(names) == 1 else None


def registry_for(exporter: Exporter) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter)
    return registry


def serve(exporter: Exporter, host: str, port: int) -> tuple[WSGIServer, threading.Thread]:
    """Serve ``/metrics`` on ``host:port`` from a background thread; (server, thread)."""
    from prometheus_client import start_http_server

    server, thread = start_http_server(port, addr=host, registry=registry_for(exporter))
    return server, thread
