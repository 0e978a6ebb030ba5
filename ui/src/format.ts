// Units: every time from the API is in integer nanoseconds; the UI shows ms or µs.

export function duration(ns: number | null | undefined): string {
  if (ns === null || ns === undefined || !Number.isFinite(ns)) return "–";
  const abs = Math.abs(ns);
  if (abs >= 1e9) return `${num(ns / 1e9, 3)} s`;
  if (abs >= 1e6) return `${num(ns / 1e6, 3)} ms`;
  if (abs >= 1e3) return `${num(ns / 1e3, 2)} µs`;
  return `${num(ns, 0)} ns`;
}

/** Milliseconds with up to 3 decimals: the unit of most axes. */
export function ms(ns: number): string {
  return `${num(ns / 1e6, 3)} ms`;
}

export function pct(value: number | null | undefined, digits = 2): string {
  if (value === null || value === undefined || !Number.isFinite(value)) return "–";
  return `${num(value, digits)} %`;
}

export function count(value: number): string {
  return num(value, 0);
}

export function bytes(value: number): string {
  const units = ["B", "KB", "MB", "GB", "TB"];
  let v = value;
  let i = 0;
  while (Math.abs(v) >= 1000 && i < units.length - 1) {
    v /= 1000;
    i += 1;
  }
  return `${num(v, i === 0 ? 0 : 2)} ${units[i]}`;
}

export function num(value: number, digits: number): string {
  return value.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: 0 });
}

/** A wall-clock time from epoch nanoseconds, in the browser's time zone. */
export function datetime(ns: number): string {
  if (!ns) return "–";
  const d = new Date(ns / 1e6);
  const pad = (n: number) => String(n).padStart(2, "0");
  return (
    `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`
  );
}

/** Epoch ns (as a decimal string, exact) from a datetime-local input's value, or "" when empty. */
export function localInputToNs(value: string): string {
  if (!value) return "";
  const msValue = new Date(value).getTime();
  if (!Number.isFinite(msValue)) return "";
  return (BigInt(Math.round(msValue)) * 1_000_000n).toString();
}

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
