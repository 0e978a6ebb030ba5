// ECharts set-up, the chart registry tests read (window.__hyperscope.charts[name].getOption()),
// chart cards, and the option builders every view shares (pie, histogram, lines, bars).
import { BarChart, LineChart, PieChart } from "echarts/charts";
import { GridComponent, LegendComponent, TitleComponent, TooltipComponent } from "echarts/components";
import * as echarts from "echarts/core";
import { CanvasRenderer } from "echarts/renderers";

import type { Row, Table } from "./api";
import { h } from "./dom";
import { count, duration } from "./format";
import { hooks } from "./hooks";

echarts.use([PieChart, BarChart, LineChart, GridComponent, LegendComponent, TooltipComponent, TitleComponent, CanvasRenderer]);

export type Option = echarts.EChartsCoreOption;
export type Chart = echarts.ECharts;
/** A chart, an empty state, or a table/text in HTML (full names, no chart). */
export type Built = { option: Option; height?: number } | { empty: string } | { html: HTMLElement };

/** A dashboard card: title, chart body, the table's notes; `data-chart` names it for tests. */
export interface Card {
  root: HTMLElement;
  body: HTMLElement;
  notes: HTMLElement;
  tools: HTMLElement;
}

export function card(name: string, title: string, extraClass = ""): Card {
  const body = h("div", { class: "chart-body" });
  const notes = h("ul", { class: "notes" });
  const tools = h("div", { class: "card-tools" });
  const root = h(
    "section",
    { class: `card ${extraClass}`.trim(), "data-chart": name },
    h("header", { class: "card-head" }, h("h3", {}, title), tools),
    body,
    notes,
  );
  return { root, body, notes, tools };
}

const observers = new Map<string, ResizeObserver>();

/** Draw `built` into the card (reusing its chart), or show the empty state and drop the chart. */
export function render(name: string, c: Card, built: Built, notes: string[] = []): void {
  c.notes.replaceChildren(...notes.map((n) => h("li", {}, n)));
  if ("empty" in built) {
    dispose(name);
    c.root.dataset.empty = "true";
    c.body.replaceChildren(h("p", { class: "empty" }, built.empty));
    return;
  }
  delete c.root.dataset.empty;
  if ("html" in built) {
    dispose(name);
    c.root.dataset.html = "true";
    c.body.replaceChildren(built.html);
    return;
  }
  delete c.root.dataset.html;
  c.body.style.height = built.height ? `${built.height}px` : ""; // a chart of many bars: taller
  let chart = hooks.charts[name];
  if (!chart || chart.isDisposed() || chart.getDom() !== c.body) {
    dispose(name);
    c.body.replaceChildren();
    chart = echarts.init(c.body, undefined, { renderer: "canvas" });
    hooks.charts[name] = chart;
    const observer = new ResizeObserver(() => chart?.resize());
    observer.observe(c.body);
    observers.set(name, observer);
  }
  chart.setOption({ animation: false, ...built.option }, { notMerge: true });
}

export function dispose(name: string): void {
  observers.get(name)?.disconnect();
  observers.delete(name);
  const chart = hooks.charts[name];
  if (chart && !chart.isDisposed()) chart.dispose();
  delete hooks.charts[name];
}

export function disposeAll(): void {
  for (const name of Object.keys(hooks.charts)) dispose(name);
}

// ---- option builders -------------------------------------------------------------------------

export interface Slice {
  name: string;
  value: number;
  /** Extra tooltip lines (exact figures with their units). */
  detail?: string[];
  itemStyle?: { color: string };
}

/** Fixed colours where a slice means the same everywhere. */
export const COLORS = {
  busy: "#2f6fde",
  idle: "#cfd6e2",
  compute: "#3ba272",
  communication: "#fc8452",
  memory: "#9a60b4",
} as const;

interface TooltipParam {
  seriesName: string;
  name: string;
  value: unknown;
  percent?: number;
  data?: unknown;
  marker?: string;
  dataIndex: number;
  axisValueLabel?: string;
}

