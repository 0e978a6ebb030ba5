// Colours of the timeline: a stable one per event name, and the busyness scale of merged columns.

export const BUSY_LEVELS = 16;
/** Merged columns' colours, pale (a few short events) to dark (busy all the column), as pixels
 * (RGBA bytes of a little-endian Uint32, for ImageData): hsl(25 80% 77-34%). */
export const BUSY_PIXELS = Uint32Array.from({ length: BUSY_LEVELS }, (_, k) => {
  const [r, g, b] = hslToRgb(25, 0.8, (78 - (45 * (k + 0.5)) / BUSY_LEVELS) / 100);
  return ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0;
});

function hslToRgb(h: number, s: number, l: number): [number, number, number] {
  const a = s * Math.min(l, 1 - l);
  const f = (n: number): number => {
    const k = (n + h / 30) % 12;
    return Math.round(255 * (l - a * Math.max(-1, Math.min(k - 3, 9 - k, 1))));
  };
  return [f(0), f(8), f(4)];
}

function hash(text: string): number {
  let h = 2166136261;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619);
  return h >>> 0;
}

const colorCache = new Map<string, string>();
/** A stable colour per name; kernels warm, host calls cool, NCCL collectives red, instants blue. */
export function nameColor(name: string, kind: string): string {
  const key = `${kind}|${name}`;
  let c = colorCache.get(key);
  if (c) return c;
  const hh = hash(name);
  let hue: number;
  if (/nccl|AllReduce|AllGather|ReduceScatter|SendRecv|Broadcast/i.test(name)) hue = 0;
  else if (kind === "instant") hue = 220 + (hh % 40);
  else if (kind === "kernel") hue = 20 + (hh % 60);
  else if (kind === "memcpy" || kind === "memset") hue = 280 + (hh % 30);
  else if (kind === "runtime" || kind === "driver") hue = 190 + (hh % 40);
  else if (kind === "step") hue = 120;
  else hue = 90 + (hh % 90);
  c = kind === "instant" ? `hsl(${hue} 70% ${38 + (hh % 12)}%)` : `hsl(${hue} 60% ${52 + (hh % 12)}%)`;
  colorCache.set(key, c);
  return c;
}
