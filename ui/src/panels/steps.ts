// Step time, launch latency and the rank comparison.
import type { Row } from "../api";
import { histogram } from "../charts";
import { count, duration } from "../format";
import { type Panel, rowsOf } from "./types";

export const stepHistogram: Panel = {
  name: "step_histogram",
  title: "Step time histogram",
  notes: ["steps_job", "step_histogram"],
  build(tables) {
    const table = tables.step_histogram;
    if (!table || !table.rows.some((r) => Number(r.count) > 0))
      return { empty: "No ProfilerStep#N marks in this profile (or in this scope)." };
    return { option: histogram(table, "steps") };
  },
};

export const latencyHistogram: Panel = {
  name: "latency_histogram",
  title: "Launch-to-run latency histogram",
  notes: ["launch_latency", "latency_histogram"],
  build(tables) {
    const table = tables.latency_histogram;
    if (!table || !table.rows.some((r) => Number(r.count) > 0))
      return { empty: "No kernel launches linked to GPU work in this profile." };
    return { option: histogram(table, "launches") };
  },
};

const RANK_SERIES: [string, string][] = [
  ["mean_step_ns", "mean step"],
  ["busy_ns", "GPU busy"],
  ["compute_ns", "compute"],
  ["communication_ns", "communication"],
  ["idle_ns", "GPU idle"],
];

export const ranks: Panel = {
  name: "ranks",
  title: "Ranks compared",
  notes: ["ranks"],
  wide: true,
  build(tables) {
    const rows = rowsOf(tables, "ranks");
    if (!rows.length) return { empty: "No ranks in this scope." };
    const label = (r: Row) => `rank ${r.rank}${r.straggler ? " (straggler)" : ""}`;
    return {
      option: {
        tooltip: {
          trigger: "axis",
          axisPointer: { type: "shadow" },
          confine: true,
          formatter: (ps: { dataIndex: number; marker?: string; seriesName: string; value: number | null }[]) => {
            const first = ps[0];
            if (!first) return "";
            const r = rows[first.dataIndex] as Row;
            const lines = [`<b>${label(r)}</b>`, `${count(r.steps as number)} steps`];
            for (const p of ps) lines.push(`${p.marker ?? ""}${p.seriesName}: ${duration(p.value)}`);
            if (r.straggler) lines.push(`straggler: ${String(r.reason)}`);
            return lines.join("<br>");
          },
        },
        legend: { bottom: 0 },
        grid: { left: 8, right: 16, top: 16, bottom: 40, containLabel: true },
        xAxis: { type: "category", data: rows.map(label) },
        yAxis: { type: "value", axisLabel: { formatter: (v: number) => `${v / 1e6} ms` } },
        series: RANK_SERIES.map(([column, name]) => ({
          type: "bar",
          name,
          data: rows.map((r) => (r[column] === null ? null : (r[column] as number))),
        })),
      },
    };
  },
};
