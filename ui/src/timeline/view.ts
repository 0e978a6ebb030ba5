// The timeline page (#/timeline/<profile id>): a canvas of collapsible rows fed by server tiles,
// with a step list, search, details and connections, and launch → kernel arrows.
// State lives in `state` and is exposed as window.__hyperscope.timeline for tests.
import { h } from "../dom";
import { showError } from "../errors";
import { hooks } from "../hooks";
import * as api from "./data";
import type { TlEventRef, TlRow } from "./data";
import { type Layout, drawAll, GUTTER, LANE, MAX_LANES, RULER, xOf } from "./draw";
import { installInput } from "./input";
import { buildLayout, rowsInView } from "./layout";
import { renderDetails } from "./panel";
import { state } from "./state";

export function timelinePage(): { root: HTMLElement; setActive(on: boolean): void; load(id: string): void } {
  const canvas = h("canvas", { id: "tl-canvas", tabindex: 0 });
  const stepSelect = h("select", { id: "tl-steps" }, h("option", { value: "" }, "zoom to step…"));
  const searchBox = h("input", { id: "tl-search", type: "search", placeholder: "search names (Enter: next)" });
  const searchInfo = h("span", { id: "tl-search-info", class: "muted" });
  const status = h("span", { id: "tl-status", class: "muted" });
  const arrowsBox = h("input", { id: "tl-all-arrows", type: "checkbox" });
  const details = h("div", { id: "tl-details", class: "tl-details" }, h("p", { class: "muted" }, "Click an event."));
  const wrap = h("div", { class: "tl-canvas-wrap" }, canvas);
  const root = h(
    "section",
    { id: "timeline", class: "page tl-page", hidden: true },
    h(
      "div",
      { class: "toolbar" },
      stepSelect,
      searchBox,
      h("button", { id: "tl-prev", type: "button", onclick: () => jumpMatch(-1) }, "◀"),
      h("button", { id: "tl-next", type: "button", onclick: () => jumpMatch(1) }, "▶"),
      searchInfo,
      h("label", { class: "field" }, arrowsBox, "all arrows"),
      h("button", { id: "tl-fit", type: "button", onclick: () => fit() }, "Fit (F)"),
      h("span", { class: "muted" }, "W/S zoom · A/D pan · wheel zoom · drag pan · shift+wheel scroll"),
      status,
    ),
    h("div", { class: "tl-body" }, wrap, details),
  );
  (hooks as unknown as { timeline: unknown }).timeline = {
    state,
    toggle,
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
    select: (id: number) => void select(id),
    setView,
    rowY: (id: string) => {
      const r = state.layout.find((x) => x.id === id);
      return r ? r.y - state.scrollY + RULER : null;
    },
    xOf: (relNs: number) => xOf(drawState(), relNs),
  };
  let abort: AbortController | null = null;
  let pending = 0;

  function leafIds(): string[] {
    return rowsInView(state.layout, state.scrollY, canvas.clientHeight || 1000);
  }

  function relayout(): void {
    state.layout = state.rows ? buildLayout(state.rows.root, state.open) : [];
  }

  function drawState(): import("./draw").DrawState {
    const ctx = canvas.getContext("2d") as CanvasRenderingContext2D;
    return {
      ctx,
      width: canvas.clientWidth,
      height: canvas.clientHeight,
      t0: state.t0,
      t1: state.t1,
      scrollY: state.scrollY,
      rows: state.layout,
      tile: state.tile,
      selectedId: state.selected?.id ?? null,
      search: state.search,
      origin: state.origin.toString(),
    };
  }

  function arrows(): [number, number, number, number][] {
    const s = drawState();
    const pairs: [TlEventRef | api.TlFlow["launch"], TlEventRef | api.TlFlow["kernel"]][] = [];
    if (state.selected) {
      const launch = state.selected.links.find((l) => l.role === "launch");
      const kernel = state.selected.links.find((l) => l.role === "kernel");
      const self = selfRef();
      if (self && launch) pairs.push([launch, self]);
      if (self && kernel) pairs.push([self, kernel]);
    }
    if (state.allArrows) for (const f of state.flows) pairs.push([f.launch, f.kernel]);
    const out: [number, number, number, number][] = [];
    for (const [a, b] of pairs) {
      const ra = state.layout.find((r) => r.id === a.row);
      const rb = state.layout.find((r) => r.id === b.row);
      if (!ra || !rb) continue;
      const ya = ra.y - state.scrollY + RULER + 2 + Math.min(a.depth, MAX_LANES - 1) * LANE + LANE - 3;
      const yb = rb.y - state.scrollY + RULER + 2 + Math.min(b.depth, MAX_LANES - 1) * LANE;
      out.push([xOf(s, rel(a.ts_ns)), ya, xOf(s, rel(b.ts_ns)), yb]);
    }
    return out;
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

  function rel(ts: string): number {
    return Number(BigInt(ts) - state.origin);
  }

  function draw(): void {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth;
    const hh = canvas.clientHeight;
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(hh * dpr)) {
      canvas.width = Math.round(w * dpr);
      canvas.height = Math.round(hh * dpr);
    }
    const ctx = canvas.getContext("2d") as CanvasRenderingContext2D;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    const started = performance.now();
    drawAll(drawState(), arrows());
    state.drawMs.push(performance.now() - started);
    if (state.drawMs.length > 200) state.drawMs.shift();
  }

  let frame = 0;
  function redraw(): void {
    if (!frame) frame = requestAnimationFrame(() => ((frame = 0), draw()));
  }

  /** One tile for every visible leaf row over the view; the old tile is drawn meanwhile. */
  async function fetchTile(): Promise<void> {
    if (!state.profile || !state.rows) return;
    const ids = leafIds();
    abort?.abort();
    if (ids.length === 0) {
      state.tile = null;
      state.tiles += 1; // an empty tile: nothing expanded yet
      state.loading = false;
      status.textContent = "expand a node and a GPU to see its rows";
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
      state.tile = t;
      const rows = ids.slice(0, 256);
      state.lastRequest = { rows, t0_ns: (state.origin + BigInt(t.t0)).toString(), t1_ns: (state.origin + BigInt(t.t1)).toString(), width };
      state.tiles += 1;
      status.textContent = `${t.ts.length.toLocaleString()} events, ${t.binCol.length.toLocaleString()} merged columns, ${(t.bytes / 1024).toFixed(0)} KB`;
      if (state.allArrows) {
        state.flows = (await api.getFlows(state.profile, ids, state.origin + BigInt(Math.floor(state.t0)), state.origin + BigInt(Math.ceil(state.t1)))).flows;
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
  }

  function zoom(factor: number, atX?: number): void {
    const w = canvas.clientWidth - GUTTER;
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
  }

  /** Open every group on the way to a row (the row ids say where they sit only via the tree). */
  function reveal(rowId: string): void {
    const path: string[] = [];
    const find = (row: TlRow): boolean => {
      if (row.id === rowId) return true;
      for (const c of row.children ?? []) if (find(c)) return path.push(row.id), true;
      return false;
    };
    if (state.rows && find(state.rows.root)) {
      for (const id of path) state.open.add(id);
      relayout();
      const r = state.layout.find((x) => x.id === rowId);
      const visible = canvas.clientHeight - RULER;
      if (r && (r.y < state.scrollY || r.y + r.h > state.scrollY + visible)) state.scrollY = Math.max(0, r.y - visible / 3);
    }
  }

  async function select(id: number, jump = false, row?: string): Promise<void> {
    if (!state.profile) return;
    try {
      state.selected = await api.getEvent(state.profile, id, row);
    } catch (err) {
      showError(err);
      return;
    }
    if (jump && state.selected.row) {
      reveal(state.selected.row);
      const t = rel(String(state.selected.fields.ts_ns));
      const dur = Math.max(Number(state.selected.fields.dur_ns ?? 0), 2000);
      const span = Math.max(state.t1 - state.t0 > dur * 50 ? dur * 20 : state.t1 - state.t0, dur * 3);
      setView(t + dur / 2 - span / 2, t + dur / 2 + span / 2);
    }
    showDetails("details");
    redraw();
  }

  function showDetails(tab: "details" | "connections"): void {
    if (state.selected) renderDetails(details, state.selected, tab, rel, showDetails, (l) => void select(l.id, true, l.row));
  }

  async function runSearch(): Promise<void> {
    const q = searchBox.value.trim();
    state.search = q;
    state.matches = [];
    state.matchIndex = -1;
    state.matchTotal = 0;
    searchInfo.textContent = "";
    redraw();
    if (!q || !state.profile) return;
    try {
      const r = await api.getSearch(state.profile, q);
      state.matches = r.matches;
      state.matchTotal = r.total;
      searchInfo.textContent = `${r.total.toLocaleString()} matches`;
      jumpMatch(1);
    } catch (err) {
      showError(err);
    }
  }

  function jumpMatch(step: number): void {
    if (state.matches.length === 0) return;
    state.matchIndex = (state.matchIndex + step + state.matches.length) % state.matches.length;
    const m = state.matches[state.matchIndex]!;
    searchInfo.textContent = `${state.matchIndex + 1} of ${state.matchTotal.toLocaleString()}`;
    void select(m.id, true, m.row);
  }

  function hit(x: number, y: number): { row: Layout; event: number | null } | null {
    const yy = y - RULER + state.scrollY;
    const row = state.layout.find((r) => yy >= r.y && yy < r.y + r.h);
    if (!row) return null;
    const t = state.tile;
    if (!t || row.type !== "events" || x < GUTTER) return { row, event: null };
    const k = t.rows.indexOf(row.id);
    const lane = Math.floor((yy - row.y - 2) / LANE);
    const s = drawState();
    let best: number | null = null;
    for (let i = 0; i < t.ts.length; i++) {
      if (t.row[i] !== k || Math.min(t.depth[i]!, MAX_LANES - 1) !== lane) continue;
      const x0 = xOf(s, t.ts[i]!);
      const x1 = Math.max(x0 + 1, xOf(s, t.ts[i]! + t.dur[i]!));
      if (x >= x0 - 2 && x <= x1 + 2) best = t.id[i]!;
    }
    return { row, event: best };
  }

  installInput(canvas, {
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
    click: (x: number, y: number) => {
      const found = hit(x, y);
      if (!found) return;
      if (found.row.type === "group") toggle(found.row.id);
      else if (found.event !== null) void select(found.event, false, found.row.id);
    },
  });
  searchBox.addEventListener("keydown", (e) => {
    if (e.key !== "Enter") return;
    if (searchBox.value.trim() === state.search && state.matches.length) jumpMatch(e.shiftKey ? -1 : 1);
    else void runSearch();
  });
  stepSelect.addEventListener("change", () => {
    const name = stepSelect.value;
    const steps = (state.rows?.steps ?? []).filter((s) => s.name === name);
    if (steps.length === 0) return;
    const a = Math.min(...steps.map((s) => rel(s.ts_ns)));
    const b = Math.max(...steps.map((s) => rel(s.ts_ns) + s.dur_ns));
    setView(a - (b - a) * 0.02, b + (b - a) * 0.02);
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

  async function load(id: string): Promise<void> {
    if (state.profile === id) return;
    state.profile = id;
    state.tile = null;
    state.rows = null;
    state.layout = [];
    state.selected = null;
    state.open = new Set(["job"]);
    details.replaceChildren(h("p", { class: "muted" }, "Click an event."));
    status.textContent = "loading rows…";
    try {
      const rows = await api.getRows(id);
      if (state.profile !== id) return;
      state.rows = rows;
      state.origin = BigInt(rows.start_ns);
      state.span = [0, Math.max(1000, Number(BigInt(rows.end_ns) - state.origin))];
      const names = [...new Set(rows.steps.map((s) => s.name))];
      stepSelect.replaceChildren(
        h("option", { value: "" }, `zoom to step… (${names.length})`),
        ...names.map((n) => h("option", { value: n }, n.replace(/^ProfilerStep#/, "step_"))),
      );
      relayout();
      state.t0 = state.span[0];
      state.t1 = state.span[1];
      redraw();
      void fetchTile(); // at once: the first paint waits for no debounce
    } catch (err) {
      showError(err);
    }
  }

  return {
    root,
    setActive(on: boolean) {
      if (on) redraw();
    },
    load: (id: string) => void load(id),
  };
}
