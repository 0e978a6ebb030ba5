// The dashboard's memory view (GET /api/profiles/{id}/memory, from the allocator's [memory] events):
// peak allocated and reserved per rank and GPU, the allocation curve of the ranks and steps in
// scope, and the largest blocks alive at each GPU's peak. Fetched beside the dashboard's tables.
import { type Scope, type Table, query } from "../api";
import { type Card, card, render } from "../charts";
import { h } from "../dom";
import { bytes, duration } from "../format";

interface MemoryAnswer {
  peaks: Table;
  curve: Table;
  allocations: Table;
}

function table(head: string[], body: (string | number)[][], numeric: boolean[]): HTMLElement {
  return h(
    "table",
    { class: "answer-table" },
    h("thead", {}, h("tr", {}, head.map((c, i) => h("th", { class: numeric[i] ? "num" : "" }, c)))),
    h("tbody", {}, body.map((r) => h("tr", {}, r.map((v, i) => h("td", { class: numeric[i] ? "num" : "" }, String(v)))))),
  );
}

export function memoryView(): { root: HTMLElement; refresh(id: string, scope: Scope): Promise<unknown> } {
  const peaks: Card = card("memory_peaks", "Peak GPU memory per rank");
  const curve: Card = card("memory_curve", "GPU memory allocated over time", "wide");
  const allocs: Card = card("memory_allocations", "Largest allocations alive at the peak", "wide");
  const root = h("section", { class: "dash-section", id: "memory-view" }, h("h2", {}, "Memory"), h("div", { class: "grid" }, peaks.root, curve.root, allocs.root));

  function draw(a: MemoryAnswer): void {
    const p = a.peaks.rows;
    render(
      "memory_peaks",
      peaks,
      p.length
        ? { html: table(["Rank", "GPU", "Peak allocated", "Peak reserved", "From"], p.map((r) => [Number(r.rank) < 0 ? "–" : Number(r.rank), Number(r.device), bytes(Number(r.peak_allocated_bytes)), r.peak_reserved_bytes === null ? "–" : bytes(Number(r.peak_reserved_bytes)), String(r.source)]), [true, true, true, true, false]) }
        : { empty: "No GPU memory recorded (profile with profile_memory=True)." },
      a.peaks.notes,
    );
    const rows = a.curve.rows;
    if (!rows.length) render("memory_curve", curve, { empty: "No allocator events in scope." }, a.curve.notes);
    else {
      const t0 = Math.min(...rows.map((r) => Number(r.bucket_start_ns)));
      const series = new Map<string, { name: string; type: "line"; step: "end"; showSymbol: boolean; data: [number, number][] }>();
      for (const r of rows) {
        for (const [what, col] of [["allocated", "allocated_bytes"], ["reserved", "reserved_bytes"]] as const) {
          if (r[col] === null) continue;
          const name = `rank ${r.rank} · GPU ${r.device} ${what}`;
          const s = series.get(name) ?? { name, type: "line", step: "end", showSymbol: false, data: [] };
          s.data.push([(Number(r.bucket_start_ns) - t0) / 1e9, Number(r[col])]);
          series.set(name, s);
        }
      }
      render(
        "memory_curve",
        curve,
        {
          option: {
            tooltip: { trigger: "axis", confine: true, valueFormatter: (v: unknown) => bytes(Number(v)) },
            legend: { type: "scroll", bottom: 0 },
            grid: { left: 70, right: 20, top: 20, bottom: 50 },
            xAxis: { type: "value", name: "s", axisLabel: { formatter: (v: number) => `${v.toFixed(2)} s` } },
            yAxis: { type: "value", axisLabel: { formatter: (v: number) => bytes(v) } },
            series: [...series.values()],
          },
        },
        [...a.curve.notes, "each point is the highest total in its slice of time: the peak is never averaged away"],
      );
    }
    const al = a.allocations.rows;
    render(
      "memory_allocations",
      allocs,
      al.length
        ? { html: table(["Rank", "GPU", "Size", "Allocated before the peak", "Address"], al.map((r) => [Number(r.rank), Number(r.device), bytes(Number(r.bytes)), duration(Number(r.peak_ts_ns) - Number(r.allocated_ts_ns)), r.addr === null ? "–" : `0x${Number(r.addr).toString(16)}`]), [true, true, true, true, false]) }
        : { empty: "No GPU allocations in scope." },
      a.allocations.notes,
    );
  }

  let asked = 0;

  return {
    root,
    async refresh(id, scope) {
      // asked together with the dashboard's query (dashboard.ts): a later scope's answer wins
      const mine = ++asked;
      const steps = scope.steps ? `${scope.steps.from}:${scope.steps.to}` : null;
      try {
        const r = await fetch(`/api/profiles/${encodeURIComponent(id)}/memory${query({ node: scope.nodes, rank: scope.ranks, steps })}`, { headers: { Accept: "application/json" } });
        if (!r.ok) throw new Error(`memory view: ${r.status} ${((await r.json().catch(() => ({}))) as { detail?: string }).detail ?? r.statusText}`);
        const answer = (await r.json()) as MemoryAnswer;
        if (mine === asked) draw(answer);
        return null;
      } catch (err) {
        // shown by the dashboard once its own answer is in (an unknown profile: its error only)
        return mine === asked ? err : null;
      }
    },
  };
}
