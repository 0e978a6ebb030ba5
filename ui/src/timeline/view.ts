// The timeline page (#/timeline/<profile id>): a canvas of collapsible rows fed by server tiles,
// with a step list, search, details and connections, and launch → kernel arrows. Here: the tiles,
// the frames and the input; the selection and search are select.ts's, the elements toolbar.ts's.
// State lives in `state` and is exposed as window.__hyperscope.timeline for tests.
import { showError } from "../errors";
import { hooks } from "../hooks";
import { onLoadedChange } from "../loaded";
import * as api from "./data";
import type { TlEventRef, TlRow } from "./data";
import { drawFrame, type DrawState, type Rect, scaleLabels, xOf } from "./draw";
import { GUTTER, laneHeight, laneTop, type Layout, RULER } from "./geometry";
import { installInput } from "./input";
import { type LayerKey, type Need, prepare, type Prepared } from "./layer";
import { Painter, visibleEvents } from "./painter";
import { buildLayout, firstLook, parents, rowsInView } from "./layout";
import { arrowsFor, type End, eventRect, type Frame, type Hit, hitAt, hoverTitle, markRect } from "./place";
import { rel, state } from "./state";
import { selection } from "./select";
import { saveLink } from "./link";
import { stepList } from "./steplist";
import { timelineDom } from "./toolbar";
import { rangeSelection } from "./range";
import { COLL_COLOR, collectiveMarks, COLLECTIVES_SHOWN, collectivesShown, LAST_COLOR } from "./collective";

