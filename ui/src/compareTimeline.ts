// The two timelines of the Compare tab, stacked: each side's profile drawn from its server tiles by
// the timeline page's own pieces (rows, layout, prepared layers, painter, frame), its time shifted
// so that the aligned step starts at the same x in both. Both share one scale and one offset from
// their step's start: zooming or panning either moves both, so the same step of each run stays
// side by side (a longer step of B reaches further right). A click on a step bar aligns that step.
// State per lane is exposed as window.__hyperscope.compareTimelines for tests.
import { h } from "./dom";
import { showError } from "./errors";
import { hooks } from "./hooks";
import * as api from "./timeline/data";
import type { TlRow, TlRows, TlStep, Tile } from "./timeline/data";
import { drawFrame, fmtDuration, scaleLabels, xOf } from "./timeline/draw";
import { GUTTER, type Layout, RULER } from "./timeline/geometry";
import { installInput } from "./timeline/input";
import { type LayerKey, type Need, prepare, type Prepared } from "./timeline/layer";
import { buildLayout, rowsInView } from "./timeline/layout";
import { Painter } from "./timeline/painter";

export interface LaneSide {
  side: "a" | "b";
  label: string;
  profile: string;
  ranks: number[] | null;
}

/** One pair of steps to align (a row of the comparison's step_pairs). */
export interface AlignedPair {
  index: number;
  stepA: number | null;
  stepB: number | null;
}

/** What a test reads of one lane. */
export interface LaneState {
  profile: string;
  rows: string[]; // ids of the rows laid out
  step: string | null; // the aligned step's name
  stepStart: number | null; // ns from the lane's origin
  stepDur: number | null;
  t0: number;
  t1: number;
  tiles: number;
  loading: boolean;
  events: number; // events and merged columns of the tile shown
  merged: number;
  stepX: number | null; // canvas px of the aligned step's start and end, as last drawn
  stepEndX: number | null;
  error: string | null;
  /** how the last frame showed the tile (painter.ts: "copy", "draw", "slice", "preview") */
  painted: string;
}

const BOUNDS = "#111827";
const MAX_LANE_PX = 320; // a lane taller than its rows: scroll it (shift+wheel, drag)

/** The tree a side shows: every rank, or only the GPUs and processes of its ranks, opened. */
function sideTree(root: TlRow, ranks: number[] | null, open: Set<string>): TlRow {
  open.add(root.id);
  for (const node of root.children ?? []) if (node.type === "group") open.add(node.id); // a line per GPU
  if (!ranks) return root;
  const mine = (id: string): boolean => ranks.some((r) => id.startsWith(`gpu/${r}/`) || id === `proc/${r}`);
  const nodes = (root.children ?? [])
    .map((n) => ({ ...n, children: (n.children ?? []).filter((c) => mine(c.id)) }))
    .filter((n) => n.children.length > 0);
  for (const n of nodes) for (const c of n.children) open.add(c.id);
  return { ...root, children: nodes };
}

class Lane {
  readonly canvas = h("canvas", { class: "cmp-tl-canvas", tabindex: 0 });
  readonly root: HTMLElement;
  readonly state: LaneState;
  private rows: TlRows | null = null;
  private origin = 0n;
  private layout: Layout[] = [];
  private drawn = new Map<string, Layout>();
  private scales = new Map<string, string>();
  private prepared: Prepared | null = null;
  private tile: Tile | null = null;
  private readonly painter = new Painter();
  private layoutVersion = 0;
  private scrollY = 0;
  private abort: AbortController | null = null;
  private ticket = 0;
  private raf = 0;
  private timer = 0;
  private readonly caption = h("span", { class: "muted" });

  constructor(readonly side: LaneSide, private readonly sync: Sync) {
    this.state = {
      profile: side.profile, rows: [], step: null, stepStart: null, stepDur: null, t0: 0, t1: 1,
      tiles: 0, loading: false, events: 0, merged: 0, stepX: null, stepEndX: null, error: null,
      painted: "",
    }; // prettier-ignore
    this.root = h(
      "div",
      { class: "cmp-tl-lane", "data-lane": side.side },
      h("div", { class: "cmp-tl-head" }, h("strong", {}, `${side.side.toUpperCase()} · ${side.label}`), " ", this.caption),
      h("div", { class: "cmp-tl-wrap" }, this.canvas),
    );
    installInput(this.canvas, {
      view: () => ({ t0: this.state.t0, t1: this.state.t1, scrollY: this.scrollY }),
      scrollTo: (y) => {
        this.scrollY = Math.max(0, y);
        this.redraw();
        this.refetch();
      },
      setView: (t0, t1) => this.sync.setOffsets(t0 - this.anchor(), t1 - this.anchor()),
      zoom: (factor, atX) => this.sync.zoom(factor, this.fractionAt(atX)),
      pan: (fraction) => this.sync.pan(fraction),
      fit: () => this.sync.fit(),
      clear: () => undefined,
      hover: () => undefined,
      click: (x, y) => this.click(x, y),
    });
    new ResizeObserver(() => {
      this.redraw();
      this.refetch();
    }).observe(this.canvas);
  }

