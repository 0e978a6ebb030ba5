// Canvas drawing of the timeline: ruler, event rows (events, merged columns), sample rows, arrows.
// Everything is drawn from typed arrays; nothing here allocates per event.
import type { Tile } from "./data";

export const GUTTER = 280; // px of row labels
export const RULER = 26; // px of the time ruler
export const LANE = 16; // px per nesting level of an event row
export const SAMPLE_H = 34;
export const GROUP_H = 22;
export const MAX_LANES = 12; // deeper levels are drawn on the last lane
const BUSY_LEVELS = 16;
/** pale (a few short events) to dark (busy all the column) */
const BUSY_COLORS = Array.from({ length: BUSY_LEVELS }, (_, k) => `hsl(25 80% ${78 - (45 * (k + 0.5)) / BUSY_LEVELS}%)`);

export interface Layout {
  id: string;
  label: string;
  type: "group" | "events" | "samples";
  level: number; // depth in the tree
  y: number;
  h: number;
  open: boolean;
  lanes: number;
  /** a closed group: the device rows under it, drawn flattened on its line (what ran, where busy) */
  summary?: string[];
}

/** A time span in the unit that keeps 1-4 significant digits: 750 ns, 12.5 µs, 3.2 ms, 1.5 s. */
export function fmtDuration(ns: number): string {
  const a = Math.abs(ns);
  if (a < 1e3) return `${+ns.toFixed(0)} ns`;
  if (a < 1e6) return `${+(ns / 1e3).toPrecision(4)} µs`;
  if (a < 1e9) return `${+(ns / 1e6).toPrecision(4)} ms`;
  return `${+(ns / 1e9).toPrecision(5)} s`;
}

/** A tick's label: in the unit of its magnitude, with as many decimals as the tick spacing needs
 * (6.61130 s, 6.61131 s ten microseconds later), so neighbouring ticks never read alike. */
export function fmtTick(t: number, step: number): string {
  if (t === 0) return "0";
  const a = Math.abs(t);
  const [unit, name] = a >= 1e9 ? [1e9, "s"] : a >= 1e6 ? [1e6, "ms"] : a >= 1e3 ? [1e3, "µs"] : [1, "ns"];
  const decimals = Math.min(9, Math.max(0, Math.ceil(Math.log10(unit / step) - 1e-9)));
  return `${(t / unit).toFixed(decimals)} ${name}`;
}

