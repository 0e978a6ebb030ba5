// Range selection (Perfetto's area selection): shift+drag on the events, or a drag on the ruler,
// marks a time range; the details panel then shows its statistics for the rows shown, per row and
// per kind (events, time inside the range, busy %, the names taking the most), with a button
// that zooms to the range. Esc or a click clears it.
import { h } from "../dom";
import { showError } from "../errors";
import { getRange, type TlRange } from "./data";
import { fmtDuration } from "./draw";
import { GUTTER, RULER } from "./geometry";
import { state } from "./state";

export interface RangeHost {
  canvas: HTMLCanvasElement;
  details: HTMLElement;
  /** the leaf rows shown (their statistics are asked for) and each row's label */
  rows(): string[];
  label(id: string): string;
  setView(t0: number, t1: number): void;
  redraw(): void;
}

export interface RangeSelection {
  /** a drag from canvas x0 to x1; ``done`` on the mouse's release */
  drag(x0: number, x1: number, done: boolean): void;
  /** the band over the range, drawn after each frame */
  overlay(ctx: CanvasRenderingContext2D): void;
  clear(): boolean;
}

export function rangeSelection(host: RangeHost): RangeSelection {
  let ticket = 0;
  const timeAt = (x: number): number => {
    const w = host.canvas.clientWidth - GUTTER;
    const f = Math.min(1, Math.max(0, (x - GUTTER) / w));
    return state.t0 + f * (state.t1 - state.t0);
  };
  const abs = (t: number): bigint => state.origin + BigInt(Math.round(t));

  async function fetchStats(t0: number, t1: number): Promise<void> {
    const profile = state.profile;
    if (!profile) return;
    const mine = ++ticket;
    state.rangeStats = null;
    host.details.replaceChildren(h("p", { class: "muted" }, `range ${fmtDuration(t1 - t0)}: counting…`));
    try {
      const answer = await getRange(profile, host.rows(), abs(t0), abs(t1));
      if (mine !== ticket || !state.range) return;
      state.rangeStats = answer;
      render(answer, t0, t1);
    } catch (err) {
      if (mine === ticket) showError(err);
    }
  }

  function render(r: TlRange, t0: number, t1: number): void {
    const kinds = (k: TlRange["kinds"]): string => k.map((x) => `${x.kind} ${x.count.toLocaleString()} · ${fmtDuration(x.total_ns)}`).join("; ") || "–";
    const top = (list: TlRange["top"]): HTMLElement =>
      h("ol", { class: "tl-range-top" }, list.map((t) => h("li", { title: t.name }, `${t.name} — ${fmtDuration(t.total_ns)} (${t.count.toLocaleString()})`)));
    host.details.replaceChildren(
      h(
        "div",
        { class: "tl-range", id: "tl-range" },
        h("h3", {}, `Range ${fmtDuration(t1 - t0)}`),
        h("p", {}, `${r.count.toLocaleString()} events over ${r.rows.length} rows, ${fmtDuration(r.total_ns)} inside the range (nested events counted in full)`),
        h("p", { class: "muted" }, kinds(r.kinds)),
        h("button", { type: "button", id: "tl-range-zoom", onclick: () => host.setView(t0, t1) }, "Zoom to range"),
        h("button", { type: "button", class: "secondary", id: "tl-range-clear", onclick: () => clear() }, "Clear"),
        h("h4", {}, "Top names"),
        top(r.top),
        h(
          "table",
          { class: "tl-range-rows" },
          h("thead", {}, h("tr", {}, ["Row", "Events", "Busy", "Busy %", "Kinds"].map((c) => h("th", {}, c)))),
          h(
            "tbody",
            {},
            r.rows.map((row) =>
              h(
                "tr",
                { "data-row": row.id, title: row.top.map((t) => `${t.name}: ${fmtDuration(t.total_ns)}`).join("\n") || null },
                h("td", {}, `rank ${row.rank} · ${host.label(row.id)}`),
                h("td", { class: "num" }, row.count.toLocaleString()),
                h("td", { class: "num" }, fmtDuration(row.busy_ns)),
                h("td", { class: "num" }, `${row.busy_pct.toFixed(1)} %`),
                h("td", {}, kinds(row.kinds)),
              ),
            ),
          ),
        ),
      ),
    );
  }

  function clear(): boolean {
    if (!state.range) return false;
    state.range = null;
    state.rangeStats = null;
    ticket += 1;
    host.details.replaceChildren(h("p", { class: "muted" }, "Click an event."));
    host.redraw();
    return true;
  }

  return {
    drag(x0, x1, done) {
      const a = timeAt(Math.min(x0, x1));
      const b = timeAt(Math.max(x0, x1));
      if (b - a <= 0) return;
      state.range = [a, b];
      host.redraw();
      if (done) void fetchStats(a, b);
    },
    overlay(ctx) {
      if (!state.range) return;
      const w = host.canvas.clientWidth - GUTTER;
      const x = (t: number): number => GUTTER + ((t - state.t0) / (state.t1 - state.t0)) * w;
      const x0 = Math.max(GUTTER, x(state.range[0]));
      const x1 = Math.min(host.canvas.clientWidth, x(state.range[1]));
      if (x1 <= x0) return;
      ctx.save();
      ctx.fillStyle = "rgba(37, 99, 235, 0.12)";
      ctx.fillRect(x0, 0, x1 - x0, host.canvas.clientHeight);
      ctx.fillStyle = "rgba(37, 99, 235, 0.8)";
      ctx.fillRect(x0, 0, 1, host.canvas.clientHeight);
      ctx.fillRect(x1 - 1, 0, 1, host.canvas.clientHeight);
      ctx.font = "11px system-ui, sans-serif";
      ctx.fillText(fmtDuration(state.range[1] - state.range[0]), x0 + 4, RULER - 4);
      ctx.restore();
    },
    clear,
  };
}
