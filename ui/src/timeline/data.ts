// The timeline endpoints of docs/ui-api.md: JSON for rows, details, links and search; a binary
// tile decoded into typed arrays (no per-event objects, so 30k events cost a few copies).
// Times: the server's epoch nanoseconds are strings (beyond a double's exact integers); the view
// works in numbers of nanoseconds relative to the profile's start (`origin`), exact up to 104 days.

export interface TlRow {
  id: string;
  label: string;
  type: "group" | "events" | "samples";
  children?: TlRow[];
  events?: number;
  depths?: number;
  unit?: string;
}

/** One step name: from its earliest start to its latest end over every rank. */
export interface TlStep {
  name: string;
  ts_ns: string;
  dur_ns: number;
  events: number;
}

export interface TlRows {
  profile: string;
  start_ns: string;
  end_ns: string;
  kinds: string[];
  root: TlRow;
  steps: TlStep[];
}

export interface TlEventRef {
  role: string;
  row: string;
  id: number;
  name: string;
  kind: string;
  ts_ns: string;
  dur_ns: number;
  depth: number;
  correlation: number;
  rank: number;
}

export interface TlDetails {
  id: number;
  fields: Record<string, unknown>;
  row: string | null;
  depth?: number;
  links: TlEventRef[];
}

export interface TlFlow {
  rank: number;
  correlation: number;
  launch: { row: string; id: number; ts_ns: string; dur_ns: number; depth: number };
  kernel: { row: string; id: number; ts_ns: string; dur_ns: number; depth: number };
}

export interface Tile {
  rows: string[];
  t0: number; // relative to origin
  t1: number;
  width: number;
  minPx: number;
  binSpan: number;
  names: string[];
  kinds: string[];
  row: Uint16Array;
  depth: Uint16Array;
  kind: Uint8Array;
  name: Uint32Array;
  ts: Float64Array; // relative to origin
  dur: Float64Array;
  corr: Float64Array;
  id: Float64Array;
  binRow: Uint16Array;
  binDepth: Uint16Array;
  binCol: Uint32Array;
  binCount: Uint32Array;
  binBusy: Float64Array;
  sRow: Uint16Array;
  sTs: Float64Array;
  sVal: Float64Array;
  /** instant marks: at most one per row and pixel column (empty from a server without them) */
  mRow: Uint16Array;
  mTs: Float64Array; // relative to origin: the column's first instant of that row
  mCount: Uint32Array; // instants of that row in the column
  mName: Uint32Array;
  mId: Float64Array; // the first instant's event id
  bytes: number;
}

async function failIfBad(r: Response): Promise<Response> {
  if (!r.ok) {
    let detail = `${r.status} ${r.statusText}`;
    try {
      detail = ((await r.json()) as { detail?: string }).detail ?? detail;
    } catch {
      /* not JSON */
    }
    throw new Error(detail);
  }
  return r;
}

function base(profile: string): string {
  return `/api/profiles/${encodeURIComponent(profile)}/timeline`;
}

async function json<T>(url: string, signal?: AbortSignal): Promise<T> {
  const r = await failIfBad(await fetch(url, signal ? { signal } : {}));
  return (await r.json()) as T;
}

/** The server's answer while it builds a profile's timeline index (202, then asked again). */
export interface TlBuilding {
  building: true;
  progress: number; // 0 to 1
  detail: string;
}

export async function getRows(p: string): Promise<TlRows | TlBuilding> {
  const r = await fetch(`${base(p)}/rows`);
  if (r.status === 202) {
    const body = (await r.clone().json().catch(() => null)) as TlBuilding | null;
    if (body?.building) return body;
  }
  return (await (await failIfBad(r)).json()) as TlRows;
}
export const getEvent = (p: string, id: number, row?: string): Promise<TlDetails> =>
  json(`${base(p)}/event?id=${id}${row ? `&row=${encodeURIComponent(row)}` : ""}`);
export const getSearch = (p: string, q: string, exact = false): Promise<{ total: number; matches: TlEventRef[] }> =>
  json(`${base(p)}/search?q=${encodeURIComponent(q)}${exact ? "&exact=true" : ""}`);
export interface TlRangeStat {
  count: number;
  total_ns: number;
  kinds: { kind: string; count: number; total_ns: number }[];
  top: { name: string; count: number; total_ns: number }[];
}
export interface TlRange extends TlRangeStat {
  t0_ns: number;
  t1_ns: number;
  rows: (TlRangeStat & { id: string; rank: number; busy_ns: number; busy_pct: number })[];
}
export const getRange = (p: string, rows: string[], t0: bigint, t1: bigint): Promise<TlRange> =>
  json(`${base(p)}/range?rows=${encodeURIComponent(rows.join(","))}&t0_ns=${t0}&t1_ns=${t1}`);
export const getFlows = (p: string, rows: string[], t0: bigint, t1: bigint): Promise<{ flows: TlFlow[] }> =>
  json(`${base(p)}/flows?rows=${encodeURIComponent(rows.join(","))}&t0_ns=${t0}&t1_ns=${t1}`);

/** One collective on every rank (the n-th launch of it on each): its kernels by rank, the first
 * and the last rank to arrive (latest start, the timeline's clocks). */
