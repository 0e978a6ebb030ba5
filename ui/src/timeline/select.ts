// The timeline's selection and search: selecting an event (its details and connections, and for a
// collective's kernel the same collective on every rank), deselecting, revealing a row inside
// closed groups, the search box's matches with next/previous, and a shared link's view. The canvas
// side (view.ts) hands in how to lay out, redraw and move the view.
import { h } from "../dom";
import { showError } from "../errors";
import * as api from "./data";
import type { TlCollective } from "./data";
import { isCollective, renderCollective } from "./collective";
import { RULER } from "./geometry";
import { linkedView, saveLink } from "./link";
import { renderDetails } from "./panel";
import { rel, state } from "./state";

export interface SelectionHost {
  canvas: HTMLCanvasElement;
  details: HTMLElement;
  searchBox: HTMLInputElement;
  searchInfo: HTMLElement;
  relayout(): void;
  redraw(): void;
  refetch(): void;
  setView(t0: number, t1: number): void;
}

export interface Selection {
  select(id: number, jump?: boolean, row?: string, instants?: number): Promise<void>;
  deselect(): void;
  reveal(rowId: string): void;
  runSearch(exact?: boolean, jump?: boolean): Promise<void>;
  jumpMatch(step: number): void;
  applyLink(id: string): void;
  /** the details panel back to its prompt */
  clearDetails(): void;
}

export function selection(host: SelectionHost): Selection {
  const { canvas, details, searchBox, searchInfo } = host;
  let detailsTab: "details" | "connections" = "details";

  const clearDetails = (): void => void details.replaceChildren(h("p", { class: "muted" }, "Click an event."));

  /** Open every group on the way to a row (the row ids say where they sit only via the tree). */
  function reveal(rowId: string): void {
    const path: string[] = [];
    const find = (row: api.TlRow): boolean => {
      if (row.id === rowId) return true;
      for (const c of row.children ?? []) if (find(c)) return path.push(row.id), true;
      return false;
    };
    if (state.rows && find(state.rows.root)) {
      for (const id of path) state.open.add(id);
      host.relayout();
      const r = state.layout.find((x) => x.id === rowId);
      const visible = canvas.clientHeight - RULER;
      if (r && (r.y < state.scrollY || r.y + r.h > state.scrollY + visible)) state.scrollY = Math.max(0, r.y - visible / 3);
    }
  }

  /** Select an event (an instant mark: `instants`, how many its pixel column holds). */
  async function select(id: number, jump = false, row?: string, instants = 0): Promise<void> {
    if (!state.profile) return;
    try {
      const got = await api.getEvent(state.profile, id, row);
      state.selected = got;
      state.collective = null;
      state.selectedInstants = instants;
    } catch (err) {
      showError(err);
      return;
    }
    const sel = state.selected;
    if (jump && sel.row) {
      reveal(sel.row);
      const t = rel(String(sel.fields.ts_ns));
      const dur = Math.max(Number(sel.fields.dur_ns ?? 0), 2000);
      const span = Math.max(state.t1 - state.t0 > dur * 50 ? dur * 20 : state.t1 - state.t0, dur * 3);
      host.setView(t + dur / 2 - span / 2, t + dur / 2 + span / 2);
    }
    showDetails("details");
    host.redraw();
    saveLink();
    if (!isCollective(sel.fields.kind, sel.fields.name)) return;
    // a collective's kernel: then the same collective on every rank (the selection stands without it)
    try {
      const coll = (await api.getCollective(state.profile, id, sel.row ?? row)).instance;
      if (state.selected !== sel) return; // another event selected meanwhile
      state.collective = coll;
      showDetails(detailsTab);
      host.redraw();
    } catch (err) {
      showError(err);
    }
  }

  /** No selection: its outline, arrows and details go; Fit fits the profile again. */
  function deselect(): void {
    if (!state.selected) return;
    state.selected = null;
    state.collective = null;
    state.selectedInstants = 0;
    clearDetails();
    host.redraw();
    saveLink();
  }

  /** The view a link gives: its window, open rows and selection (the selection last: its row
   * must be laid out to be outlined). */
  function applyLink(id: string): void {
    const v = linkedView(id);
    if (v.open) {
      state.open = v.open;
      host.relayout();
    }
    if (v.window && (v.window[0] !== state.t0 || v.window[1] !== state.t1)) host.setView(v.window[0], v.window[1]);
    const sel = v.select && v.select.id !== state.selected?.id ? v.select : null;
    if (v.search && (v.search.q !== state.search || v.search.exact !== state.searchExact)) {
      // a table's row: its occurrences, the first one selected, next/previous with ◀ ▶
      searchBox.value = v.search.q;
      void runSearch(v.search.exact, !v.select);
    }
    if (sel) void select(sel.id, false, sel.row);
  }

  function showDetails(tab: "details" | "connections"): void {
    const d = state.selected;
    if (!d) return;
    detailsTab = tab;
    renderDetails(details, d, tab, rel, showDetails, (l) => void select(l.id, true, l.row), state.selectedInstants);
    const c = state.collective;
    if (c) details.insertBefore(renderCollective(c, rel, (e) => void select(e.id, true, e.row), () => showEveryRank(c)), details.children[1] ?? null);
  }

  /** Opens the rows of a collective's kernel on every rank (the selected one kept in view). */
  function showEveryRank(c: TlCollective): void {
    for (const e of c.events) reveal(e.row);
    if (state.selected?.row) reveal(state.selected.row);
    host.redraw();
    host.refetch();
    saveLink();
  }

  /** ``jump``: select the first match (a link that names its selection keeps that one). */
  async function runSearch(exact = false, jump = true): Promise<void> {
    const q = exact ? searchBox.value : searchBox.value.trim();
    state.search = q;
    state.searchExact = exact;
    saveLink();
    state.matches = [];
    state.matchIndex = -1;
    state.matchTotal = 0;
    searchInfo.textContent = "";
    host.redraw();
    if (!q || !state.profile) return;
    try {
      const r = await api.getSearch(state.profile, q);
      state.matches = r.matches;
      state.matchTotal = r.total;
      searchInfo.textContent = `${r.total.toLocaleString()} ${exact ? "occurrences" : "matches"}`;
      if (jump) jumpMatch(1);
    } catch (err) {
      showError(err);
    }
  }

  function jumpMatch(step: number): void {
    if (state.matches.length === 0) return;
    state.matchIndex = (state.matchIndex + step + state.matches.length) % state.matches.length;
    const m = state.matches[state.matchIndex]!;
    searchInfo.textContent = `${state.matchIndex + 1} of ${state.matchTotal.toLocaleString()}${state.searchExact ? " (this name)" : ""}`;
    void select(m.id, true, m.row);
  }

  searchBox.addEventListener("keydown", (e) => {
    if (e.key !== "Enter") return;
    if ((state.searchExact ? searchBox.value : searchBox.value.trim()) === state.search && state.matches.length) jumpMatch(e.shiftKey ? -1 : 1);
    else void runSearch();
  });

  return { select, deselect, reveal, runSearch, jumpMatch, applyLink, clearDetails };
}
