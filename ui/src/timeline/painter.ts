// The layers shown frame after frame: the last complete layer, copied (or stretched while the next
// is drawn), and the next one drawn in slices of a few milliseconds so that no frame waits on it.
import type { Tile } from "./data";
import { GUTTER, type Layout, RULER } from "./geometry";
import { Layer, type LayerKey, type Need, SLICE_MS } from "./layer";

/** While the scale keeps changing (a wheel or W/S zoom), no layer is begun for it until it has held
 * this long: the last layer is shown stretched meanwhile, as it is while a layer is drawn. A layer
 * begun at every new scale of a zoom costs a slice of drawing in every frame of it (and, at tens of
 * thousands of events, the raster of that slice), for a picture shown for one frame if at all. */
export const SETTLE_MS = 100;

/** The layers of the frames: the last complete one, and the next one while it is drawn in slices. */
export class Painter {
  private layer: Layer | null = null;
  private next: Layer | null = null;
  private spare: OffscreenCanvas | null = null;
  /** drawing per frame for a new layer, in ms (a test sets 0: every layer drawn over many frames) */
  sliceMs = SLICE_MS;
  /** how long a new scale must hold before a layer is begun for it (a test sets 0) */
  settleMs = SETTLE_MS;
  private nsPerPx = NaN;
  private scaledAt = 0;

  /** Whether the layer shown is the one this view asks for (not a stretched or stale preview). */
  shows(key: LayerKey, view: Need): boolean {
    return this.layer !== null && this.layer.fits(key, view);
  }

  /** Whether a frame at this scale shows the last layer stretched rather than begin a new one: the
   * scale changed less than `settleMs` ago, and that layer is of the same rows (a preview of an
   * earlier tile is a right picture stretched; one of other rows is not). */
  private zooming(key: LayerKey): boolean {
    const now = performance.now();
    if (key.nsPerPx !== this.nsPerPx) [this.nsPerPx, this.scaledAt] = [key.nsPerPx, now];
    const l = this.layer;
    if (!l || l.key.layoutVersion !== key.layoutVersion || l.key.dpr !== key.dpr) return false;
    if (this.next && this.next.same(key)) return false; // begun: finished (below)
    return now - this.scaledAt < this.settleMs;
  }

  /** Draw the tile's layer into the frame (clipped by the caller): "copy" when the last layer fits
   * the view, "draw" when a new one was drawn whole, "slice" when drawn in part (the last one
   * shown meanwhile, stretched if at another scale: call again at the next frame), "preview" when
   * the scale is still changing (the last one shown stretched, none begun: call again). */
  paint(ctx: CanvasRenderingContext2D, key: LayerKey, view: Need, rows: Map<string, Layout>): string {
    let kind = "copy";
    if (this.zooming(key) && !this.layer!.fits(key, view)) kind = "preview";
    else if (!this.layer || !this.layer.fits(key, view)) {
      // A layer begun for the same picture is finished even if the view moved or zoomed since:
      // begun anew at every frame of a zoom, a layer drawn in slices would never be shown.
      if (!this.next || !this.next.same(key)) {
        if (this.next) this.spare = this.next.canvas;
        this.next = new Layer(key, rows, view, this.spare);
        if (this.spare === this.next.canvas) this.spare = null;
      }
      kind = "draw";
      if (this.next.step(this.sliceMs)) {
        if (this.layer) this.spare = this.layer.canvas;
        [this.layer, this.next] = [this.next, null];
        if (!this.layer.fits(key, view)) kind = "slice"; // begun for an earlier view: one more
      } else kind = "slice";
    }
    const l = this.layer;
    if (!l || l.key.layoutVersion !== key.layoutVersion || l.key.dpr !== key.dpr) return kind;
    // at its place: exact device pixels at its own scale, stretched (a preview) at another
    const { dpr, nsPerPx } = key;
    const scale = l.key.nsPerPx / nsPerPx;
    const x = Math.round((GUTTER + (l.t0 - view.t0) / nsPerPx) * dpr) / dpr;
    const y = Math.round((RULER + l.yTop - view.y0) * dpr) / dpr;
    const same = Math.abs(scale - 1) < 1e-6;
    ctx.imageSmoothingEnabled = !same;
    ctx.drawImage(l.canvas, 0, 0, l.cw, l.ch, x, y, (l.cw / dpr) * (same ? 1 : scale), l.ch / dpr);
    return kind;
  }
}

/** Events and merged events in the time window [t0, t1): events overlapping it, plus the count of
 * every merged column starting in it (what a frame shows, exposed for the benchmark). */
export function visibleEvents(tile: Tile, t0: number, t1: number): { events: number; merged: number } {
  let events = 0;
  for (let i = 0; i < tile.ts.length; i++) if (tile.ts[i]! < t1 && tile.ts[i]! + tile.dur[i]! > t0) events++;
  let merged = 0;
  const colT = (tile.t1 - tile.t0) / tile.width;
  for (let i = 0; i < tile.binCol.length; i++) {
    const t = tile.t0 + tile.binCol[i]! * colT;
    if (t < t1 && t + colT * tile.binSpan > t0) merged += tile.binCount[i]!;
  }
  return { events, merged };
}