export function timelinePage(): { root: HTMLElement; setActive(on: boolean): void; load(id: string): void } {
  const dom = timelineDom({ prev: () => pick.jumpMatch(-1), next: () => pick.jumpMatch(1), fit: () => fit() });
  const { canvas, stepSelect, searchBox, searchInfo, status, setStatus, arrowsBox, collBox, details, wrap, body, placeholder, root } = dom;
  (hooks as unknown as { timeline: unknown }).timeline = {
    state,
    openAll: () => {
      const walk = (r: TlRow): void => {
        if (r.type === "group") state.open.add(r.id);
        for (const c of r.children ?? []) walk(c);
      };
      if (state.rows) walk(state.rows.root);
      relayout();
      redraw();
      refetch();
    },
    select: (id: number) => void pick.select(id),
    toggle: (id: string, open?: boolean) => toggle(id, open),
    setView,
    rowY: (id: string) => {
      const r = state.layout.find((x) => x.id === id);
      return r ? r.y - state.scrollY + RULER : null;
    },
    xOf: (relNs: number) => xOf(drawState(), relNs),
    /** the ruler's ticks (ns from the origin) as last drawn */
    ticks: () => lastTicks,
    laneTop,
    laneHeight,
    scales: () => Object.fromEntries(scales),
    sliceMs: (ms: number) => (painter.sliceMs = ms),
    settleMs: (ms: number) => (painter.settleMs = ms),
    /** runs of merged columns in the tile shown (from 2,000 on they are drawn as pixels, row by row) */
    runs: () => prepared?.runRow.length ?? 0,
    /** whether the picture is final: the layer drawn for this very view, not a stretched preview */
    settled: () => prepared !== null && painter.shows(...layerNeed(prepared, window.devicePixelRatio || 1)),
  };
  let lastTicks: number[] = [];
  let abort: AbortController | null = null;
  let pending = 0;
  let prepared: Prepared | null = null; // state.tile, ready to draw
  const painter = new Painter();
  let layoutVersion = 0;
  let shown = new Map<string, Layout>(); // rows shown, by id
  let drawn = new Map<string, Layout>(); // and the device rows drawn on a closed group's line
  let scales = new Map<string, string>(); // sample rows: the top of their scale in the tile
  let parentOf = new Map<string, string>();
  let selIndex: [unknown, number | null, number] = [null, null, -1]; // tile, id → index in the tile
  const pick = selection({ canvas, details, searchBox, searchInfo, relayout, redraw, refetch, setView });

  function leafIds(): string[] {
    return rowsInView(state.layout, state.scrollY, canvas.clientHeight || 1000);
  }

  function relayout(): void {
    state.layout = state.rows ? buildLayout(state.rows.root, state.open) : [];
    parentOf = state.rows ? parents(state.rows.root) : new Map();
    shown = new Map(state.layout.map((r) => [r.id, r]));
    drawn = new Map();
    for (const r of state.layout) for (const id of r.summary ?? []) if (!drawn.has(id)) drawn.set(id, r);
    for (const r of state.layout) drawn.set(r.id, r);
    layoutVersion += 1;
  }

  function drawState(): DrawState {
    const ctx = canvas.getContext("2d") as CanvasRenderingContext2D;
    const { t0, t1, scrollY } = state;
    return { ctx, width: canvas.clientWidth, height: canvas.clientHeight, t0, t1, scrollY, rows: state.layout, scales };
  }

  function frame(): Frame {
    const s = { t0: state.t0, t1: state.t1, width: canvas.clientWidth };
    return { xOf: (t) => xOf(s, t), scrollY: state.scrollY, drawn };
  }

  function arrows(f: Frame): import("./draw").Arrow[] {
    const pairs: [End, End][] = [];
    const end = (e: { row: string; ts_ns: string; depth: number }): End => ({ row: e.row, ts: rel(e.ts_ns), depth: e.depth });
    if (state.selected) {
      const launch = state.selected.links.find((l) => l.role === "launch");
      const kernel = state.selected.links.find((l) => l.role === "kernel");
      const self = selfRef();
      if (self && launch) pairs.push([end(launch), end(self)]);
      if (self && kernel) pairs.push([end(self), end(kernel)]);
    }
    if (state.allArrows) for (const fl of state.flows) pairs.push([end(fl.launch), end(fl.kernel)]);
    return arrowsFor(f, shown, parentOf, pairs);
  }

  /** What the layer of this frame must be: the tile, rows, search and scale, and the part in view. */
  function layerNeed(p: Prepared, dpr: number): [LayerKey, Need] {
    const nsPerPx = (state.t1 - state.t0) / (canvas.clientWidth - GUTTER);
    const key: LayerKey = { prepared: p, layoutVersion, search: state.search, dpr, nsPerPx };
    return [key, { t0: state.t0, t1: state.t1, y0: state.scrollY, y1: state.scrollY + canvas.clientHeight - RULER }];
  }

  /** The tile's layer for this frame (layer.ts): copied when it fits the view, else drawn. */
  function paintTile(ctx: CanvasRenderingContext2D, dpr: number): string {
    if (!prepared) return "none";
    const [key, view] = layerNeed(prepared, dpr);
    const kind = painter.paint(ctx, key, view, drawn);
    if (kind === "slice" || kind === "preview") redraw(); // the rest (or the layer) at the next frame
    return kind;
  }

  function selectedRect(f: Frame): Rect | null {
    const t = state.tile;
    const id = state.selected?.id ?? null;
    if (!t || id === null) return null;
    if (selIndex[0] !== t || selIndex[1] !== id) selIndex = [t, id, t.id.indexOf(id)];
    if (selIndex[2] >= 0) return eventRect(f, t, selIndex[2]);
    const mark = t.mId.indexOf(id); // an instant: its mark (few per tile)
    return mark < 0 ? null : markRect(f, t, mark);
  }

  function selfRef(): TlEventRef | null {
    const d = state.selected;
    if (!d || !d.row) return null;
    return {
      role: "self", row: d.row, id: d.id, name: String(d.fields.name ?? ""), kind: String(d.fields.kind ?? ""),
      ts_ns: String(d.fields.ts_ns), dur_ns: Number(d.fields.dur_ns ?? 0), depth: d.depth ?? 0,
      correlation: Number(d.fields.correlation ?? -1), rank: Number(d.fields.rank ?? 0),
    };  // prettier-ignore
  }

  function draw(): void {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth;
    const hh = canvas.clientHeight;
    // hidden (another tab shown) or squeezed to nothing: no events area, nothing to lay out or
    // draw; the ResizeObserver asks again once the canvas has a size
    if (w <= GUTTER || hh <= RULER) return;
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(hh * dpr)) {
      canvas.width = Math.round(w * dpr);
      canvas.height = Math.round(hh * dpr);
    }
    const ctx = canvas.getContext("2d") as CanvasRenderingContext2D;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    const started = performance.now();
    const f = frame();
    let kind = "none";
    state.arrows = arrows(f);
    const coll = collectiveMarks(f, shown, parentOf, collectivesShown(state.collective, state.allCollectives ? state.collectives : []), rel);
    state.collArrows = coll.arrows;
    state.lastMarks = coll.marks;
    const extra = { ...coll, color: COLL_COLOR, lastColor: LAST_COLOR };
    lastTicks = drawFrame(drawState(), () => (kind = paintTile(ctx, dpr)), selectedRect(f), state.arrows, extra);
    ranges.overlay(ctx);
    const ms = performance.now() - started;
    state.drawMs.push(ms);
    if (state.drawMs.length > 200) state.drawMs.shift();
    if (state.frameLog) {
      const seen = state.tile ? visibleEvents(state.tile, state.t0, state.t1) : { events: 0, merged: 0 };
      state.frameLog.push({ ms, kind, t0: state.t0, t1: state.t1, ...seen });
    }
  }

  let raf = 0;
  function redraw(): void {
    if (!raf) raf = requestAnimationFrame(() => ((raf = 0), draw()));
  }

  /** One tile for every visible leaf row over the view; the old tile is drawn meanwhile. */
  async function fetchTile(): Promise<void> {
    if (!state.profile || !state.rows) return;
    if (canvas.clientWidth <= GUTTER) return; // hidden: fetched when shown (the ResizeObserver)
    const ids = leafIds();
    abort?.abort();
    if (ids.length === 0) {
      state.tile = null;
      prepared = null;
      state.tiles += 1; // an empty tile: nothing expanded yet
      state.loading = false;
      setStatus("expand a node and a GPU to see its rows");
      redraw();
      return;
    }
    abort = new AbortController();
    const ticket = ++pending;
    state.loading = true;
    const width = Math.max(1, Math.round(canvas.clientWidth - GUTTER));
    try {
      const t = await api.getTile(state.profile, ids.slice(0, 256), state.t0, state.t1, width, state.origin, abort.signal);
      if (ticket !== pending) return;
      prepared = prepare(t);
      state.tile = t;
      scales = scaleLabels(t, shown);
      const rows = ids.slice(0, 256);
      state.lastRequest = { rows, t0_ns: (state.origin + BigInt(t.t0)).toString(), t1_ns: (state.origin + BigInt(t.t1)).toString(), width: t.width }; // the window answered (snapped)
      state.tiles += 1;
      const marks = t.mTs.length ? `, ${t.mTs.length.toLocaleString()} instant marks` : "";
      setStatus(`${t.ts.length.toLocaleString()} events, ${t.binCol.length.toLocaleString()} merged columns${marks}, ${(t.bytes / 1024).toFixed(0)} KB`);
      const [a, b] = [state.origin + BigInt(Math.floor(state.t0)), state.origin + BigInt(Math.ceil(state.t1))];
      if (state.allArrows) state.flows = (await api.getFlows(state.profile, ids, a, b)).flows;
      if (state.allCollectives) {
        const c = await api.getCollectives(state.profile, rows, a, b, COLLECTIVES_SHOWN);
        if (ticket !== pending) return;
        state.collectives = c.instances;
        state.collectivesTotal = c.total;
        if (c.total > 0) setStatus(`${status.textContent ?? ""}, ${c.truncated ? `the first ${c.instances.length} of ` : ""}${c.total.toLocaleString()} collectives`);
      }
    } catch (err) {
      if ((err as Error).name !== "AbortError") showError(err);
    } finally {
      if (ticket === pending) state.loading = false;
    }
    redraw();
  }
  let timer = 0;
  function refetch(): void {
    window.clearTimeout(timer);
    timer = window.setTimeout(() => void fetchTile(), 40);
  }

  function setView(t0: number, t1: number): void {
    const minSpan = 1000; // 1 µs
    if (t1 - t0 < minSpan) {
      const mid = (t0 + t1) / 2;
      t0 = mid - minSpan / 2;
      t1 = mid + minSpan / 2;
    }
    state.t0 = t0;
    state.t1 = t1;
    redraw();
    refetch();
    saveLink();
  }

  function zoom(factor: number, atX?: number): void {
    const w = canvas.clientWidth - GUTTER;
    if (w <= 0) return;
    const f = atX === undefined ? 0.5 : Math.min(1, Math.max(0, (atX - GUTTER) / w));
    const at = state.t0 + f * (state.t1 - state.t0);
    setView(at - (at - state.t0) * factor, at + (state.t1 - at) * factor);
  }

  function pan(fraction: number): void {
    const d = (state.t1 - state.t0) * fraction;
    setView(state.t0 + d, state.t1 + d);
  }

  function fit(): void {
    const d = state.selected;
    if (d && d.fields.ts_ns !== undefined) {
      const t = rel(String(d.fields.ts_ns));
      const dur = Math.max(Number(d.fields.dur_ns ?? 0), 1000);
      setView(t - dur * 0.25, t + dur * 1.25);
    } else setView(state.span[0], state.span[1]);
  }

  function toggle(id: string, open?: boolean): void {
    const now = open ?? !state.open.has(id);
    if (now) state.open.add(id);
    else state.open.delete(id);
    relayout();
    redraw();
    refetch();
    saveLink();
  }

  const hit = (x: number, y: number): Hit | null => hitAt(frame(), state.layout, state.tile, x, y);
  function hover(x: number, y: number): void {
    const title = hoverTitle(hit(x, y), state.tile);
    if (canvas.title !== title) canvas.title = title;
  }

  const ranges = rangeSelection({
    canvas,
    details,
    rows: () => leafIds().slice(0, 256),
    label: (id) => state.layout.find((r) => r.id === id)?.label ?? id,
    setView,
    redraw,
  });

  installInput(canvas, {
    range: (x0, x1, done) => ranges.drag(x0, x1, done),
    view: () => ({ t0: state.t0, t1: state.t1, scrollY: state.scrollY }),
    scrollTo: (y: number) => {
      state.scrollY = Math.max(0, y);
      redraw();
      refetch();
    },
    setView,
    zoom,
    pan,
    fit,
    hover,
    clear: () => {
      if (!ranges.clear()) pick.deselect();
    },
    click: (x: number, y: number) => {
      ranges.clear();
      const found = hit(x, y);
      const t = state.tile;
      if (!found) {
        if (y > RULER) pick.deselect(); // below every row: empty canvas
        return;
      }
      if (found.event < 0 && found.mark < 0 && found.row.type !== "group") pick.deselect();
      else if (t && found.mark >= 0) void pick.select(t.mId[found.mark]!, false, t.rows[t.mRow[found.mark]!], t.mCount[found.mark]!);
      else if (found.row.type === "group") toggle(found.row.id);
      else if (t && found.event >= 0) void pick.select(t.id[found.event]!, false, found.row.id);
    },
  });
  const stepsShown = stepList(stepSelect, (steps) => {
    const a = Math.min(...steps.map((s) => rel(s.ts_ns)));
    const b = Math.max(...steps.map((s) => rel(s.ts_ns) + s.dur_ns));
    setView(a - (b - a) * 0.02, b + (b - a) * 0.02);
  });
  collBox.addEventListener("change", () => {
    state.allCollectives = collBox.checked;
    state.collectives = [];
    state.collectivesTotal = 0;
    void fetchTile();
  });
  arrowsBox.addEventListener("change", () => {
    state.allArrows = arrowsBox.checked;
    state.flows = [];
    void fetchTile();
  });
  new ResizeObserver(() => {
    redraw();
    refetch();
  }).observe(wrap);

  /** Back to no profile: nothing drawn, no request in flight, the placeholder shown. */
  function clear(): void {
    abort?.abort();
    pending += 1; // an answer on its way is for the profile gone
    window.clearTimeout(timer);
    state.profile = null;
    state.tile = null;
    prepared = null;
    state.rows = null;
    state.layout = [];
    state.selected = null;
    state.collective = null;
    state.collectives = [];
    state.range = state.rangeStats = null;
    state.loading = false;
    state.building = null;
    state.search = "";
    state.matches = [];
    state.flows = [];
    relayout();
    pick.clearDetails();
    setStatus("");
    body.hidden = true;
    placeholder.hidden = false;
  }

  async function load(id: string): Promise<void> {
    if (state.profile === id) {
      if (state.rows) pick.applyLink(id); // a link of this profile pasted: its view
      return;
    }
    state.profile = id;
    body.hidden = false;
    placeholder.hidden = true;
    state.tile = null;
    state.rows = null;
    state.layout = [];
    state.selected = null;
    state.collective = null;
    state.collectives = [];
    state.range = state.rangeStats = null;
    state.open = new Set(["job"]);
    pick.clearDetails();
    setStatus("loading rows…");
    try {
      let rows = await api.getRows(id);
      const began = performance.now();
      // a profile that was not imported: its index is built now, once; say how far it has got
      while ("building" in rows) {
        state.building = rows.progress;
        state.buildingSeen += 1;
        state.buildingLog.push(rows.progress);
        const s = Math.round((performance.now() - began) / 1000);
        setStatus(`building the timeline index of this profile: ${Math.round(rows.progress * 100)}%, ${s} s (once per profile; hyperscope import does it ahead)`);
        await new Promise((done) => setTimeout(done, 500));
        if (state.profile !== id) return;
        rows = await api.getRows(id);
      }
      state.building = null;
      if (state.profile !== id) return;
      state.rows = rows;
      state.origin = BigInt(rows.start_ns);
      state.span = [0, Math.max(1000, Number(BigInt(rows.end_ns) - state.origin))];
      state.open = firstLook(rows.root); // a link's own open rows replace these (applyLink)
      relayout();
      state.t0 = state.span[0];
      state.t1 = state.span[1];
      pick.applyLink(id);
      redraw();
      stepsShown.set(rows.steps); // its options at the list's first use (steplist.ts)
      void fetchTile(); // at once: the first paint waits for no debounce
    } catch (err) {
      showError(err);
    }
  }

  clear();
  onLoadedChange((l) => {
    if (!l) clear();
  });
  return {
    root,
    setActive(on: boolean) {
      if (on) redraw();
    },
    load: (id: string) => void load(id),
  };
}
