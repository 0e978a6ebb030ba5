// A tile prepared for drawing when it arrives: everything per event that does not depend on the
// view (each event's colour, the events ordered by colour, the merged columns joined into runs of
// one busyness level and ordered by row, which names match a search), computed once per tile
// rather than at every layer drawn from it (layer.ts).
import type { Tile } from "./data";
import { BUSY_LEVELS, nameColor } from "./colors";

/** A tile with what drawing needs, computed when it arrives. */
export interface Prepared {
  tile: Tile;
  colNs: number; // ns per merged column
  palette: string[]; // one colour per (name, kind)
  evColor: Uint32Array; // palette index per event
  evOrder: Uint32Array; // events by colour: one fillStyle per colour
  /** merged columns in runs: neighbouring columns of one row and level with the same busyness
   * level (whole runs of a busy stream: one rectangle) */
  runRow: Uint16Array;
  runDepth: Uint16Array;
  runCol: Uint32Array; // first column
  runCols: Uint32Array; // columns (pixel columns of the tile)
  runLevel: Uint8Array;
  /** the runs ordered by row: row k's are runsByRow[rowRuns[k] .. rowRuns[k + 1]) */
  runsByRow: Uint32Array;
  rowRuns: Uint32Array;
  markColor: Uint32Array; // palette index per mark
  markOrder: Uint32Array;
  lowerNames: string[] | null; // for the search, once
}

/** Indices 0..n-1 ordered by `key` (a counting sort: keys are small integers). */
function orderBy(key: ArrayLike<number>, keys: number): Uint32Array {
  const start = new Uint32Array(keys + 1);
  for (let i = 0; i < key.length; i++) start[key[i]! + 1]! += 1;
  for (let k = 0; k < keys; k++) start[k + 1]! += start[k]!;
  const out = new Uint32Array(key.length);
  for (let i = 0; i < key.length; i++) out[start[key[i]!]!++] = i;
  return out;
}

export function prepare(tile: Tile): Prepared {
  const palette: string[] = [];
  const seen = new Map<number, number>();
  const colorOf = (name: number, kind: string, kindIndex: number): number => {
    const key = name * 256 + kindIndex;
    let c = seen.get(key);
    if (c === undefined) {
      c = palette.length;
      palette.push(nameColor(tile.names[name]!, kind));
      seen.set(key, c);
    }
    return c;
  };
  const evColor = new Uint32Array(tile.ts.length);
  for (let i = 0; i < evColor.length; i++) evColor[i] = colorOf(tile.name[i]!, tile.kinds[tile.kind[i]!]!, tile.kind[i]!);
  const markColor = new Uint32Array(tile.mTs.length);
  for (let i = 0; i < markColor.length; i++) markColor[i] = colorOf(tile.mName[i]!, "instant", 255);
  const colNs = ((tile.t1 - tile.t0) / tile.width) * tile.binSpan;
  const n = tile.binCol.length;
  const runRow = new Uint16Array(n);
  const runDepth = new Uint16Array(n);
  const runCol = new Uint32Array(n);
  const runCols = new Uint32Array(n);
  const runLevel = new Uint8Array(n);
  let r = -1;
  for (let i = 0; i < n; i++) {
    const level = Math.min(BUSY_LEVELS - 1, Math.floor(Math.min(1, tile.binBusy[i]! / colNs) * BUSY_LEVELS));
    const [row, depth, c] = [tile.binRow[i]!, tile.binDepth[i]!, tile.binCol[i]!];
    if (r >= 0 && runRow[r] === row && runDepth[r] === depth && runLevel[r] === level && runCol[r]! + runCols[r]! === c) {
      runCols[r]! += tile.binSpan;
      continue;
    }
    r += 1;
    [runRow[r], runDepth[r], runCol[r], runCols[r], runLevel[r]] = [row, depth, c, tile.binSpan, level];
  }
  const runs = r + 1;
  const byRow = orderBy(runRow.subarray(0, runs), tile.rows.length);
  const rowRuns = new Uint32Array(tile.rows.length + 1);
  for (let i = 0; i < runs; i++) rowRuns[runRow[i]! + 1]! += 1;
  for (let k = 0; k < tile.rows.length; k++) rowRuns[k + 1]! += rowRuns[k]!;
  return {
    tile,
    colNs,
    palette,
    evColor,
    evOrder: orderBy(evColor, palette.length),
    runRow: runRow.subarray(0, runs),
    runDepth: runDepth.subarray(0, runs),
    runCol: runCol.subarray(0, runs),
    runCols: runCols.subarray(0, runs),
    runLevel: runLevel.subarray(0, runs),
    runsByRow: byRow,
    rowRuns,
    markColor,
    markOrder: orderBy(markColor, palette.length),
    lowerNames: null,
  };
}

/** Which names hold the search text (any case); null without a search. */
export function matches(p: Prepared, search: string): Uint8Array | null {
  if (search === "") return null;
  p.lowerNames ??= p.tile.names.map((n) => n.toLowerCase());
  const needle = search.toLowerCase();
  return Uint8Array.from(p.lowerNames, (n) => (n.includes(needle) ? 1 : 0));
}
