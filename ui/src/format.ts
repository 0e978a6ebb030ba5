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

const pad = (n: number) => String(n).padStart(2, "0");

/** A wall-clock time from epoch nanoseconds, ISO order and 24-hour, in the browser's time zone
 * (or in UTC with ``utc``). */
export function datetime(ns: number, utc = false): string {
  if (!ns) return "–";
  const d = new Date(ns / 1e6);
  const [y, mo, day, hh, mm, ss] = utc
    ? [d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate(), d.getUTCHours(), d.getUTCMinutes(), d.getUTCSeconds()]
    : [d.getFullYear(), d.getMonth(), d.getDate(), d.getHours(), d.getMinutes(), d.getSeconds()];
  return `${y}-${pad(mo + 1)}-${pad(day)} ${pad(hh)}:${pad(mm)}:${pad(ss)}`;
}

/** The browser's time zone as the page states it: "Europe/Berlin (UTC+01:00)". */
export function localZone(): string {
  const name = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
  return `${name} (${utcOffset(new Date())})`;
}

export function utcOffset(at: Date): string {
  const minutes = -at.getTimezoneOffset();
  const sign = minutes < 0 ? "-" : "+";
  const abs = Math.abs(minutes);
  return `UTC${sign}${pad(Math.floor(abs / 60))}:${pad(abs % 60)}`;
}

export const ISO_INPUT_HINT = "YYYY-MM-DD, or YYYY-MM-DD HH:MM[:SS]";
const ISO_INPUT = /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2}))?)?$/;

/** Epoch ns (a decimal string, exact) of an ISO date or date and time typed in local time or UTC;
 * "" for an empty text; null for text that is no such date (2026-02-30, 12/01/2026, 25:00). */
export function parseIsoInput(text: string, utc: boolean): string | null {
  const value = text.trim();
  if (!value) return "";
  const m = ISO_INPUT.exec(value);
  if (!m) return null;
  const [y, mo, d, hh, mm, ss] = m.slice(1).map((part) => Number(part ?? 0)) as [number, number, number, number, number, number];
  const date = utc ? new Date(Date.UTC(y, mo - 1, d, hh, mm, ss)) : new Date(y, mo - 1, d, hh, mm, ss);
  const back = utc
    ? [date.getUTCFullYear(), date.getUTCMonth() + 1, date.getUTCDate(), date.getUTCHours(), date.getUTCMinutes(), date.getUTCSeconds()]
    : [date.getFullYear(), date.getMonth() + 1, date.getDate(), date.getHours(), date.getMinutes(), date.getSeconds()];
  // a day past the month's end, hour 25, or a local time skipped by a daylight-saving change
  if (back.join() !== [y, mo, d, hh, mm, ss].join()) return null;
  return (BigInt(date.getTime()) * 1_000_000n).toString();
}

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
