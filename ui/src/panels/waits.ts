// Collectives across ranks (GET /api/profiles/{id}/collectives/waits): each rank's wait for the
// slowest peer in the collectives matched on every rank, and which rank arrived last how often.
import { type Scope, type Table, query } from "../api";
import { card, render } from "../charts";
import { h } from "../dom";
import { count, duration } from "../format";

export function waitsView(): { root: HTMLElement; refresh(id: string, scope: Scope): Promise<unknown> } {
  const c = card("collective_waits", "Collectives: each rank's wait for the slowest", "wide");
  const root = h("section", { class: "dash-section", id: "collectives-view" }, h("h2", {}, "Collectives across ranks"), h("div", { class: "grid" }, c.root));

  function draw(t: Table): void {
    const rows = t.rows;
    if (!rows.length) {
      render("collective_waits", c, { empty: "No collective launched on two or more ranks in scope." }, t.notes);
      return;
    }
    const n = Number(rows[0]?.collectives ?? 0);
    const last = [...rows].sort((a, b) => Number(b.last_arrivals) - Number(a.last_arrivals))[0];
    const notes = [
      ...t.notes,
      last && Number(last.last_arrivals) > 0 ? `rank ${last.rank} arrived last in ${count(Number(last.last_arrivals))} of ${count(n)} collectives: the others waited for it` : "",
    ].filter(Boolean);
    render(
      "collective_waits",
      c,
      {
        option: {
          tooltip: {
            trigger: "axis",
            axisPointer: { type: "shadow" },
            confine: true,
            formatter: (ps: { dataIndex: number }[]) => {
              const r = rows[ps[0]?.dataIndex ?? 0];
              if (!r) return "";
              return [
                `rank ${r.rank}: waited ${duration(Number(r.wait_ns))} in ${count(Number(r.collectives))} collectives`,
                `mean ${duration(Number(r.mean_wait_ns))}, longest ${duration(Number(r.max_wait_ns))}`,
                `arrived last ${count(Number(r.last_arrivals))} times; clock offset ${duration(Number(r.clock_offset_ns))}`,
              ].join("<br>");
            },
          },
          grid: { left: 80, right: 20, top: 20, bottom: 30 },
          xAxis: { type: "category", data: rows.map((r) => `rank ${r.rank}`) },
          yAxis: { type: "value", axisLabel: { formatter: (v: number) => duration(v) } },
          series: [{ type: "bar", name: "wait for the slowest", data: rows.map((r) => Number(r.wait_ns)) }],
        },
      },
      notes,
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
        const r = await fetch(`/api/profiles/${encodeURIComponent(id)}/collectives/waits${query({ node: scope.nodes, rank: scope.ranks, steps })}`, { headers: { Accept: "application/json" } });
        if (!r.ok) throw new Error(`collectives: ${r.status} ${((await r.json().catch(() => ({}))) as { detail?: string }).detail ?? r.statusText}`);
        const answer = (await r.json()) as Table;
        if (mine === asked) draw(answer);
        return null;
      } catch (err) {
        // shown by the dashboard once its own answer is in (an unknown profile: its error only)
        return mine === asked ? err : null;
      }
    },
  };
}
