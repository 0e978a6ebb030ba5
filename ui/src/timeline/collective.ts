// Collectives across ranks on the timeline: the selected collective's kernel on every rank (the
// n-th launch of that collective on each, as the dashboard's waits match them), an arrow from each
// rank's kernel to the kernel of the rank that arrived last, that kernel outlined in orange with a
// "last" tag, and the panel's list of ranks ("last to arrive: rank R, +X after the first").
import { h } from "../dom";
import type { TlCollective, TlEventRef } from "./data";
import { type Arrow, fmtDuration, type Rect } from "./draw";
import type { Layout } from "./geometry";
import { arrowsFor, type End, type Frame, placeEnd } from "./place";

/** kernel names of NCCL/RCCL collectives: the ones the server matches across ranks */
export const COLLECTIVE_NAME = /^(nccl|rccl)/i;
/** collectives asked for in the window when "all collectives" is on (the server's bound is 500) */
export const COLLECTIVES_SHOWN = 100;
export const COLL_COLOR = "#6a1b9a";
export const LAST_COLOR = "#ef6c00";

/** Whether the selected event is one whose ranks to ask for. */
export function isCollective(kind: unknown, name: unknown): boolean {
  return kind === "kernel" && COLLECTIVE_NAME.test(String(name ?? ""));
}

/** The selected collective, then those of the window (each once). */
export function collectivesShown(selected: TlCollective | null, window: TlCollective[]): TlCollective[] {
  const out = selected ? [selected] : [];
  const key = (c: TlCollective): string => `${c.collective}#${c.seq}`;
  const seen = new Set(out.map(key));
  for (const c of window) if (!seen.has(key(c))) seen.add(key(c)), out.push(c);
  return out;
}

/** The arrows (each rank's kernel → the last rank's) and the last-arrival marks of `instances`. */
export function collectiveMarks(
  f: Frame,
  shown: Map<string, Layout>,
  parentOf: Map<string, string>,
  instances: TlCollective[],
  rel: (ts: string) => number,
): { arrows: Arrow[]; marks: Rect[] } {
  const end = (e: TlEventRef): End => ({ row: e.row, ts: rel(e.ts_ns), depth: e.depth });
  const pairs: [End, End][] = [];
  const marks: Rect[] = [];
  for (const c of instances) {
    const last = c.events.find((e) => e.id === c.last.id);
    if (!last) continue;
    for (const e of c.events) if (e !== last) pairs.push([end(e), end(last)]);
    const p = placeEnd(f, shown, parentOf, end(last), "top");
    if (p) {
      const x1 = p.hidden ? p.x + 1 : Math.max(p.x + 1, f.xOf(rel(last.ts_ns) + last.dur_ns));
      marks.push({ x: p.x, y: p.top, w: x1 - p.x, h: p.h });
    }
  }
  return { arrows: arrowsFor(f, shown, parentOf, pairs, true), marks };
}

/** "last to arrive: rank R, +X after the first" */
export function lastText(c: TlCollective): string {
  return `last to arrive: rank ${c.last.rank}, +${fmtDuration(c.last.after_first_ns)} after the first`;
}

/** The panel's part for the selected collective: what it is, the last rank, and every rank's
 * kernel by arrival (its start after the first's), each with a Jump button; "Show every rank"
 * opens the rows of all of them. */
export function renderCollective(
  c: TlCollective,
  rel: (ts: string) => number,
  onJump: (to: TlEventRef) => void,
  onShowAll: () => void,
): HTMLElement {
  const t0 = Math.min(...c.events.map((e) => rel(e.ts_ns)));
  const byArrival = [...c.events].sort((a, b) => rel(a.ts_ns) - rel(b.ts_ns) || a.rank - b.rank);
  const note = c.complete ? "" : " (not every rank that launches it has this one)";
  return h(
    "div",
    { id: "tl-collective", class: "tl-collective", "data-ranks": c.ranks, "data-last-rank": c.last.rank },
    h("p", {}, h("strong", {}, `${c.collective} #${c.seq + 1}`), ` on ${c.ranks} ranks${note}`),
    h("p", { id: "tl-last-arrival", class: "tl-last" }, lastText(c)),
    h(
      "ul",
      { class: "tl-links", id: "tl-coll-ranks" },
      byArrival.map((e) =>
        h(
          "li",
          { "data-rank": e.rank, "data-id": e.id, class: e.id === c.last.id ? "tl-last" : "" },
          h("strong", {}, `rank ${e.rank}`),
          ` +${fmtDuration(rel(e.ts_ns) - t0)} · ${fmtDuration(e.dur_ns)} · ${e.row} `,
          h("button", { type: "button", class: "tl-jump", onclick: () => onJump(e) }, "Jump"),
        ),
      ),
    ),
    h("button", { type: "button", id: "tl-coll-show", class: "secondary", onclick: onShowAll }, "Show every rank"),
  );
}
