// Kernel panels: time and launches of all kernels and of the top k (k set in the dashboard).
import type { Row } from "../api";
import type { Option } from "../charts";
import { count, duration, pct } from "../format";
import { type Panel, rowsOf } from "./types";

/** The "(all N kernels)" row closes the table: kernel_type is "" there. */
export function splitKernels(rows: Row[]): { all: Row | undefined; top: Row[] } {
  const all = rows.find((r) => r.kernel_type === "" && String(r.name).startsWith("(all"));
  return { all, top: rows.filter((r) => r !== all) };
}

/** A bar's label: the head and the tail of the name (template kernels share their first 45
 * characters, so a cut head made six bars read alike); the whole name is in the tooltip. */
export function short(name: string): string {
  return name.length > 64 ? `${name.slice(0, 36)}…${name.slice(-27)}` : name;
}

/** Each name's bar label, none alike: `short`, except where two names' heads and tails are the same
 * (cuBLAS kernels differ in the middle, as `tilesize128x128x8` vs `tilesize128x64x8`): those show the
 * part where they differ, and any still alike are numbered. */
export function labels(names: string[]): Map<string, string> {
  const out = names.map(short);
  const common = (a: string, b: string): number => {
    let i = 0;
    while (i < a.length && a[i] === b[i]) i++;
    return i;
  };
  const alike = (): number[][] => {
    const groups = new Map<string, number[]>();
    out.forEach((label, i) => groups.set(label, [...(groups.get(label) ?? []), i]));
    return [...groups.values()].filter((g) => g.length > 1);
  };
  for (const group of alike()) {
    for (const i of group) {
      const n = names[i]!;
      const p = Math.max(...group.filter((j) => j !== i).map((j) => common(n, names[j]!)));
      const at = Math.max(13, p - 16);
      out[i] = `${n.slice(0, 12)}…${n.slice(at, at + 36)}…${n.slice(-14)}`;
    }
  }
  for (const group of alike()) group.forEach((i, k) => (out[i] = `${out[i]} (${k + 1})`));
  return new Map(names.map((n, i) => [n, out[i]!]));
}

/** px of a bar chart of `n` bars: every bar keeps its label */
export function barsHeight(n: number): number {
  return Math.max(340, 40 + 20 * n);
}

function bars(rows: Row[], column: "total_ns" | "launches", fmt: (v: number) => string): Option {
  const names = rows.map((r) => String(r.name));
  const label = labels(names);
  return {
    // the whole row answers the pointer, not only the bar (a tiny bar could not be hovered),
    // the label included
    tooltip: {
      trigger: "axis",
      axisPointer: { type: "shadow" },
      confine: true,
      formatter: (ps: { dataIndex: number; marker?: string }[] | { dataIndex: number; marker?: string }) => {
        const p = Array.isArray(ps) ? ps[0] : ps;
        if (!p) return "";
        const r = rows[p.dataIndex];
        if (!r) return "";
        const lines = [
          `<b>${escape(String(r.name))}</b>`,
          `${p.marker ?? ""}${column === "total_ns" ? "time" : "launches"}: ${fmt(r[column] as number)}`,
          `launches: ${count(r.launches as number)}; total ${duration(r.total_ns as number)}`,
          `mean ${duration(r.mean_ns as number)}, min ${duration(r.min_ns as number)}, max ${duration(r.max_ns as number)}`,
          `${pct(r.pct_of_kernel_time as number)} of kernel time`,
        ];
        if (r.kernel_type) lines.push(`type: ${r.kernel_type}`);
        return lines.join("<br>");
      },
    },
    grid: { left: 8, right: 24, top: 8, bottom: 24, containLabel: true },
    xAxis: {
      type: "value",
      axisLabel: { formatter: (v: number) => (column === "total_ns" ? `${v / 1e6} ms` : count(v)) },
    },
    yAxis: {
      type: "category",
      inverse: true,
      data: names,
      axisLabel: { formatter: (name: string) => label.get(name) ?? short(name), fontSize: 10, interval: 0, width: 420, overflow: "truncate" },
      triggerEvent: true,
    },
    series: [
      {
        type: "bar",
        name: column === "total_ns" ? "time" : "launches",
        data: rows.map((r, i) => ({
          value: r[column] as number,
          itemStyle: i === 0 && r.kernel_type === "" ? { color: "#7f8c9a" } : undefined,
        })),
      },
    ],
  };
}

function escape(text: string): string {
  return text.replace(/[&<>]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;" })[c] ?? c);
}

export const kernelTime: Panel = {
  name: "kernels",
  title: "Kernel time: all kernels and the top k",
  notes: ["kernels"],
  wide: true,
  build(tables) {
    const { all, top } = splitKernels(rowsOf(tables, "kernels"));
    if (!top.length) return { empty: "No GPU kernels in this profile." };
    return { option: bars(all ? [all, ...top] : top, "total_ns", duration), height: barsHeight(top.length + 1) };
  },
};

export const kernelLaunches: Panel = {
  name: "kernel_launches",
  title: "Kernel launches: all kernels and the top k",
  notes: [],
  wide: true,
  build(tables) {
    const { all, top } = splitKernels(rowsOf(tables, "kernels"));
    if (!top.length) return { empty: "No GPU kernels in this profile." };
    return { option: bars(all ? [all, ...top] : top, "launches", (v) => `${count(v)} launches`), height: barsHeight(top.length + 1) };
  },
};
