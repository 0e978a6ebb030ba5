// Canvas drawing of a timeline frame: row backgrounds and labels, the tile's layer (layer.ts: events,
// merged columns, samples, instants, drawn once per tile and scale), the selection, launch → kernel
// arrows and the ruler. Nothing here goes over the tile's events.
import * as fmt from "../format";
import type { Tile } from "./data";
import { GUTTER, type Layout, RULER, scaleTop } from "./geometry";

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

/** Tick spacing: 1, 2 or 5 times a power of ten, at least `minPx` apart. A scale that is not a
 * positive finite number (a hidden canvas is 0 px wide: a negative ns per px) gets no ticks
 * (Infinity), never a tiny step that a ruler loop would count through for minutes. */
export function tickStep(nsPerPx: number, minPx = 90): number {
  const raw = nsPerPx * minPx;
  if (!Number.isFinite(raw) || raw <= 0) return Infinity;
  const p = 10 ** Math.floor(Math.log10(Math.max(raw, 1e-3)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

/** The ticks of a ruler `widthPx` wide over [t0, t1]: at most one per `minPx` px (and none for a
 * width or span that is not positive), so drawing them is bounded by the canvas, not the span. */
export function rulerTicks(t0: number, t1: number, widthPx: number, minPx = 90): { step: number; ticks: number[] } {
  if (!(widthPx > 0) || !(t1 > t0) || !Number.isFinite(t0) || !Number.isFinite(t1)) return { step: Infinity, ticks: [] };
  const step = tickStep((t1 - t0) / widthPx, minPx);
  const ticks: number[] = [];
  if (!Number.isFinite(step)) return { step, ticks };
  const most = Math.ceil(widthPx / minPx) + 2;
  for (let t = Math.ceil(t0 / step) * step; t <= t1 && ticks.length < most; t += step) ticks.push(t);
  return { step, ticks };
}

export interface DrawState {
  ctx: CanvasRenderingContext2D;
  width: number; // css px, gutter included
  height: number;
  t0: number;
  t1: number;
  scrollY: number;
  rows: Layout[];
  /** sample rows: the value at the top of their scale, as text (from the tile in view) */
  scales?: Map<string, string>;
}

/** The top of each sample row's scale in the tile, in the row's unit: what its full height means. */
export function scaleLabels(t: Tile, rows: Map<string, Layout>): Map<string, string> {
  const largest = new Map<number, number>();
  for (let i = 0; i < t.sRow.length; i++) {
    const k = t.sRow[i]!;
    largest.set(k, Math.max(largest.get(k) ?? 0, t.sVal[i]!));
  }
  const out = new Map<string, string>();
  for (const [k, v] of largest) {
    const id = t.rows[k];
    const r = id === undefined ? undefined : rows.get(id);
    if (!r || !id) continue;
    const top = scaleTop(r.unit, v);
    const text = r.unit === "%" ? `${fmt.num(top, 0)}%` : r.unit === "bytes" ? fmt.bytes(top) : fmt.num(top, top < 10 ? 2 : 0);
    out.set(id, `top ${text}${r.unit && r.unit !== "%" && r.unit !== "bytes" ? ` ${r.unit}` : ""}`);
  }
  return out;
}

/** A launch → kernel arrow in canvas px; dashed when an end's row is hidden in a closed group. */
export interface Arrow {
  x0: number;
  y0: number;
  x1: number;
  y1: number;
  dashed: boolean;
}

/** A rectangle in canvas px (the selected event's outline). */
export interface Rect {
  x: number;
  y: number;
  w: number;
  h: number;
}

export function xOf(s: { t0: number; t1: number; width: number }, t: number): number {
  return GUTTER + ((t - s.t0) / (s.t1 - s.t0)) * (s.width - GUTTER);
}

/** One frame; `paintTile` draws the tile's events clipped to the events area. Returns the ruler's
 * ticks (ns from the origin). */
export function drawFrame(
  s: DrawState,
  paintTile: () => void,
  selected: Rect | null,
  arrows: Arrow[],
  coll?: { arrows: Arrow[]; marks: Rect[]; color: string; lastColor: string },
): number[] {
  const { ctx } = s;
  ctx.clearRect(0, 0, s.width, s.height);
  ctx.font = "11px system-ui, sans-serif";
  ctx.save();
  ctx.beginPath();
  ctx.rect(0, RULER, s.width, s.height - RULER);
  ctx.clip();
  // rows: backgrounds and labels (the rows on screen only: a binary search for the first)
  let lo = 0;
  let hi = s.rows.length;
  while (lo < hi) {
    const m = (lo + hi) >> 1;
    if (s.rows[m]!.y + s.rows[m]!.h < s.scrollY) lo = m + 1;
    else hi = m;
  }
  ctx.strokeStyle = "#e3e7ee";
  for (let k = lo; k < s.rows.length; k++) {
    const r = s.rows[k]!;
    const y = r.y - s.scrollY + RULER;
    if (y > s.height) break;
    ctx.fillStyle = r.type === "group" ? "#eef1f6" : "#fff";
    ctx.fillRect(0, y, s.width, r.h);
    ctx.beginPath();
    ctx.moveTo(0, y + r.h - 0.5);
    ctx.lineTo(s.width, y + r.h - 0.5);
    ctx.stroke();
    ctx.fillStyle = "#1f2937";
    const arrow = r.type === "group" ? (r.open ? "▾ " : "▸ ") : "";
    ctx.fillText(arrow + r.label, 6 + r.level * 14, y + 15, GUTTER - 12 - r.level * 14);
    const scale = r.type === "samples" ? s.scales?.get(r.id) : undefined;
    if (scale) {
      ctx.fillStyle = "#6b7280";
      ctx.fillText(scale, 6 + r.level * 14, y + 28, GUTTER - 12 - r.level * 14);
    }
  }
  ctx.beginPath();
  ctx.rect(GUTTER, RULER, s.width - GUTTER, s.height - RULER);
  ctx.clip();
  paintTile();
  if (selected) {
    ctx.strokeStyle = "#111";
    ctx.lineWidth = 2;
    ctx.strokeRect(selected.x - 1, selected.y - 1, selected.w + 2, selected.h + 2);
    ctx.lineWidth = 1;
  }
  drawArrows(ctx, arrows, "#c62828");
  if (coll) {
    // collectives: each rank's kernel → the last rank's, and the last rank's kernel outlined
    drawArrows(ctx, coll.arrows, coll.color);
    ctx.strokeStyle = coll.lastColor;
    ctx.fillStyle = coll.lastColor;
    ctx.lineWidth = 3;
    for (const m of coll.marks) {
      ctx.strokeRect(m.x - 2, m.y - 2, m.w + 4, m.h + 4);
      ctx.fillText("last", m.x + m.w + 5, m.y + Math.min(m.h, 11));
    }
    ctx.lineWidth = 1;
  }
  ctx.restore();
  return drawRuler(s);
}

/** Arrows in one colour; an end hidden in a closed group goes to the group's line, dashed. One
 * path per line style and one for the heads: thousands of arrows cost three draws. */
function drawArrows(ctx: CanvasRenderingContext2D, arrows: Arrow[], color: string): void {
  if (arrows.length === 0) return;
  ctx.strokeStyle = color;
  ctx.fillStyle = color;
  const lines = [new Path2D(), new Path2D()]; // solid, dashed
  const heads = new Path2D();
  for (const a of arrows) {
    const bow = Math.abs(a.y1 - a.y0) < 12 ? -14 : 0; // both ends on one line: an arc above it
    const mid = (a.y0 + a.y1) / 2 + bow;
    const path = lines[a.dashed ? 1 : 0]!;
    path.moveTo(a.x0, a.y0);
    path.bezierCurveTo(a.x0, mid, a.x1, mid, a.x1, a.y1);
    const down = a.y1 >= mid ? -7 : 7; // the head points along the curve's end
    heads.moveTo(a.x1, a.y1);
    heads.lineTo(a.x1 - 4, a.y1 + down);
    heads.lineTo(a.x1 + 4, a.y1 + down);
    heads.closePath();
  }
  ctx.stroke(lines[0]!);
  ctx.setLineDash([4, 3]);
  ctx.stroke(lines[1]!);
  ctx.setLineDash([]);
  ctx.fill(heads);
}

function drawRuler(s: DrawState): number[] {
  const { ctx } = s;
  ctx.fillStyle = "#f7f8fa";
  ctx.fillRect(0, 0, s.width, RULER);
  ctx.strokeStyle = "#c9d0db";
  ctx.beginPath();
  ctx.moveTo(0, RULER - 0.5);
  ctx.lineTo(s.width, RULER - 0.5);
  ctx.stroke();
  ctx.fillStyle = "#374151";
  ctx.fillText(`span ${fmtDuration(s.t1 - s.t0)}`, 6, 16);
  const { step, ticks } = rulerTicks(s.t0, s.t1, s.width - GUTTER);
  for (const t of ticks) {
    const x = xOf(s, t);
    ctx.beginPath();
    ctx.moveTo(x + 0.5, RULER - 8);
    ctx.lineTo(x + 0.5, RULER);
    ctx.stroke();
    ctx.fillText(fmtTick(t, step), x + 3, 14);
  }
  return ticks;
}
