// A tile drawn once into an offscreen canvas at the view's scale, then copied with an offset on every
// frame while the view pans: a pan frame costs one drawImage whatever the number of events. The
// drawing itself is split into slices of a few milliseconds (a frame keeps showing the previous
// layer meanwhile), and everything per event that does not depend on the view (colours, the
// order by colour and by busyness, which names match the search) is computed once per tile
// (prepared.ts).
import { FULL_LANES, laneHeight, laneOf, laneTop, type Layout, MARK_H, scaleTop } from "./geometry";
import { BUSY_LEVELS, BUSY_PIXELS } from "./colors";

import { matches, type Prepared } from "./prepared";

export { matches, prepare, type Prepared } from "./prepared";

/** What a layer is drawn for, besides the part of time and rows it covers. */
export interface LayerKey {
  prepared: Prepared;
  layoutVersion: number;
  search: string;
  dpr: number;
  nsPerPx: number;
}

/** The view a layer must cover: time [t0, t1] at nsPerPx, layout rows [y0, y1]. */
export interface Need {
  t0: number;
  t1: number;
  y0: number;
  y1: number;
}

const FEW_RUNS = 2000; // fewer runs of merged columns are drawn as rectangles, more as pixels
const BUSY_CSS = Array.from(BUSY_PIXELS, (c) => `rgb(${c & 255} ${(c >> 8) & 255} ${(c >> 16) & 255})`);

const roundUp = (n: number): number => Math.ceil(n / 256) * 256;

/** The pixels of merged columns, reused from layer to layer (cleared, not reallocated). */
let scratch: ImageData | null = null;

const SLICE = 64; // items between two looks at the clock (64 labels: well under a millisecond)
export const SLICE_MS = 4; // a new layer: at most this much drawing per frame (its raster costs about as much again)

/** One tile drawn offscreen over a part of time and rows, in slices. */
export class Layer {
  readonly canvas: OffscreenCanvas;
  readonly ctx: OffscreenCanvasRenderingContext2D;
  readonly t0: number; // time at the layer's x = 0
  readonly t1: number;
  readonly yTop: number; // layout y at the layer's top
  readonly w: number; // css px
  readonly h: number;
  done = false;
  private phase = 0;
  private at = 0;
  private readonly rowOf: (Layout | null)[];
  private readonly match: Uint8Array | null;

  readonly cw: number; // device px of the canvas drawn (the canvas may be larger: recycled)
  readonly ch: number;

  /** `spare`: the canvas of a layer no longer shown, reused when large enough (no new 10 MB
   * allocation per tile, no garbage to collect while panning). */
  constructor(
    readonly key: LayerKey,
    rows: Map<string, Layout>,
    need: Need,
    spare: OffscreenCanvas | null = null,
  ) {
    const tile = key.prepared.tile;
    const span = need.t1 - need.t0;
    this.t0 = Math.max(tile.t0, need.t0 - span / 2);
    this.t1 = Math.max(this.t0, Math.min(tile.t1, need.t1 + span / 2));
    const rowsH = need.y1 - need.y0;
    this.yTop = Math.max(0, need.y0 - rowsH / 4); // a quarter of a screen above and below
    this.w = Math.min(Math.ceil((this.t1 - this.t0) / key.nsPerPx) + 4, Math.floor(8192 / key.dpr));
    this.h = Math.min(Math.ceil(1.5 * rowsH) + 4, Math.floor(8192 / key.dpr));
    this.cw = Math.max(1, Math.ceil(this.w * key.dpr));
    this.ch = Math.max(1, Math.ceil(this.h * key.dpr));
    // a spare at least this large is reused whatever its size (only its top-left cw × ch is drawn,
    // cleared and copied); else a new one at least as large as the spare, so that sizes settle
    // at the largest layer and no frame of a zoom pays for a fresh 10 MB canvas
    const fits = (c: OffscreenCanvas): boolean => c.width >= this.cw && c.height >= this.ch;
    this.canvas = spare && fits(spare) ? spare : new OffscreenCanvas(roundUp(Math.max(this.cw, spare?.width ?? 0)), roundUp(Math.max(this.ch, spare?.height ?? 0)));
    this.ctx = this.canvas.getContext("2d") as OffscreenCanvasRenderingContext2D;
    this.ctx.setTransform(1, 0, 0, 1, 0, 0);
    if (this.canvas === spare) this.ctx.clearRect(0, 0, this.cw, this.ch);
    this.ctx.globalAlpha = 1; // a recycled context keeps what an unfinished layer left
    this.ctx.lineWidth = 1;
    this.ctx.scale(key.dpr, key.dpr);
    this.ctx.font = "11px system-ui, sans-serif";
    this.rowOf = tile.rows.map((id) => rows.get(id) ?? null);
    this.match = matches(key.prepared, key.search);
  }

