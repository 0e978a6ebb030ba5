// The timeline page's state: one object, exposed as window.__hyperscope.timeline.state so that
// tests and the benchmark read what is drawn.
import type { TlCollective, TlDetails, TlEventRef, TlFlow, TlRange, TlRows, Tile } from "./data";
import type { Arrow, Rect } from "./draw";
import type { Layout } from "./geometry";

export interface TimelineState {
  profile: string | null;
  origin: bigint;
  span: [number, number];
  t0: number;
  t1: number;
  scrollY: number;
  open: Set<string>;
  rows: TlRows | null;
  layout: Layout[];
  tile: Tile | null;
  /** tiles answered since the page opened, and whether one is on its way */
  tiles: number;
  loading: boolean;
  /** while the server builds the profile's timeline index: how far (0 to 1), else null */
  building: number | null;
  /** answers "building" seen since the page opened, and their progress (tests) */
  buildingSeen: number;
  buildingLog: number[];
  selected: TlDetails | null;
  /** a range marked by shift+drag or a drag on the ruler (ns from the origin), its statistics */
  range: [number, number] | null;
  rangeStats: TlRange | null;
  /** the selection came from an instant mark: how many instants it stands for (else 0) */
  selectedInstants: number;
  search: string;
  /** the search is a whole name (from a table's row), not a part of names */
  searchExact: boolean;
  matches: TlEventRef[];
  matchTotal: number;
  matchIndex: number;
  allArrows: boolean;
  flows: TlFlow[];
  /** the selected event's collective on every rank (null: none selected, or not a collective) */
  collective: TlCollective | null;
  /** "all collectives": every collective with a kernel in view (at most COLLECTIVES_SHOWN), and
   * how many the window holds */
  allCollectives: boolean;
  collectives: TlCollective[];
  collectivesTotal: number;
  /** collective arrows (each rank's kernel → the last rank's) and last-arrival marks of the last
   * frame (canvas px), for tests */
  collArrows: Arrow[];
  lastMarks: Rect[];
  /** what the shown tile was asked for (exact epoch ns as strings), for tests */
  lastRequest: { rows: string[]; t0_ns: string; t1_ns: string; width: number } | null;
  /** ms of the last frames drawn (at most 200), for the benchmark */
  drawMs: number[];
  /** launch → kernel arrows of the last frame (canvas px), for tests */
  arrows: Arrow[];
  /** when set (by the benchmark), every frame: its ms, whether the tile's layer was copied ("copy"),
   * drawn ("draw") or drawn in part ("slice"), the view, and the events and merged events in it */
  frameLog: { ms: number; kind: string; t0: number; t1: number; events: number; merged: number }[] | null;
}

export const state: TimelineState = {
  profile: null,
  origin: 0n,
  span: [0, 1],
  t0: 0,
  t1: 1,
  scrollY: 0,
  open: new Set(["job"]),
  rows: null,
  layout: [],
  tile: null,
  tiles: 0,
  loading: false,
  building: null,
  buildingSeen: 0,
  buildingLog: [],
  selected: null,
  range: null,
  rangeStats: null,
  selectedInstants: 0,
  search: "",
  searchExact: false,
  matches: [],
  matchTotal: 0,
  matchIndex: -1,
  allArrows: false,
  flows: [],
  collective: null,
  allCollectives: false,
  collectives: [],
  collectivesTotal: 0,
  collArrows: [],
  lastMarks: [],
  lastRequest: null,
  drawMs: [],
  arrows: [],
  frameLog: null,
};

/** A time from the server (exact epoch ns, as a string) in ns from the profile's origin, as drawn. */
export function rel(ts: string): number {
  return Number(BigInt(ts) - state.origin);
}
