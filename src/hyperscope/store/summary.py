"""A profile at a glance: what the import command and the main job print."""

from __future__ import annotations

from dataclasses import dataclass, field

from hyperscope.store.profile import Profile


@dataclass(frozen=True, slots=True)
class RankSummary:
    rank: int
    node: str
    events: int
    span_ns: int
    kernels: int
    kernel_ns: int
    steps: int


@dataclass(frozen=True, slots=True)
class Summary:
    ranks: list[RankSummary]
    kinds: dict[str, int]
    top_kernels: list[tuple[str, int, int]]  # name, count, total ns
    #: system samples: metric -> (rows, mean value) (empty for imported traces)
    samples: dict[str, tuple[int, float]] = field(default_factory=dict)
    #: what a capture could not record, per rank ("rank 0: perf counters unavailable: ...")
    notes: list[str] = field(default_factory=list)


def summarize(profile: Profile, top: int = 5) -> Summary:
    con = profile.connect()
    try:
        nodes = {m.rank: m.node for m in profile.meta.ranks}
        rows = con.sql(
            """SELECT rank, count(*),
                      coalesce(max(ts_ns + coalesce(dur_ns, 0)) FILTER (WHERE ph <> 'M')
                               - min(ts_ns) FILTER (WHERE ph <> 'M'), 0),
                      count(*) FILTER (WHERE kind = 'kernel'),
                      coalesce(sum(dur_ns) FILTER (WHERE kind = 'kernel'), 0),
                      count(*) FILTER (WHERE kind = 'step')
               FROM events GROUP BY rank ORDER BY rank"""
        ).fetchall()
        kinds = dict(
            con.sql("SELECT kind, count(*) FROM events GROUP BY kind ORDER BY count(*) DESC").fetchall()
        )
        samples = {
            str(m): (int(n), float(v))
            for m, n, v in con.sql(
                "SELECT metric, count(*), avg(value) FROM samples GROUP BY metric ORDER BY metric"
            ).fetchall()
        }
        kernels = con.sql(
            f"""SELECT name, count(*), sum(dur_ns) FROM events WHERE kind = 'kernel'
                GROUP BY name ORDER BY sum(dur_ns) DESC, name LIMIT {int(top)}"""
        ).fetchall()
    finally:
        con.close()
    return Summary(
        ranks=[RankSummary(r, nodes.get(r, ""), n, int(s), k, int(kn), st) for r, n, s, k, kn, st in rows],
        kinds={str(k): int(v) for k, v in kinds.items()},
        top_kernels=[(str(n), int(c), int(d)) for n, c, d in kernels],
        samples=samples,
        notes=[
            f"rank {r.rank}: {note}"
            for r in profile.meta.ranks
            for note in ([] if r.complete else ["incomplete: some data could not be written"]) + r.notes
        ],
    )