  /** Whether this layer draws the same picture as `key` asks for, at whatever scale and place. */
  same(key: LayerKey): boolean {
    const k = this.key;
    return k.prepared === key.prepared && k.layoutVersion === key.layoutVersion && k.search === key.search && k.dpr === key.dpr;
  }

  /** Whether this layer, as drawn, serves a view (the same tile, rows and scale; the part in view). */
  fits(key: LayerKey, need: Need): boolean {
    const k = this.key;
    if (!this.same(key)) return false;
    if (Math.abs(k.nsPerPx - key.nsPerPx) > k.nsPerPx * 1e-6) return false;
    if (need.y0 < this.yTop || need.y1 > this.yTop + this.h) return false;
    const tile = k.prepared.tile;
    const a = Math.max(tile.t0, need.t0);
    const b = Math.min(tile.t1, need.t1);
    return b <= a || (a >= this.t0 - k.nsPerPx && b <= this.t1 + k.nsPerPx);
  }

  private x(t: number): number {
    return (t - this.t0) / this.key.nsPerPx;
  }

  /** where `place` puts an event: its x range clipped to the layer, its lane, lane top and height */
  private readonly hit = { x0: 0, x1: 0, lane: 0, top: 0, h: 0 };

  /** Event `i` of the tile placed on the layer (into `hit`, reused: no object per event); false
   * when its row is not shown or it falls outside the layer. */
  private place(i: number): boolean {
    const t = this.key.prepared.tile;
    const r = this.rowOf[t.row[i]!];
    if (!r) return false;
    const x0 = Math.max(-2, this.x(t.ts[i]!));
    const x1 = Math.min(this.w + 2, this.x(t.ts[i]! + t.dur[i]!));
    if (x1 < 0 || x0 > this.w) return false;
    const lane = laneOf(r, t.depth[i]!);
    const top = r.y - this.yTop + laneTop(lane);
    const h = laneHeight(lane);
    if (top > this.h || top + h < 0) return false;
    const hit = this.hit;
    hit.x0 = x0;
    hit.x1 = x1;
    hit.lane = lane;
    hit.top = top;
    hit.h = h;
    return true;
  }

  /** Draw for up to `budgetMs`; true once the layer is complete. */
  step(budgetMs: number): boolean {
    const until = performance.now() + budgetMs;
    const phases = [this.bins, this.events, this.labels, this.outlines, this.samples, this.marks];
    const first = this.phase;
    while (this.phase < phases.length) {
      // a phase drawn whole (the merged columns) begins in a frame of its own once one has run
      if (this.phase > first && performance.now() > until) return false;
      const n = phases[this.phase]!.call(this, until);
      if (n < 0) return false; // out of time: go on at the next frame
      this.phase += 1;
      this.at = 0;
    }
    this.done = true;
    return true;
  }

  /** merged columns: height and colour from the fraction of the column busy (its level), written
   * as pixels (thousands of one-pixel rectangles cost more to a canvas than to an array), one row
   * at a time: each row's band is put on its own, so a layer of many busy rows is spread over
   * frames like the events are (`this.at`: the next row of the tile) */
  private bins(until: number): number {
    const p = this.key.prepared;
    if (p.runRow.length === 0) return 0;
    if (p.runRow.length < FEW_RUNS) return this.binRects();
    const rows = this.rowOf.length;
    for (const start = this.at; this.at < rows; this.at++) {
      if (this.at > start && performance.now() > until) return -1;
      this.binRow(this.at);
    }
    return 0;
  }

