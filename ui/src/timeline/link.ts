// The timeline's part of a shareable address (urlstate.ts): the window as exact epoch ns (t0, t1),
// the rows open (open, repeated), the selected event (sel, with its row in selrow) and the search
// (q; exact=1: a whole name, as a table's row asks for). Left out
// when they are the defaults (the whole span, only the job open, nothing selected).
import { download, exportUrl } from "../api";
import { debounce } from "../dom";
import { setView, viewOf } from "../urlstate";
import { state } from "./state";

const DEFAULT_OPEN = ["job"];
const INT = /^-?\d+$/;

function abs(t: number): string {
  return (state.origin + BigInt(Math.round(t))).toString();
}

/** Writes the view to the address, a quarter second after it last moved. */
export const saveLink = debounce((): void => {
  const id = state.profile;
  if (!id || !state.rows) return;
  const whole = Math.round(state.t0) <= state.span[0] && Math.round(state.t1) >= state.span[1];
  const open = [...state.open];
  const d = state.selected;
  setView(id, {
    t0: whole ? null : abs(state.t0),
    t1: whole ? null : abs(state.t1),
    open: open.length === DEFAULT_OPEN.length && open.every((o) => DEFAULT_OPEN.includes(o)) ? null : open,
    sel: d ? String(d.id) : null,
    selrow: d?.row ?? null,
    q: state.search || null,
    exact: state.search && state.searchExact ? "1" : null,
  });
}, 250);

export interface LinkedView {
  window: [number, number] | null;
  open: Set<string> | null;
  select: { id: number; row: string | undefined } | null;
  search: { q: string; exact: boolean } | null;
}

/** What the address says of the loaded profile's timeline (nothing for another profile's). */
export function linkedView(profile: string): LinkedView {
  const v = viewOf(profile);
  const a = v.get("t0");
  const b = v.get("t1");
  let window: [number, number] | null = null;
  if (a && b && INT.test(a) && INT.test(b)) {
    const t0 = Number(BigInt(a) - state.origin);
    const t1 = Number(BigInt(b) - state.origin);
    if (t1 > t0) window = [t0, t1];
  }
  const open = v.getAll("open");
  const sel = v.get("sel");
  return {
    window,
    open: open.length ? new Set(open) : null,
    select: sel && /^\d+$/.test(sel) ? { id: Number(sel), row: v.get("selrow") ?? undefined } : null,
    search: v.get("q") ? { q: v.get("q") ?? "", exact: v.get("exact") === "1" } : null,
  };
}

/** The export button: the window shown as Chrome-trace JSON, or the whole profile when the whole
 * span is shown. */
export function exportShown(): void {
  const id = state.profile;
  if (!id || !state.rows) return;
  const whole = Math.round(state.t0) <= state.span[0] && Math.round(state.t1) >= state.span[1];
  download(exportUrl(id, whole ? undefined : { start: abs(Math.floor(state.t0)), end: abs(Math.ceil(state.t1)) }));
}
