// Where an event of a tile, an instant mark or an arrow's end is on the canvas, and what is under the
// pointer: the same lane geometry (geometry.ts) as the drawing, so a click always finds what is drawn.
import type { Tile } from "./data";
import { type Arrow, fmtDuration, type Rect } from "./draw";
import { GROUP_H, GUTTER, type Layout, laneAt, laneHeight, laneOf, laneTop, MARK_H, RULER } from "./geometry";
import { shownRow } from "./layout";

/** What a frame maps: time to x (canvas px) and the rows by id. */
export interface Frame {
  xOf(t: number): number;
  scrollY: number;
  /** rows shown, and the device rows a closed group draws on its line */
  drawn: Map<string, Layout>;
}

/** The selected event's outline, where the tile draws it. */
export function eventRect(f: Frame, tile: Tile, i: number): Rect | null {
  const r = f.drawn.get(tile.rows[tile.row[i]!]!);
  if (!r) return null;
  const lane = laneOf(r, tile.depth[i]!);
  const x0 = f.xOf(tile.ts[i]!);
  const x1 = Math.max(x0 + 1, f.xOf(tile.ts[i]! + tile.dur[i]!));
  return { x: x0, y: r.y - f.scrollY + RULER + laneTop(lane), w: x1 - x0, h: laneHeight(lane) };
}

/** An instant mark's outline when selected. */
export function markRect(f: Frame, tile: Tile, i: number): Rect | null {
  const r = f.drawn.get(tile.rows[tile.mRow[i]!]!);
  if (!r) return null;
  return { x: f.xOf(tile.mTs[i]!) - 5, y: r.y - f.scrollY + RULER + 1, w: 10, h: MARK_H + 2 };
}

/** The event drawn at (x, y) in a row (`dy` px below its top), or -1. */
export function eventAt(f: Frame, tile: Tile, row: Layout, x: number, dy: number): number {
  const k = tile.rows.indexOf(row.id);
  if (k < 0) return -1;
  const lane = laneAt(dy);
  if (lane < 0 || lane >= row.lanes || dy - laneTop(lane) > laneHeight(lane) + 1) return -1;
  let best = -1;
  for (let i = 0; i < tile.ts.length; i++) {
    if (tile.row[i] !== k || laneOf(row, tile.depth[i]!) !== lane) continue;
    const x0 = f.xOf(tile.ts[i]!);
    const x1 = Math.max(x0 + 1, f.xOf(tile.ts[i]! + tile.dur[i]!));
    if (x >= x0 - 2 && x <= x1 + 2) best = i;
  }
  return best;
}

/** The instant mark drawn at (x, y) in a row (`dy` px below its top), or -1: the nearest within 5 px. */
export function markAt(f: Frame, tile: Tile, row: Layout, x: number, dy: number): number {
  if (dy > MARK_H + 4 || tile.mTs.length === 0) return -1;
  let best = -1;
  let bestD = 6;
  for (let i = 0; i < tile.mTs.length; i++) {
    const r = f.drawn.get(tile.rows[tile.mRow[i]!]!);
    if (r !== row) continue;
    const d = Math.abs(f.xOf(tile.mTs[i]!) - x);
    if (d < bestD) (best = i), (bestD = d);
  }
  return best;
}

/** One end of an arrow: an event on its row, or on the line of the closed group that hides it. */
export interface End {
  row: string;
  ts: number; // relative to the origin
  depth: number;
}

/** Where an end is drawn: its lane (top, middle or bottom) where its row is shown, else the line
 * of the nearest shown ancestor (a closed group), `hidden`; null when nothing of it is shown. */
export function placeEnd(
  f: Frame,
  shown: Map<string, Layout>,
  parentOf: Map<string, string>,
  e: End,
  at: "top" | "middle" | "bottom",
): { x: number; y: number; top: number; h: number; hidden: boolean } | null {
  const own = shown.get(e.row);
  const r = own ?? shownRow(shown, parentOf, e.row);
  if (!r) return null;
  const rowTop = r.y - f.scrollY + RULER;
  if (!own || r.type === "group") return { x: f.xOf(e.ts), y: rowTop + GROUP_H / 2, top: rowTop + 3, h: GROUP_H - 6, hidden: !own };
  const lane = laneOf(r, e.depth);
  const top = rowTop + laneTop(lane);
  const h = laneHeight(lane);
  return { x: f.xOf(e.ts), y: top + (at === "bottom" ? h : at === "middle" ? h / 2 : 0), top, h, hidden: false };
}

/** Launch → kernel arrows for `pairs`: to the event's lane where its row is shown, else to the
 * nearest shown ancestor's line (a closed group), dashed. Pairs with an end nowhere are left out.
 * `middle`: both ends at their lane's middle (collectives: kernels on rows above and below). */
export function arrowsFor(f: Frame, shown: Map<string, Layout>, parentOf: Map<string, string>, pairs: [End, End][], middle = false): Arrow[] {
  const out: Arrow[] = [];
  for (const [a, b] of pairs) {
    const pa = placeEnd(f, shown, parentOf, a, middle ? "middle" : "bottom");
    const pb = placeEnd(f, shown, parentOf, b, middle ? "middle" : "top");
    if (!pa || !pb) continue;
    out.push({ x0: pa.x, y0: pa.y, x1: pb.x, y1: pb.y, dashed: pa.hidden || pb.hidden });
  }
  return out;
}

/** What is under the pointer: its row, and the tile's event or instant mark there (-1: none). */
export interface Hit {
  row: Layout;
  event: number;
  mark: number;
}

/** The row at canvas (x, y) of a frame scrolled to `f.scrollY`, and the event or mark under it. */
export function hitAt(f: Frame, layout: Layout[], t: Tile | null, x: number, y: number): Hit | null {
  const yy = y - RULER + f.scrollY;
  const row = layout.find((r) => yy >= r.y && yy < r.y + r.h);
  if (!row) return null;
  if (!t || x < GUTTER) return { row, event: -1, mark: -1 };
  const mark = markAt(f, t, row, x, yy - row.y);
  return { row, event: mark < 0 && row.type === "events" ? eventAt(f, t, row, x, yy - row.y) : -1, mark };
}

/** The canvas's tooltip for what is under the pointer: the name and duration, or the instants. */
export function hoverTitle(found: Hit | null, t: Tile | null): string {
  if (found && t && found.mark >= 0) {
    const n = t.mCount[found.mark]!;
    return `${t.names[t.mName[found.mark]!]} · instant${n > 1 ? ` (${n.toLocaleString()} under this mark)` : ""}`;
  }
  if (found && t && found.event >= 0) return `${t.names[t.name[found.event]!]} · ${fmtDuration(t.dur[found.event]!)}`;
  return "";
}
