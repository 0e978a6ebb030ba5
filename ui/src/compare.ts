// The Compare tab: two profiles (or one profile's two ranks, or two step ranges) side by side, from
// GET /api/compare (docs/ui-api.md): the summary line, the steps of each run aligned step by step,
// and the tables of hyperscope.analysis.compare.
import { type Job, listJobs, query, type Row, type Table } from "./api";
import { clear, h } from "./dom";
import { showError } from "./errors";
import { type AlignedPair, stackedTimelines } from "./compareTimeline";
import { bytes, duration, num, pct } from "./format";
import { loaded } from "./loaded";
import "./compare.css";

export interface Comparison {
  labels: [string, string];
  summary: Row & { line: string };
  tables: Record<string, Table>;
}

const SHOWN: [string, string[]][] = [
  ["steps", ["group", "steps", "mean_ns", "p50_ns", "p90_ns", "min_ns", "max_ns"]],
  ["gpu_time", ["metric", "a", "b", "delta", "a_per_step", "b_per_step", "delta_per_step"]],
  ["kernels", ["name", "match", "launches_a", "launches_b", "mean_a_ns", "mean_b_ns", "delta_total_ns", "delta_per_step_ns", "share_pct"]],
  ["operators", ["name", "match", "launches_a", "launches_b", "mean_a_ns", "mean_b_ns", "delta_per_step_ns", "share_pct"]],
  ["memory", ["metric", "a", "b", "delta"]],
  ["collectives", ["collective", "launches_a", "launches_b", "total_a_ns", "total_b_ns", "wait_a_ns", "wait_b_ns", "delta_per_step_ns", "delta_wait_per_step_ns"]],
];
const MAX_ROWS = 25;

async function getComparison(params: Record<string, string | number[] | null>): Promise<Comparison> {
  const response = await fetch(`/api/compare${query(params)}`, { headers: { Accept: "application/json" } });
  const body: unknown = await response.json();
  if (!response.ok) throw new Error(String((body as { detail?: unknown }).detail ?? response.statusText));
  return body as Comparison;
}

function cell(column: string, value: Row[string] | undefined, unit: string | null): string {
  if (value === null || value === undefined) return "–";
  if (typeof value === "boolean") return value ? "yes" : "";
  if (typeof value !== "number") return String(value);
  const timeLike = column.endsWith("_ns") || (unit === "ns" && /^(a|b|delta)(_per_step)?$/.test(column));
  if (timeLike) return duration(value);
  if (unit === "bytes") return bytes(value);
  if (column.endsWith("_pct") || unit === "%") return pct(value);
  return num(value, 2);
}

function tableView(key: string, table: Table, columns: string[]): HTMLElement {
  const rows = table.rows.slice(0, MAX_ROWS);
  return h(
    "section",
    { class: "panel compare-table", "data-table": key },
    h("h3", {}, table.title),
    h(
      "table",
      { class: "data" },
      h("thead", {}, h("tr", {}, columns.map((c) => h("th", {}, c)))),
      h(
        "tbody",
        {},
        rows.map((r) =>
          h("tr", {}, columns.map((c) => h("td", { title: String(r[c] ?? "") }, cell(c, r[c], (r.unit as string) ?? null)))),
        ),
      ),
    ),
    table.rows.length > MAX_ROWS ? h("p", { class: "muted" }, `${table.rows.length - MAX_ROWS} more rows in the API's answer`) : null,
    table.notes.map((n) => h("p", { class: "muted note" }, n)),
  );
}

function pairOf(r: Row): AlignedPair {
  return { index: Number(r.index), stepA: (r.step_a as number | null) ?? null, stepB: (r.step_b as number | null) ?? null };
}

/** Both runs' steps as bars on one scale, step i of A above step i of B; a click on a bar aligns
 * that step pair in the stacked timelines. */
function stepStrip(table: Table, labels: [string, string], onPick: (pair: AlignedPair) => void): HTMLElement {
  const rows = table.rows;
  const longest = Math.max(1, ...rows.flatMap((r) => [Number(r.dur_a_ns ?? 0), Number(r.dur_b_ns ?? 0)]));
  const lane = (side: "a" | "b", label: string): HTMLElement =>
    h(
      "div",
      { class: "step-lane", "data-side": side },
      h("span", { class: "step-lane-label" }, label),
      h(
        "div",
        { class: "step-lane-bars" },
        rows.map((r) => {
          const dur = r[`dur_${side}_ns`] as number | null;
          const step = r[`step_${side}`] as number | null;
          return h("div", {
            class: `step-bar step-bar-${side}`,
            "data-index": Number(r.index),
            "data-step": step ?? "",
            title: dur === null ? "no step" : `step ${step}: ${duration(dur)}`,
            style: `height:${dur === null ? 0 : Math.max(2, (60 * dur) / longest)}px`,
            onclick: () => onPick(pairOf(r)),
          });
        }),
      ),
    );
  return h(
    "section",
    { class: "panel", "data-table": "step_pairs" },
    h("h3", {}, table.title),
    lane("a", labels[0]),
    lane("b", labels[1]),
    table.notes.map((n) => h("p", { class: "muted note" }, n)),
  );
}

