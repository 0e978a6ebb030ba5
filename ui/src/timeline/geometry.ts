// Where things sit on the timeline canvas: the gutter and ruler, row heights, and the lanes of an
// event row (one per nesting level). Drawing, hit-testing, arrows and search outlines all place an
// event with these functions, so they always agree.

export const GUTTER = 280; // px of row labels
export const RULER = 26; // px of the time ruler
export const LANE = 16; // px per nesting level of an event row, for the first FULL_LANES levels
export const FULL_LANES = 12; // levels drawn LANE px tall, with their names
export const DEEP_LANE = 5; // px per deeper level (Python stacks of 50-150 levels stay compact)
export const ROW_PAD = 2; // px above the first lane
export const SAMPLE_H = 34;
export const GROUP_H = 22;
export const MARK_H = 6; // px of an instant mark at the top of its row

export interface Layout {
  id: string;
  label: string;
  type: "group" | "events" | "samples";
  level: number; // depth in the tree
  y: number;
  h: number;
  open: boolean;
  lanes: number;
  /** a closed group: the device rows under it, drawn flattened on its line (what ran, where busy) */
  summary?: string[];
  /** a sample row's unit ("%", "bytes", "per interval", "" for a counter) */
  unit?: string;
}

/** The top of a sample row's scale: 100 for percentages (or more, a process over several cores),
 * else the largest value in view, so a counter of 3 or a memory curve of 80 GB fills its row. */
export function scaleTop(unit: string | undefined, largest: number): number {
  if (unit === "%") return Math.max(100, largest);
  return largest > 0 ? largest : 1;
}

/** px from a row's top to the top of nesting level `depth` */
export function laneTop(depth: number): number {
  return depth < FULL_LANES ? ROW_PAD + depth * LANE : ROW_PAD + FULL_LANES * LANE + (depth - FULL_LANES) * DEEP_LANE;
}

/** px of an event drawn at nesting level `depth` */
export function laneHeight(depth: number): number {
  return depth < FULL_LANES ? LANE - 3 : DEEP_LANE - 1;
}

/** the nesting level at `dy` px below a row's top (-1 above the first lane) */
export function laneAt(dy: number): number {
  const y = dy - ROW_PAD;
  if (y < 0) return -1;
  if (y < FULL_LANES * LANE) return Math.floor(y / LANE);
  return FULL_LANES + Math.floor((y - FULL_LANES * LANE) / DEEP_LANE);
}

/** an event row's height for `lanes` nesting levels: every level shown */
export function eventRowHeight(lanes: number): number {
  return laneTop(Math.max(1, lanes)) + 4;
}

/** the lane an event of `depth` is drawn on in a row: a closed group draws everything on its line */
export function laneOf(row: Layout, depth: number): number {
  return row.type === "group" ? 0 : Math.min(depth, Math.max(0, row.lanes - 1));
}