  /** the merged columns of the tile's row `k` put as pixels: the band of device rows of the row
   * (its lanes end 7 px above its bottom: neighbouring bands never hold each other's pixels) */
  private binRow(k: number): void {
    const r = this.rowOf[k];
    const p = this.key.prepared;
    const [first, end] = [p.rowRuns[k]!, p.rowRuns[k + 1]!];
    if (!r || end === first) return;
    const t = p.tile;
    const dpr = this.key.dpr;
    const H = this.ch;
    const lo = Math.max(0, Math.floor((r.y - this.yTop) * dpr));
    const hi = Math.min(H, Math.ceil((r.y - this.yTop + r.h) * dpr));
    if (hi <= lo) return;
    const colT = (t.t1 - t.t0) / t.width;
    const pxPerCol = colT / this.key.nsPerPx;
    if (!scratch || scratch.width < this.cw || scratch.height < hi - lo) {
      scratch = new ImageData(roundUp(Math.max(this.cw, scratch?.width ?? 0)), roundUp(Math.max(hi - lo, scratch?.height ?? 0)));
    }
    const W = scratch.width;
    const px = new Uint32Array(scratch.data.buffer);
    px.fill(0, 0, W * (hi - lo));
    let drawn = false;
    for (let j = first; j < end; j++) {
      const i = p.runsByRow[j]!;
      const x = this.x(t.t0 + p.runCol[i]! * colT);
      const right = Math.round((x + p.runCols[i]! * pxPerCol) * dpr);
      if (right <= 0) continue; // left of the layer
      const x0 = Math.max(0, Math.round(x * dpr));
      const x1 = Math.min(this.cw, Math.max(x0 + 1, right));
      if (x1 <= x0) continue;
      const lane = laneOf(r, p.runDepth[i]!);
      const lh = laneHeight(lane);
      const level = p.runLevel[i]!;
      const hh = Math.max(lh > 6 ? 2 : 1, (lh * (level + 1)) / BUSY_LEVELS);
      const bottom = r.y - this.yTop + laneTop(lane) + lh;
      const y0 = Math.max(lo, Math.round((bottom - hh) * dpr));
      const y1 = Math.min(hi, Math.round(bottom * dpr));
      const color = BUSY_PIXELS[level]!;
      drawn ||= y1 > y0;
      // most runs are a pixel or two wide: stores, not a fill() call per pixel row
      if (x1 - x0 <= 8) for (let y = y0; y < y1; y++) for (let o = (y - lo) * W, xx = x0; xx < x1; xx++) px[o + xx] = color;
      else for (let y = y0; y < y1; y++) px.fill(color, (y - lo) * W + x0, (y - lo) * W + x1);
    }
    if (drawn) this.ctx.putImageData(scratch, 0, lo, 0, 0, this.cw, hi - lo);
  }


  /** a few runs of merged columns (a busy stream at a wide view): rectangles */
  private binRects(): number {
    const { ctx } = this;
    const p = this.key.prepared;
    const t = p.tile;
    const colT = (t.t1 - t.t0) / t.width;
    const pxPerCol = colT / this.key.nsPerPx;
    let level = -1;
    for (let i = 0; i < p.runRow.length; i++) {
      const r = this.rowOf[p.runRow[i]!];
      if (!r) continue;
      const x = this.x(t.t0 + p.runCol[i]! * colT);
      const w = Math.max(1, p.runCols[i]! * pxPerCol);
      if (x + w < 0 || x > this.w) continue;
      const lane = laneOf(r, p.runDepth[i]!);
      const lh = laneHeight(lane);
      const top = r.y - this.yTop + laneTop(lane);
      if (top > this.h || top + lh < 0) continue;
      if (p.runLevel[i] !== level) {
        level = p.runLevel[i]!;
        ctx.fillStyle = BUSY_CSS[level]!;
      }
      const hh = Math.max(lh > 6 ? 2 : 1, (lh * (level + 1)) / BUSY_LEVELS);
      ctx.fillRect(x, top + lh - hh, w, hh);
    }
    return 0;
  }

  /** events as they are, one fillStyle per colour; faded when a search matches other names */
  private events(until: number): number {
    const { ctx } = this;
    const p = this.key.prepared;
    const t = p.tile;
    let color = -1;
    for (; this.at < p.evOrder.length; this.at++) {
      if (this.at % SLICE === 0 && this.at > 0 && performance.now() > until) return -1;
      const i = p.evOrder[this.at]!;
      if (!this.place(i)) continue;
      const { x0, x1, top, h } = this.hit;
      if (p.evColor[i] !== color) {
        color = p.evColor[i]!;
        ctx.fillStyle = p.palette[color]!;
        ctx.globalAlpha = this.match === null || this.match[t.name[i]!] ? 1 : 0.25;
      }
      ctx.fillRect(x0, top, Math.max(1, x1 - x0), h);
    }
    ctx.globalAlpha = 1;
    return 0;
  }

