// CPU panels: active time of the profiled threads, host CPU utilization over time.
import { COLORS, bucketOrigin, groupSeries, pie, utilizationLines } from "../charts";
import { count, duration } from "../format";
import { nodeName } from "./gpu";
import { type Panel, rowsOf } from "./types";

export const cpuTime: Panel = {
  name: "cpu_time",
  title: "CPU active time (profiled threads)",
  notes: ["cpu_time"],
  build(tables) {
    const rows = rowsOf(tables, "cpu_time");
    let active = 0;
    let idle = 0;
    for (const r of rows) {
      active += r.active_ns as number;
      idle += r.idle_ns as number;
    }
    if (!rows.length || active <= 0) return { empty: "No CPU activity in this profile." };
    return {
      option: pie(
        [
          {
            name: "CPU threads: active vs idle",
            slices: [
              { name: "active", value: active, itemStyle: { color: COLORS.busy }, detail: [`summed over ${count(rows.length)} threads`] },
              { name: "idle", value: idle, itemStyle: { color: COLORS.idle }, detail: [`summed over ${count(rows.length)} threads`] },
            ],
          },
        ],
        duration,
      ),
    };
  },
};

export const cpuUtilization: Panel = {
  name: "cpu_utilization",
  title: "CPU utilization over time",
  notes: ["cpu_utilization"],
  wide: true,
  build(tables) {
    const rows = rowsOf(tables, "cpu_utilization");
    if (!rows.length) return { empty: "No CPU samples or thread activity in this profile." };
    const key = (r: (typeof rows)[number]) => (Number(r.rank) >= 0 ? `${nodeName(r.node)} rank ${r.rank}` : nodeName(r.node));
    const option = utilizationLines(groupSeries(rows, key), bucketOrigin(rows));
    // CPU figures can pass 100 (one thread busy = 100): let the axis grow.
    (option.yAxis as Record<string, unknown>).max = (v: { max: number }) => Math.max(100, Math.ceil(v.max));
    return { option };
  },
};