export interface TlCollective {
  collective: string;
  seq: number;
  ranks: number;
  complete: boolean;
  events: TlEventRef[];
  first: { rank: number; id: number };
  last: { rank: number; id: number; after_first_ns: number };
}
export const getCollective = (p: string, id: number, row?: string): Promise<{ id: number; instance: TlCollective | null }> =>
  json(`${base(p)}/collective?id=${id}${row ? `&row=${encodeURIComponent(row)}` : ""}`);
export const getCollectives = (
  p: string,
  rows: string[],
  t0: bigint,
  t1: bigint,
  limit: number,
): Promise<{ total: number; truncated: boolean; instances: TlCollective[] }> =>
  json(`${base(p)}/collectives?rows=${encodeURIComponent(rows.join(","))}&t0_ns=${t0}&t1_ns=${t1}&limit=${limit}`);

/** int64 columns as float64 relative to `origin` (exact below 2^53 ns), or as plain numbers. */
function toF64(src: BigInt64Array, origin: bigint | null): Float64Array {
  const out = new Float64Array(src.length);
  for (let i = 0; i < src.length; i++) out[i] = Number(origin === null ? src[i]! : src[i]! - origin);
  return out;
}

export async function getTile(
  p: string,
  rows: string[],
  t0: number,
  t1: number,
  width: number,
  origin: bigint,
  signal: AbortSignal,
): Promise<Tile> {
  const a = origin + BigInt(Math.floor(t0));
  const b = origin + BigInt(Math.ceil(t1));
  // snap=1: the server may answer a window a little wider, with pixel columns of its overview's
  // cells (at most twice the asked ones), read without decoding any event; the tile's header says
  // its window, and a tile is drawn at its own window whatever the view (as while panning)
  const url = `${base(p)}/tile?rows=${encodeURIComponent(rows.join(","))}&t0_ns=${a}&t1_ns=${b}&width=${width}&snap=1`;
  const r = await failIfBad(await fetch(url, { signal }));
  return decodeTile(await r.arrayBuffer(), origin);
}

type Marks = Pick<Tile, "mRow" | "mTs" | "mCount" | "mName" | "mId">;

/** The instant columns (`m_*`), or none when the tile has no `m_row` (a server before marks). */
function marks(col: ((name: string) => ArrayBufferView) | null, origin: bigint): Marks {
  if (!col) {
    return { mRow: new Uint16Array(0), mTs: new Float64Array(0), mCount: new Uint32Array(0), mName: new Uint32Array(0), mId: new Float64Array(0) };
  }
  return {
    mRow: col("m_row") as Uint16Array,
    mTs: toF64(col("m_ts") as BigInt64Array, origin),
    mCount: col("m_count") as Uint32Array,
    mName: col("m_name") as Uint32Array,
    mId: toF64(col("m_id") as BigInt64Array, null),
  };
}

export function decodeTile(buf: ArrayBuffer, origin: bigint): Tile {
  const view = new DataView(buf);
  const magic = new TextDecoder().decode(new Uint8Array(buf, 0, 4));
  if (magic !== "HSTL") throw new Error("not a timeline tile");
  const n = view.getUint32(4, true);
  const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 8, n))) as {
    rows: string[];
    t0_ns: string;
    t1_ns: string;
    width: number;
    min_px: number;
    bin_span: number;
    names: string[];
    kinds: string[];
    columns: { name: string; dtype: string; offset: number; length: number }[];
  };
  const start = 8 + n;
  const col = (name: string): ArrayBufferView => {
    const c = header.columns.find((x) => x.name === name);
    if (!c) throw new Error(`tile: no column ${name}`);
    const at = start + c.offset;
    switch (c.dtype) {
      case "u1":
        return new Uint8Array(buf, at, c.length);
      case "u2":
        return new Uint16Array(buf, at, c.length);
      case "u4":
        return new Uint32Array(buf, at, c.length);
      case "i8":
        return new BigInt64Array(buf, at, c.length);
      case "f8":
        return new Float64Array(buf, at, c.length);
      default:
        throw new Error(`tile: column ${name} has type ${c.dtype}`);
    }
  };
  return {
    rows: header.rows,
    t0: Number(BigInt(header.t0_ns) - origin),
    t1: Number(BigInt(header.t1_ns) - origin),
    width: header.width,
    minPx: header.min_px,
    binSpan: header.bin_span,
    names: header.names,
    kinds: header.kinds,
    row: col("row") as Uint16Array,
    depth: col("depth") as Uint16Array,
    kind: col("kind") as Uint8Array,
    name: col("name") as Uint32Array,
    ts: toF64(col("ts") as BigInt64Array, origin),
    dur: toF64(col("dur") as BigInt64Array, null),
    corr: toF64(col("corr") as BigInt64Array, null),
    id: toF64(col("id") as BigInt64Array, null),
    binRow: col("bin_row") as Uint16Array,
    binDepth: col("bin_depth") as Uint16Array,
    binCol: col("bin_col") as Uint32Array,
    binCount: col("bin_count") as Uint32Array,
    binBusy: toF64(col("bin_busy") as BigInt64Array, null),
    sRow: col("s_row") as Uint16Array,
    sTs: toF64(col("s_ts") as BigInt64Array, origin),
    sVal: col("s_val") as Float64Array,
    ...marks(header.columns.some((c) => c.name === "m_row") ? col : null, origin),
    bytes: buf.byteLength,
  };
}