/** One or two concentric pie rings; values stay in the table's units (ns, counts). */
export function pie(rings: { name: string; slices: Slice[] }[], fmt: (v: number) => string): Option {
  const radii: [string, string][] = rings.length > 1 ? [["0%", "36%"], ["46%", "62%"]] : [["30%", "60%"]];
  return {
    tooltip: {
      trigger: "item",
      confine: true,
      formatter: (p: TooltipParam) => {
        const slice = p.data as Slice;
        const lines = [`<b>${p.seriesName}</b>`, `${p.marker ?? ""}${p.name}: ${fmt(slice.value)} (${p.percent ?? 0} %)`];
        return [...lines, ...(slice.detail ?? [])].join("<br>");
      },
    },
    legend: { type: "plain", bottom: 0 },
    series: rings.map((ring, i) => ({
      type: "pie",
      name: ring.name,
      radius: radii[i],
      center: ["50%", "45%"],
      avoidLabelOverlap: true,
      label: {
        show: rings.length === 1 || i === 1,
        formatter: rings.length === 1 ? "{b}\n{d}%" : "{d}%",
        overflow: "truncate",
        width: 90,
      },
      labelLine: { length: 8, length2: 8 },
      data: ring.slices,
    })),
  };
}

/** A histogram of {lo_ns, hi_ns, count} rows: one bar per bin, the count its value. */
export function histogram(table: Table, what: string): Option {
  // each bar is labelled by its lower bound; the tooltip gives the whole bin
  const labels = table.rows.map((r) => duration(r.lo_ns as number));
  return {
    tooltip: {
      trigger: "axis",
      axisPointer: { type: "shadow" },
      confine: true,
      formatter: (ps: TooltipParam[]) => {
        const p = ps[0];
        if (!p) return "";
        const row = table.rows[p.dataIndex] as Row;
        return `${duration(row.lo_ns as number)} to ${duration(row.hi_ns as number)}<br>${p.marker ?? ""}${count(row.count as number)} ${what}`;
      },
    },
    grid: { left: 56, right: 16, top: 16, bottom: 64 },
    xAxis: { type: "category", data: labels, axisLabel: { rotate: 30, fontSize: 10 } },
    yAxis: { type: "value", name: what, minInterval: 1 },
    series: [{ type: "bar", name: what, data: table.rows.map((r) => r.count as number), barCategoryGap: "8%" }],
  };
}

/** Lines over time: x in seconds since the first bucket, y in %. */
export function utilizationLines(series: { name: string; points: [number, number][] }[], t0: number): Option {
  return {
    tooltip: {
      trigger: "axis",
      confine: true,
      formatter: (ps: TooltipParam[]) => {
        const first = ps[0];
        if (!first) return "";
        const x = (first.value as [number, number])[0];
        const lines = ps.map((p) => `${p.marker ?? ""}${p.seriesName}: ${(p.value as [number, number])[1].toFixed(2)} %`);
        return [`t = ${x.toFixed(3)} s`, ...lines].join("<br>");
      },
    },
    // every line in the legend, wrapped over as many rows as it takes (a paged legend hid ranks)
    legend: { type: "plain", bottom: 0 },
    grid: { left: 48, right: 16, top: 16, bottom: 40 + 22 * Math.ceil(series.length / 6) },
    xAxis: { type: "value", name: "s", min: 0, axisLabel: { formatter: (v: number) => `${v} s` } },
    yAxis: { type: "value", name: "%", min: 0, max: 100 },
    series: series.map((s) => ({
      type: "line",
      name: s.name,
      showSymbol: false,
      data: s.points.map(([x, y]) => [(x - t0) / 1e9, y]),
    })),
  };
}

export function bucketOrigin(rows: Row[]): number {
  let t0 = Infinity;
  for (const r of rows) t0 = Math.min(t0, r.bucket_start_ns as number);
  return Number.isFinite(t0) ? t0 : 0;
}

/** Group rows into named series of [bucket_start_ns, util_pct] points. */
export function groupSeries(rows: Row[], key: (r: Row) => string): { name: string; points: [number, number][] }[] {
  const groups = new Map<string, [number, number][]>();
  for (const r of rows) {
    const k = key(r);
    let points = groups.get(k);
    if (!points) groups.set(k, (points = []));
    points.push([r.bucket_start_ns as number, r.util_pct as number]);
  }
  return [...groups].map(([name, points]) => ({ name, points }));
}