interface SideControls {
  root: HTMLElement;
  params(): Record<string, string | number[] | null>;
}

function sideControls(name: "a" | "b", jobs: Job[]): SideControls {
  const select = h(
    "select",
    { "data-compare": `profile-${name}` },
    name === "b" ? h("option", { value: "" }, "same as A") : null,
    jobs.filter((j) => j.latest_profile).map((j) => h("option", { value: j.latest_profile as string }, `${j.name} (${j.latest_profile})`)),
  );
  const current = loaded();
  if (name === "a" && current) select.value = current.profileId;
  const ranks = h("input", { "data-compare": `rank-${name}`, placeholder: "all ranks, or 0,3", size: 10 });
  const rankList = (): number[] => ranks.value.split(/[\s,]+/).filter(Boolean).map(Number);
  const steps = h("input", { "data-compare": `steps-${name}`, placeholder: "all steps, or 3:7", size: 10 });
  return {
    root: h("fieldset", { class: "compare-side" }, h("legend", {}, name.toUpperCase()), select, " ranks ", ranks, " steps ", steps),
    params() {
      const list = rankList();
      return {
        [name]: select.value || null,
        [`rank_${name}`]: list.length ? list : null,
        [`steps_${name}`]: steps.value.trim() || null,
      };
    },
  };
}

export function comparePage(): { root: HTMLElement; setActive(on: boolean): void } {
  const controls = h("div", { class: "compare-controls" });
  const summary = h("p", { class: "compare-summary", "data-compare": "summary" });
  const results = h("div", { class: "compare-results" });
  const root = h("main", { class: "page compare-page" }, h("h2", {}, "Compare"), controls, summary, results);
  let built = false;

  async function build(): Promise<void> {
    built = true;
    const jobs = (await listJobs({ search: "", statuses: [], createdAfterNs: "", createdBeforeNs: "", sort: "created", order: "desc" })).jobs;
    const a = sideControls("a", jobs);
    const b = sideControls("b", jobs);
    const run = h("button", { type: "button", "data-compare": "run" }, "Compare");
    run.addEventListener("click", () => void show({ ...a.params(), ...b.params() }));
    clear(controls, a.root, b.root, run);
  }

  async function show(params: Record<string, string | number[] | null>): Promise<void> {
    if (!params.a) {
      showError(new Error("choose profile A (load one from Jobs, or pick it here)"));
      return;
    }
    clear(summary, "comparing…");
    clear(results);
    try {
      const c = await getComparison(params);
      clear(summary, c.summary.line);
      const s = c.summary;
      const details = h(
        "p",
        { class: "muted" },
        `A = ${c.labels[0]}, B = ${c.labels[1]}; median step ${duration(s.median_a_ns as number | null)} → ${duration(s.median_b_ns as number | null)}; ${String(s.test)}`,
      );
      const pairs = c.tables.step_pairs;
      const profileA = String(params.a);
      // the sides as asked (not as the controls read now: they may have changed meanwhile)
      const ranksOf = (v: string | number[] | null | undefined): number[] | null => (Array.isArray(v) ? v : null);
      const timelines = stackedTimelines(
        [
          { side: "a", label: c.labels[0], profile: profileA, ranks: ranksOf(params.rank_a) },
          { side: "b", label: c.labels[1], profile: typeof params.b === "string" ? params.b : profileA, ranks: ranksOf(params.rank_b) },
        ],
        pairs?.rows[0] ? pairOf(pairs.rows[0]) : null,
      );
      clear(
        results,
        details,
        (c.tables.summary?.notes ?? []).map((n) => h("p", { class: "muted note" }, n)),
        pairs ? stepStrip(pairs, c.labels, (pair) => timelines.align(pair)) : null,
        timelines.root,
        SHOWN.map(([key, columns]) => {
          const table = c.tables[key];
          return table ? tableView(key, table, columns) : null;
        }),
      );
    } catch (err) {
      clear(summary);
      showError(err);
    }
  }

  return {
    root,
    setActive(on: boolean) {
      if (on && !built) build().catch((err: unknown) => showError(err));
    },
  };
}