  /** The whole profile's span in ns (what a side without steps shows). */
  spanNs(): number {
    return this.rows ? Math.max(1000, Number(BigInt(this.rows.end_ns) - this.origin)) : 1000;
  }

  /** The lane's time that the shared offsets are measured from: the aligned step's start. */
  anchor(): number {
    return this.state.stepStart ?? 0;
  }

  private fractionAt(x: number | undefined): number {
    const w = this.canvas.clientWidth - GUTTER;
    return x === undefined || w <= 0 ? 0.5 : Math.min(1, Math.max(0, (x - GUTTER) / w));
  }

  async load(): Promise<void> {
    try {
      let rows = await api.getRows(this.side.profile);
      while ("building" in rows) {
        this.caption.textContent = `building this profile's timeline index: ${Math.round(rows.progress * 100)}%`;
        await new Promise((done) => setTimeout(done, 500));
        rows = await api.getRows(this.side.profile);
      }
      this.rows = rows;
      this.origin = BigInt(rows.start_ns);
      this.relayout(null);
    } catch (err) {
      this.state.error = (err as Error).message;
      showError(err);
    }
  }

  /** Rows as drawn: the side's tree with `open` groups (null: the first view's), and the lane as
   * tall as its rows (up to MAX_LANE_PX; taller ones scroll). */
  private relayout(open: Set<string> | null): void {
    if (!this.rows) return;
    const first = new Set<string>();
    const root = sideTree(this.rows.root, this.side.ranks, first);
    this.layout = buildLayout(root, open ?? first);
    this.drawn = new Map();
    for (const r of this.layout) for (const id of r.summary ?? []) if (!this.drawn.has(id)) this.drawn.set(id, r);
    for (const r of this.layout) this.drawn.set(r.id, r);
    this.layoutVersion += 1;
    this.state.rows = this.layout.map((r) => r.id);
    const last = this.layout[this.layout.length - 1];
    const tall = last ? last.y + last.h + RULER + 12 : 120;
    (this.canvas.parentElement as HTMLElement).style.height = `${Math.min(MAX_LANE_PX, Math.max(90, tall))}px`;
  }

  /** Align on step number `n` (null: this side has no such step; its start then is the origin). */
  align(n: number | null): TlStep | null {
    const found = n === null ? undefined : this.rows?.steps.find((s) => s.name === `ProfilerStep#${n}`);
    this.state.step = found?.name ?? null;
    this.state.stepStart = found ? Number(BigInt(found.ts_ns) - this.origin) : null;
    this.state.stepDur = found?.dur_ns ?? null;
    this.caption.textContent = found
      ? `step ${n}: ${fmtDuration(found.dur_ns)} (earliest start to latest end over its ranks)`
      : n === null ? "no step to align" : `no ProfilerStep#${n} in this profile's timeline`;
    return found ?? null;
  }

  setView(d0: number, d1: number): void {
    this.state.t0 = this.anchor() + d0;
    this.state.t1 = this.anchor() + d1;
    this.redraw();
    this.refetch();
  }

  private click(x: number, y: number): void {
    const yy = y - RULER + this.scrollY;
    const row = this.layout.find((r) => yy >= r.y && yy < r.y + r.h);
    if (!row || row.type !== "group" || x >= GUTTER) return;
    const open = new Set(this.layout.filter((r) => r.open).map((r) => r.id));
    if (open.has(row.id)) open.delete(row.id);
    else open.add(row.id);
    this.relayout(open);
    this.redraw();
    this.refetch();
  }

  redraw(): void {
    if (!this.raf) this.raf = requestAnimationFrame(() => ((this.raf = 0), this.draw()));
  }

  private refetch(): void {
    window.clearTimeout(this.timer);
    this.timer = window.setTimeout(() => void this.fetchTile(), 40);
  }

  private async fetchTile(): Promise<void> {
    const width = Math.round(this.canvas.clientWidth - GUTTER);
    if (!this.rows || width <= 0) return;
    const ids = rowsInView(this.layout, this.scrollY, this.canvas.clientHeight || 300).slice(0, 256);
    if (ids.length === 0) return;
    this.abort?.abort();
    this.abort = new AbortController();
    const ticket = ++this.ticket;
    this.state.loading = true;
    try {
      const t = await api.getTile(this.side.profile, ids, this.state.t0, this.state.t1, width, this.origin, this.abort.signal);
      if (ticket !== this.ticket) return;
      this.tile = t;
      this.prepared = prepare(t);
      this.scales = scaleLabels(t, new Map(this.layout.map((r) => [r.id, r])));
      this.state.tiles += 1;
      this.state.events = t.ts.length;
      this.state.merged = t.binCol.length;
    } catch (err) {
      if ((err as Error).name !== "AbortError") {
        this.state.error = (err as Error).message;
        showError(err);
      }
    } finally {
      if (ticket === this.ticket) this.state.loading = false;
    }
    this.redraw();
  }

