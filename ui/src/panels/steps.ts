// Step time, launch latency and the rank comparison.
import type { Row, Table } from "../api";
import { histogram, type Option } from "../charts";
import { count, duration } from "../format";
import { type Panel, rowsOf } from "./types";

/** mean, p50 and p90 over the chart, from the statistics table beside the histogram */
function withStats(option: Option, text: string): Option {
  return { ...option, title: { text, left: "center", top: 0, textStyle: { fontSize: 12, fontWeight: "normal" } }, grid: { left: 56, right: 16, top: 32, bottom: 64 } };
}

function statsLine(rows: Table["rows"]): string {
  if (rows.length === 1) {
    const r = rows[0]!;
    return `mean ${duration(r.mean_ns as number)} · p50 ${duration(r.p50_ns as number)} · p90 ${duration(r.p90_ns as number)}`;
  }
  const span = (k: string): string => {
    const v = rows.map((r) => Number(r[k])).filter(Number.isFinite);
    return v.length ? `${duration(Math.min(...v))} to ${duration(Math.max(...v))}` : "–";
  };
  return `per rank: mean ${span("mean_ns")} · p50 ${span("p50_ns")} · p90 ${span("p90_ns")}`;
}

export const stepHistogram: Panel = {
  name: "step_histogram",
  title: "Step time histogram",
  notes: ["steps_job", "step_histogram"],
  build(tables) {
    const table = tables.step_histogram;
    if (!table || !table.rows.some((r) => Number(r.count) > 0))
      return { empty: "No ProfilerStep#N marks in this profile (or in this scope)." };
    return { option: withStats(histogram(table, "steps"), statsLine(rowsOf(tables, "steps_job"))) };
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
    return { option: withStats(histogram(table, "launches"), statsLine(rowsOf(tables, "launch_latency"))) };
  },
};

/** an axis of durations in the unit of its largest value (ms axes stayed ms at 70,000 ms) */
function durationAxis(largest: number): (v: number) => string {
  const [unit, name] = largest >= 1e10 ? [1e9, "s"] : largest >= 1e7 ? [1e6, "ms"] : largest >= 1e4 ? [1e3, "µs"] : [1, "ns"];
  return (v: number) => `${+(v / unit).toPrecision(4)} ${name}`;
}

// the mean step is per step, the others whole-run totals: an axis each (left, right)
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
    const largest = (cols: string[]): number => Math.max(0, ...rows.flatMap((r) => cols.map((c) => Number(r[c]) || 0)));
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
        grid: { left: 8, right: 16, top: 32, bottom: 40, containLabel: true },
        xAxis: { type: "category", data: rows.map(label) },
        yAxis: [
          { type: "value", name: "per step", axisLabel: { formatter: durationAxis(largest(["mean_step_ns"])) } },
          { type: "value", name: "whole run", splitLine: { show: false }, axisLabel: { formatter: durationAxis(largest(RANK_SERIES.slice(1).map(([c]) => c))) } },
        ],
        series: RANK_SERIES.map(([column, name], i) => ({
          type: "bar",
          name,
          yAxisIndex: i === 0 ? 0 : 1,
          data: rows.map((r) => (r[column] === null ? null : (r[column] as number))),
        })),
      },
    };
  },
};
