// GPU panels: active time, activity, memory operations, precision, utilization over time.
import type { Row } from "../api";
import { COLORS, bucketOrigin, groupSeries, type Option, pie, utilizationLines } from "../charts";
import { bytes, count, duration, num, pct } from "../format";
import { type Panel, rowsOf } from "./types";

const NO_GPU = "No GPU activity in this profile (or in this scope).";

/** a line of text over a chart: the figure a reader should not have to hover for */
function withTitle(text: string, option: Option): Option {
  return { ...option, title: { text, left: "center", top: 0, textStyle: { fontSize: 12, fontWeight: "normal" } } };
}

export const gpuTime: Panel = {
  name: "gpu_time_job",
  title: "GPU active time",
  notes: ["gpu_time_job"],
  build(tables) {
    const row = rowsOf(tables, "gpu_time_job")[0];
    if (!row || !(Number(row.busy_ns) > 0)) return { empty: NO_GPU };
    const overlap = row.overlap_pct === null ? "–" : pct(row.overlap_pct as number);
    const busy = (100 * Number(row.busy_ns)) / Number(row.span_ns);
    return {
      option: withTitle(`busy ${pct(busy, 1)} of the span`, pie(
        [
          {
            name: "Busy vs idle",
            slices: [
              { name: "busy", value: row.busy_ns as number, itemStyle: { color: COLORS.busy }, detail: [`span ${duration(row.span_ns as number)}`] },
              { name: "idle", value: row.idle_ns as number, itemStyle: { color: COLORS.idle }, detail: [`idle ${pct(row.idle_pct as number)} of span`] },
            ],
          },
          {
            name: "Busy time by kernel type",
            slices: [
              { name: "compute", value: row.compute_ns as number, itemStyle: { color: COLORS.compute } },
              {
                name: "communication",
                value: row.communication_ns as number,
                itemStyle: { color: COLORS.communication },
                detail: [`overlapped with compute: ${overlap}`],
              },
              { name: "memory", value: row.memory_ns as number, itemStyle: { color: COLORS.memory } },
            ],
          },
        ],
        duration,
      )),
    };
  },
};

export const gpuActivity: Panel = {
  name: "gpu_activity",
  title: "GPU activity",
  notes: ["gpu_activity"],
  build(tables) {
    const rows = rowsOf(tables, "gpu_activity");
    if (!rows.some((r) => Number(r.total_ns) > 0)) return { empty: NO_GPU };
    return {
      option: pie(
        [
          {
            name: "GPU activity",
            slices: rows.map((r) => ({
              name: String(r.activity),
              value: r.total_ns as number,
              detail: [`${count(r.count as number)} operations`, `${pct(r.pct_of_time as number)} of GPU time`],
            })),
          },
        ],
        duration,
      ),
    };
  },
};

export const memoryOps: Panel = {
  name: "memory_ops",
  title: "GPU memory operations",
  notes: ["memory_ops"],
  build(tables) {
    const rows = rowsOf(tables, "memory_ops");
    if (!rows.length) return { empty: "No memory copies or memsets in this profile." };
    return {
      option: pie(
        [
          {
            name: "Memory operations (time)",
            slices: rows.map((r) => ({
              name: String(r.kind),
              value: r.total_ns as number,
              detail: [
                `${count(r.count as number)} operations`,
                `${bytes(r.total_bytes as number)}`,
                r.bandwidth_gbps === null ? "" : `${num(r.bandwidth_gbps as number, 3)} GB/s`,
              ].filter(Boolean),
            })),
          },
        ],
        duration,
      ),
    };
  },
};

export const precision: Panel = {
  name: "precision",
  title: "Kernel precision",
  notes: ["precision"],
  build(tables) {
    const rows = rowsOf(tables, "precision");
    if (!rows.some((r) => Number(r.total_ns) > 0)) return { empty: "No GPU kernels in this profile." };
    return {
      option: pie(
        [
          {
            name: "Kernel time by precision",
            slices: rows.map((r) => ({
              name: String(r.precision),
              value: r.total_ns as number,
              detail: [
                `${count(r.kernels as number)} kernels, ${count(r.launches as number)} launches`,
                `${pct(r.pct_of_kernel_time as number)} of kernel time`,
              ],
            })),
          },
        ],
        duration,
      ),
    };
  },
};

function gpuLabel(r: Row): string {
  const rank = Number(r.rank);
  const what = rank >= 0 ? `rank ${rank}` : `GPU ${r.device}`;
  return r.node ? `${String(r.node)} · ${what}` : what; // no "(unnamed node)" on every line
}

export const gpuUtilization: Panel = {
  name: "gpu_utilization",
  title: "GPU utilization over time, per GPU",
  notes: ["gpu_utilization"],
  wide: true,
  build(tables) {
    const rows = rowsOf(tables, "gpu_utilization");
    if (!rows.length) return { empty: NO_GPU };
    return { option: utilizationLines(groupSeries(rows, gpuLabel), bucketOrigin(rows)) };
  },
};

/** Per node, plus "all nodes": the node lines weighted by each node's GPU count (a GPU without ops in a
 * bucket has no per-GPU row there, so averaging the per-GPU rows would overstate the job). */
export const gpuUtilizationNodes: Panel = {
  name: "gpu_utilization_nodes",
  title: "GPU utilization over time, per node and all nodes",
  notes: ["gpu_utilization_nodes"],
  wide: true,
  build(tables) {
    const rows = rowsOf(tables, "gpu_utilization_nodes");
    if (!rows.length) return { empty: NO_GPU };
    const series = groupSeries(rows, (r) => nodeName(r.node));
    const gpus = new Map<string, Set<string>>();
    for (const r of rowsOf(tables, "gpu_utilization")) {
      const node = nodeName(r.node);
      let set = gpus.get(node);
      if (!set) gpus.set(node, (set = new Set()));
      set.add(`${r.rank}/${r.device}`);
    }
    const weight = (node: string) => Math.max(1, gpus.get(node)?.size ?? 0);
    const total = series.reduce((acc, s) => acc + weight(s.name), 0);
    const sums = new Map<number, number>();
    for (const s of series) {
      for (const [b, util] of s.points) sums.set(b, (sums.get(b) ?? 0) + util * weight(s.name));
    }
    const points = [...sums].sort((a, b) => a[0] - b[0]).map(([b, sum]): [number, number] => [b, sum / total]);
    series.push({ name: "all nodes", points });
    return { option: utilizationLines(series, bucketOrigin(rows)) };
  },
};

export function nodeName(node: unknown): string {
  return node ? String(node) : "(unnamed node)";
}