/** Tick spacing: 1, 2 or 5 times a power of ten, at least `minPx` apart. */
export function tickStep(nsPerPx: number, minPx = 90): number {
  const raw = nsPerPx * minPx;
  const p = 10 ** Math.floor(Math.log10(Math.max(raw, 1e-3)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

function hash(text: string): number {
  let h = 2166136261;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619);
  return h >>> 0;
}

const colorCache = new Map<string, string>();
/** A stable colour per name; kernels warm, host calls cool, NCCL collectives red. */
export function nameColor(name: string, kind: string): string {
  const key = `${kind}|${name}`;
  let c = colorCache.get(key);
  if (c) return c;
  const hh = hash(name);
  let hue: number;
  if (/nccl|AllReduce|AllGather|ReduceScatter|SendRecv|Broadcast/i.test(name)) hue = 0;
  else if (kind === "kernel") hue = 20 + (hh % 60);
  else if (kind === "memcpy" || kind === "memset") hue = 280 + (hh % 30);
  else if (kind === "runtime" || kind === "driver") hue = 190 + (hh % 40);
  else if (kind === "step") hue = 120;
  else hue = 90 + (hh % 90);
  c = `hsl(${hue} 60% ${52 + (hh % 12)}%)`;
  colorCache.set(key, c);
  return c;
}

export interface DrawState {
  ctx: CanvasRenderingContext2D;
  width: number; // css px, gutter included
  height: number;
  t0: number;
  t1: number;
  scrollY: number;
  rows: Layout[];
  tile: Tile | null;
  selectedId: number | null;
  search: string;
  origin: string;
}

export function xOf(s: DrawState, t: number): number {
  return GUTTER + ((t - s.t0) / (s.t1 - s.t0)) * (s.width - GUTTER);
}

export function drawAll(s: DrawState, arrows: [number, number, number, number][]): void {
  const { ctx } = s;
  ctx.clearRect(0, 0, s.width, s.height);
  ctx.font = "11px system-ui, sans-serif";
  const rowIndex = new Map<string, Layout>();
  for (const r of s.rows) for (const id of r.summary ?? []) if (!rowIndex.has(id)) rowIndex.set(id, r);
  for (const r of s.rows) rowIndex.set(r.id, r);
  // rows: backgrounds and labels
  ctx.save();
  ctx.beginPath();
  ctx.rect(0, RULER, s.width, s.height - RULER);
  ctx.clip();
  for (const r of s.rows) {
    const y = r.y - s.scrollY + RULER;
    if (y > s.height || y + r.h < RULER) continue;
    ctx.fillStyle = r.type === "group" ? "#eef1f6" : "#fff";
    ctx.fillRect(0, y, s.width, r.h);
    ctx.strokeStyle = "#e3e7ee";
    ctx.beginPath();
    ctx.moveTo(0, y + r.h - 0.5);
    ctx.lineTo(s.width, y + r.h - 0.5);
    ctx.stroke();
    ctx.fillStyle = "#1f2937";
    const arrow = r.type === "group" ? (r.open ? "▾ " : "▸ ") : "";
    ctx.fillText(arrow + r.label, 6 + r.level * 14, y + 15, GUTTER - 12 - r.level * 14);
  }
  const tile = s.tile;
  ctx.beginPath();
  ctx.rect(GUTTER, RULER, s.width - GUTTER, s.height - RULER);
  ctx.clip();
  if (tile) {
    const layoutOf = tile.rows.map((id) => rowIndex.get(id) ?? null);
    const colNs = ((tile.t1 - tile.t0) / tile.width) * tile.binSpan;
    const pxPerNs = (s.width - GUTTER) / (s.t1 - s.t0);
    // merged columns: height and colour from the fraction of the column busy
    // one path per busyness level: 16 fills, whatever the number of columns
    const levels = Array.from({ length: BUSY_LEVELS }, () => new Path2D());
    const w = Math.max(1, colNs * pxPerNs);
    for (let i = 0; i < tile.binCol.length; i++) {
      const r = layoutOf[tile.binRow[i]!];
      if (!r) continue;
      const lane = r.type === "group" ? 0 : Math.min(tile.binDepth[i]!, MAX_LANES - 1);
      const busy = Math.min(1, tile.binBusy[i]! / colNs);
      const x = xOf(s, tile.t0 + (tile.binCol[i]! * (tile.t1 - tile.t0)) / tile.width);
      if (x + w < GUTTER || x > s.width) continue;
      const top = r.y - s.scrollY + RULER + 2 + lane * LANE;
      if (top > s.height || top + LANE < RULER) continue;
      const hh = Math.max(2, (LANE - 3) * busy);
      levels[Math.min(BUSY_LEVELS - 1, Math.floor(busy * BUSY_LEVELS))]!.rect(x, top + (LANE - 3 - hh), w, hh);
    }
    levels.forEach((path, k) => {
      ctx.fillStyle = BUSY_COLORS[k]!;
      ctx.fill(path);
    });
    // events as they are
    const needle = s.search.toLowerCase();
    const match = tile.names.map((n) => needle !== "" && n.toLowerCase().includes(needle));
    const colors: (string | undefined)[] = new Array<string | undefined>(tile.names.length);
    for (let i = 0; i < tile.ts.length; i++) {
      const r = layoutOf[tile.row[i]!];
      if (!r) continue;
      const x0 = Math.max(GUTTER - 2, xOf(s, tile.ts[i]!));
      const x1 = Math.min(s.width + 2, xOf(s, tile.ts[i]! + tile.dur[i]!));
      if (x1 < GUTTER || x0 > s.width) continue;
      const lane = r.type === "group" ? 0 : Math.min(tile.depth[i]!, MAX_LANES - 1);
      const top = r.y - s.scrollY + RULER + 2 + lane * LANE;
      const top0 = r.y - s.scrollY + RULER;
      if (top0 > s.height || top0 + r.h < RULER) continue;
      const ni = tile.name[i]!;
      let color = colors[ni];
      if (color === undefined) color = colors[ni] = nameColor(tile.names[ni]!, tile.kinds[tile.kind[i]!]!);
      ctx.globalAlpha = needle === "" || match[ni] ? 1 : 0.25;
      ctx.fillStyle = color;
      const w = Math.max(1, x1 - x0);
      ctx.fillRect(x0, top, w, LANE - 3);
      if (match[tile.name[i]!]) {
        ctx.strokeStyle = "#f5c400";
        ctx.lineWidth = 2;
        ctx.strokeRect(x0, top, w, LANE - 3);
        ctx.lineWidth = 1;
      }
      if (tile.id[i] === s.selectedId) {
        ctx.strokeStyle = "#111";
        ctx.lineWidth = 2;
        ctx.strokeRect(x0 - 1, top - 1, w + 2, LANE - 1);
        ctx.lineWidth = 1;
      }
      if (w > 40) {
        ctx.fillStyle = "#111";
        ctx.fillText(tile.names[ni]!, x0 + 3, top + 10, w - 6);
      }
    }
    ctx.globalAlpha = 1;
    // sample rows: a line 0-100 (or 0-max) over the row
    const byRow = new Map<number, number[]>();
    for (let i = 0; i < tile.sTs.length; i++) {
      const k = tile.sRow[i]!;
      const list = byRow.get(k) ?? [];
      list.push(i);
      byRow.set(k, list);
    }
    for (const [k, idx] of byRow) {
      const r = layoutOf[k];
      if (!r) continue;
      const top = r.y - s.scrollY + RULER + 2;
      const hh = r.h - 5;
      let max = 100;
      for (const i of idx) max = Math.max(max, tile.sVal[i]!);
      ctx.fillStyle = "rgba(46, 125, 50, 0.25)";
      ctx.strokeStyle = "#2e7d32";
      ctx.beginPath();
      // a sample holds until the next one: steps, carried to the window's end
      const yOf = (v: number): number => top + hh - (hh * v) / max;
      const first = Math.max(GUTTER, xOf(s, tile.sTs[idx[0]!]!));
      ctx.moveTo(first, top + hh);
      let prev = top + hh;
      for (const i of idx) {
        const x = Math.max(GUTTER, xOf(s, tile.sTs[i]!));
        ctx.lineTo(x, prev);
        prev = yOf(tile.sVal[i]!);
        ctx.lineTo(x, prev);
      }
      ctx.lineTo(s.width, prev);
      ctx.lineTo(s.width, top + hh);
      ctx.fill();
      ctx.stroke();
    }
  }
  // launch → kernel arrows: [x0, y0, x1, y1] in canvas px
  ctx.strokeStyle = "#c62828";
  ctx.fillStyle = "#c62828";
  for (const [x0, y0, x1, y1] of arrows) {
    ctx.beginPath();
    ctx.moveTo(x0, y0);
    ctx.bezierCurveTo(x0, (y0 + y1) / 2, x1, (y0 + y1) / 2, x1, y1);
    ctx.stroke();
    ctx.beginPath();
    ctx.moveTo(x1, y1);
    ctx.lineTo(x1 - 4, y1 - 7);
    ctx.lineTo(x1 + 4, y1 - 7);
    ctx.fill();
  }
  ctx.restore();
  drawRuler(s);
}

function drawRuler(s: DrawState): void {
  const { ctx } = s;
  ctx.fillStyle = "#f7f8fa";
  ctx.fillRect(0, 0, s.width, RULER);
  ctx.strokeStyle = "#c9d0db";
  ctx.beginPath();
  ctx.moveTo(0, RULER - 0.5);
  ctx.lineTo(s.width, RULER - 0.5);
  ctx.stroke();
  const nsPerPx = (s.t1 - s.t0) / (s.width - GUTTER);
  const step = tickStep(nsPerPx);
  ctx.fillStyle = "#374151";
  ctx.fillText(`span ${fmtDuration(s.t1 - s.t0)}`, 6, 16);
  const first = Math.ceil(s.t0 / step) * step;
  for (let t = first; t <= s.t1; t += step) {
    const x = xOf(s, t);
    ctx.beginPath();
    ctx.moveTo(x + 0.5, RULER - 8);
    ctx.lineTo(x + 0.5, RULER);
    ctx.stroke();
    ctx.fillText(fmtTick(t, step), x + 3, 14);
  }
}