  /** names of events wide enough to hold some of it, on the full-height lanes */
  private labels(until: number): number {
    const { ctx } = this;
    const t = this.key.prepared.tile;
    const minNs = 40 * this.key.nsPerPx;
    ctx.fillStyle = "#111";
    for (; this.at < t.ts.length; this.at++) {
      if (this.at % SLICE === 0 && this.at > 0 && performance.now() > until) return -1;
      const i = this.at;
      if (t.dur[i]! <= minNs || !this.place(i)) continue;
      const { x0, x1, top, lane } = this.hit;
      if (lane >= FULL_LANES || x1 - x0 <= 40) continue;
      ctx.fillText(t.names[t.name[i]!]!, x0 + 3, top + 10, x1 - x0 - 6);
    }
    return 0;
  }

  /** search matches outlined */
  private outlines(until: number): number {
    if (!this.match) return 0;
    const { ctx } = this;
    const t = this.key.prepared.tile;
    ctx.strokeStyle = "#f5c400";
    ctx.lineWidth = 2;
    for (; this.at < t.ts.length; this.at++) {
      if (this.at % SLICE === 0 && this.at > 0 && performance.now() > until) return -1;
      const i = this.at;
      if (!this.match[t.name[i]!] || !this.place(i)) continue;
      const { x0, x1, top, h } = this.hit;
      ctx.strokeRect(x0, top, Math.max(1, x1 - x0), h);
    }
    ctx.lineWidth = 1;
    return 0;
  }

  /** sample rows: a sample holds until the next one, as steps over the row (0-100, or 0-max) */
  private samples(): number {
    const { ctx } = this;
    const t = this.key.prepared.tile;
    if (t.sTs.length === 0) return 0;
    const byRow = new Map<number, number[]>();
    for (let i = 0; i < t.sTs.length; i++) {
      const list = byRow.get(t.sRow[i]!);
      if (list) list.push(i);
      else byRow.set(t.sRow[i]!, [i]);
    }
    ctx.fillStyle = "rgba(46, 125, 50, 0.25)";
    ctx.strokeStyle = "#2e7d32";
    for (const [k, idx] of byRow) {
      const r = this.rowOf[k];
      if (!r) continue;
      const top = r.y - this.yTop + 2;
      const hh = r.h - 5;
      if (top > this.h || top + hh < 0) continue;
      let largest = 0;
      for (const i of idx) largest = Math.max(largest, t.sVal[i]!);
      const max = scaleTop(r.unit, largest);
      const yOf = (v: number): number => top + hh - (hh * v) / max;
      ctx.beginPath();
      ctx.moveTo(Math.max(0, this.x(t.sTs[idx[0]!]!)), top + hh);
      let prev = top + hh;
      for (const i of idx) {
        const x = Math.max(0, this.x(t.sTs[i]!));
        ctx.lineTo(x, prev);
        prev = yOf(t.sVal[i]!);
        ctx.lineTo(x, prev);
      }
      const end = Math.min(this.w, this.x(t.t1));
      ctx.lineTo(end, prev);
      ctx.lineTo(end, top + hh);
      ctx.fill();
      ctx.stroke();
    }
    return 0;
  }

  /** instants: a downward triangle at the top of the row; several in a column: larger, outlined */
  private marks(): number {
    const { ctx } = this;
    const p = this.key.prepared;
    const t = p.tile;
    if (t.mTs.length === 0) return 0;
    const dense = new Path2D();
    const found = new Path2D();
    let color = -1;
    let path = new Path2D();
    const flush = (): void => {
      if (color >= 0) {
        ctx.fillStyle = p.palette[color]!;
        ctx.fill(path);
      }
      path = new Path2D();
    };
    for (const i of p.markOrder) {
      const r = this.rowOf[t.mRow[i]!];
      if (!r) continue;
      const x = this.x(t.mTs[i]!);
      if (x < -6 || x > this.w + 6) continue;
      const top = r.y - this.yTop + 1;
      if (top > this.h || top + MARK_H < 0) continue;
      if (p.markColor[i] !== color) {
        flush();
        color = p.markColor[i]!;
      }
      const half = t.mCount[i]! > 1 ? 5 : 3.5;
      const hh = t.mCount[i]! > 1 ? MARK_H + 2 : MARK_H;
      for (const into of [path, t.mCount[i]! > 1 ? dense : null, this.match?.[t.mName[i]!] ? found : null]) {
        if (!into) continue;
        into.moveTo(x - half, top);
        into.lineTo(x + half, top);
        into.lineTo(x, top + hh);
        into.closePath();
      }
    }
    flush();
    ctx.strokeStyle = "#1f2937";
    ctx.stroke(dense);
    ctx.strokeStyle = "#f5c400";
    ctx.lineWidth = 2;
    ctx.stroke(found);
    ctx.lineWidth = 1;
    return 0;
  }
}