  private draw(): void {
    const dpr = window.devicePixelRatio || 1;
    const c = this.canvas;
    const w = c.clientWidth;
    const hh = c.clientHeight;
    if (w <= GUTTER || hh <= RULER) return;
    if (c.width !== Math.round(w * dpr) || c.height !== Math.round(hh * dpr)) {
      c.width = Math.round(w * dpr);
      c.height = Math.round(hh * dpr);
    }
    const ctx = c.getContext("2d") as CanvasRenderingContext2D;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    const { t0, t1 } = this.state;
    const s = { ctx, width: w, height: hh, t0, t1, scrollY: this.scrollY, rows: this.layout, scales: this.scales };
    drawFrame(s, () => this.paintTile(ctx, dpr, w, hh), null, []);
    // the aligned step's bounds over the whole lane: the lines both lanes are aligned on
    const start = this.state.stepStart;
    if (start === null || this.state.stepDur === null) {
      this.state.stepX = this.state.stepEndX = null;
      return;
    }
    const x0 = xOf(s, start);
    const x1 = xOf(s, start + this.state.stepDur);
    ctx.save();
    ctx.strokeStyle = BOUNDS;
    ctx.setLineDash([5, 3]);
    for (const x of [x0, x1]) {
      if (x < GUTTER || x > w) continue;
      ctx.beginPath();
      ctx.moveTo(Math.round(x) + 0.5, 0);
      ctx.lineTo(Math.round(x) + 0.5, hh);
      ctx.stroke();
    }
    ctx.restore();
    this.state.stepX = x0;
    this.state.stepEndX = x1;
  }

  private paintTile(ctx: CanvasRenderingContext2D, dpr: number, w: number, hh: number): void {
    const p = this.prepared;
    if (!p || !this.tile) return;
    const nsPerPx = (this.state.t1 - this.state.t0) / (w - GUTTER);
    const key: LayerKey = { prepared: p, layoutVersion: this.layoutVersion, search: "", dpr, nsPerPx };
    const view: Need = { t0: this.state.t0, t1: this.state.t1, y0: this.scrollY, y1: this.scrollY + hh - RULER };
    const kind = this.painter.paint(ctx, key, view, this.drawn);
    this.state.painted = kind;
    if (kind === "slice" || kind === "preview") this.redraw(); // the rest, or the layer once the zoom holds
  }
}

/** The offsets shared by both lanes: the view is [step start + d0, step start + d1] in each. */
class Sync {
  d0 = 0;
  d1 = 1;
  lanes: Lane[] = [];
  home: [number, number] = [0, 1];

  setOffsets(d0: number, d1: number): void {
    if (d1 - d0 < 1000) {
      const mid = (d0 + d1) / 2;
      [d0, d1] = [mid - 500, mid + 500];
    }
    [this.d0, this.d1] = [d0, d1];
    for (const l of this.lanes) l.setView(d0, d1);
  }

  zoom(factor: number, at: number): void {
    const pivot = this.d0 + at * (this.d1 - this.d0);
    this.setOffsets(pivot - (pivot - this.d0) * factor, pivot + (this.d1 - pivot) * factor);
  }

  pan(fraction: number): void {
    const d = (this.d1 - this.d0) * fraction;
    this.setOffsets(this.d0 + d, this.d1 + d);
  }

  fit(): void {
    this.setOffsets(...this.home);
  }
}

/** The stacked timelines of two sides; `align(pair)` puts that pair's steps side by side. */
export function stackedTimelines(sides: [LaneSide, LaneSide], first: AlignedPair | null): {
  root: HTMLElement;
  align(pair: AlignedPair): void;
} {
  const sync = new Sync();
  const lanes = sides.map((s) => new Lane(s, sync));
  sync.lanes = lanes;
  const info = h("p", { class: "muted", "data-compare": "aligned" });
  const root = h(
    "section",
    { class: "panel cmp-timelines", "data-compare": "timelines" },
    h("h3", {}, "Timelines, steps aligned"),
    info,
    lanes.map((l) => l.root),
    h("p", { class: "muted note" }, "Wheel zooms and drag pans both lanes together; a click on a step bar above aligns that step; F fits the aligned step."),
  );
  (hooks as unknown as { compareTimelines: unknown }).compareTimelines = { lanes: lanes.map((l) => l.state) };
  let ready: Promise<void> | null = null;

  async function align(pair: AlignedPair): Promise<void> {
    ready ??= Promise.all(lanes.map((l) => l.load())).then(() => undefined);
    await ready;
    const [a, b] = [lanes[0]!.align(pair.stepA), lanes[1]!.align(pair.stepB)];
    const longest = Math.max(a?.dur_ns ?? 0, b?.dur_ns ?? 0);
    if (longest > 0) sync.home = [-0.05 * longest, 1.1 * longest];
    else {
      const span = Math.max(...lanes.map((l) => l.spanNs()));
      sync.home = [0, span];
    }
    info.textContent = `step pair ${pair.index}: A's step ${pair.stepA ?? "–"} beside B's step ${pair.stepB ?? "–"}, each lane's time measured from the start of its step`;
    sync.fit();
  }

  if (first) void align(first).catch((err: unknown) => showError(err));
  return { root, align: (pair) => void align(pair).catch((err: unknown) => showError(err)) };
}
