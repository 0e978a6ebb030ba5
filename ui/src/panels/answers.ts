// What the analysis computes beyond the charts of gpu.ts/steps.ts, on the page: idle time by
// cause, compute/communication overlap (kernel type segments), the longest launch latencies, and
// why a rank is a straggler. Tables are plain HTML (full names, selectable text).
import type { Row } from "../api";
import { COLORS, pie } from "../charts";
import { h } from "../dom";
import { count, duration, pct } from "../format";
import { type Panel, rowsOf } from "./types";

const IDLE_COLORS: Record<string, string> = {
  "host wait": "#e3a008",
  "launch gap": "#fc8452",
  other: "#9aa5b1",
};

export const idleCauses: Panel = {
  name: "idle_causes",
  title: "GPU idle time by cause",
  notes: ["idle"],
  build(tables) {
    const rows = rowsOf(tables, "idle");
    const by = new Map<string, { ns: number; gaps: number }>();
    for (const r of rows) {
      const k = String(r.cause);
      const v = by.get(k) ?? { ns: 0, gaps: 0 };
      v.ns += Number(r.idle_ns);
      v.gaps += Number(r.gaps);
      by.set(k, v);
    }
    const total = [...by.values()].reduce((a, v) => a + v.ns, 0);
    if (!(total > 0)) return { empty: "No GPU idle time in this profile (or in this scope)." };
    const ranks = new Set(rows.map((r) => String(r.group))).size;
    return {
      option: pie(
        [
          {
            name: `Idle time by cause, ${count(ranks)} rank${ranks === 1 ? "" : "s"} summed`,
            slices: [...by].map(([cause, v]) => ({
              name: cause,
              value: v.ns,
              ...(IDLE_COLORS[cause] ? { itemStyle: { color: IDLE_COLORS[cause] } } : {}),
              detail: [`${count(v.gaps)} gaps, ${pct((100 * v.ns) / total)} of idle time`],
            })),
          },
        ],
        duration,
      ),
    };
  },
};

const SEGMENT_COLORS: Record<string, string> = {
  computation: COLORS.compute,
  communication: COLORS.communication,
  "computation + communication": "#d4a017",
  memory: COLORS.memory,
};

export const kernelTypes: Panel = {
  name: "kernel_types",
  title: "GPU busy time by kernel type, overlap shown",
  notes: ["kernel_types"],
  build(tables) {
    const rows = rowsOf(tables, "kernel_types").filter((r) => Number(r.duration_ns) > 0);
    if (!rows.length) return { empty: "No GPU activity in this profile (or in this scope)." };
    const overlap = rows.find((r) => r.kernel_types === "computation + communication");
    const option = pie(
      [
        {
          name: "Busy time by kernel type",
          slices: rows.map((r) => ({
            name: String(r.kernel_types),
            value: Number(r.duration_ns),
            ...(SEGMENT_COLORS[String(r.kernel_types)] ? { itemStyle: { color: SEGMENT_COLORS[String(r.kernel_types)]! } } : {}),
            detail: [`${pct(r.pct_of_busy as number)} of busy time`],
          })),
        },
      ],
      duration,
    );
    const text = overlap ? `compute and communication overlap: ${pct(overlap.pct_of_busy as number)} of busy time` : "no compute/communication overlap";
    return { option: { ...option, title: { text, left: "center", top: 0, textStyle: { fontSize: 12, fontWeight: "normal" } } } };
  },
};

function table(head: string[], body: (string | number)[][], numeric: boolean[]): HTMLElement {
  return h(
    "table",
    { class: "answer-table" },
    h("thead", {}, h("tr", {}, head.map((c, i) => h("th", numeric[i] ? { class: "num" } : {}, c)))),
    h("tbody", {}, body.map((r) => h("tr", {}, r.map((v, i) => h("td", numeric[i] ? { class: "num" } : { class: "name" }, v))))),
  );
}

export const latencyOutliers: Panel = {
  name: "latency_outliers",
  title: "Longest launch-to-run latencies",
  notes: ["latency_outliers"],
  wide: true,
  build(tables) {
    const rows = rowsOf(tables, "latency_outliers");
    if (!rows.length) return { empty: "No kernel launches linked to GPU work in this profile." };
    const stats = rowsOf(tables, "launch_latency");
    const p50 = new Map(stats.map((r) => [String(r.group), Number(r.p50_ns)]));
    return {
      html: table(
        ["Latency", "× the rank's p50", "Rank", "Launch", "Kernel"],
        rows.map((r: Row) => {
          const median = p50.get(String(r.rank));
          const times = median && median > 0 ? `${(Number(r.latency_ns) / median).toFixed(1)}×` : "–";
          return [duration(r.latency_ns as number), times, String(r.rank), String(r.launch), String(r.kernel)];
        }),
        [true, true, true, false, false],
      ),
    };
  },
};

export const stragglers: Panel = {
  name: "stragglers",
  title: "Stragglers: which rank holds the others back, and why",
  notes: ["ranks"],
  wide: true,
  build(tables) {
    const rows = rowsOf(tables, "ranks");
    if (!rows.length) return { empty: "No ranks in this scope." };
    const slow = rows.filter((r) => r.straggler);
    if (!slow.length) {
      return { html: h("p", { class: "answer-none" }, rows.length === 1 ? "One rank: nothing to compare." : `No straggler among ${count(rows.length)} ranks.`) };
    }
    return {
      html: table(
        ["Rank", "Mean step", "GPU busy", "GPU idle", "Why"],
        slow.map((r) => [String(r.rank), duration(r.mean_step_ns as number), duration(r.busy_ns as number), duration(r.idle_ns as number), String(r.reason)]),
        [true, true, true, true, false],
      ),
    };
  },
};
