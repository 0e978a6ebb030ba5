// The Tables page: every kernel, CPU operator or annotation of the loaded profile with full names,
// sorted by a click on a header, filtered by a part of the name; a row's "timeline" button opens
// the Timeline on that name's occurrences (the first selected, ◀ ▶ for the others). The scope is
// the dashboard's (its filters live in the address: urlstate.ts); so do the table, sort and filter.
import { type Row, type Table, getTable } from "./api";
import { debounce, h } from "./dom";
import { describe, showError } from "./errors";
import { count, duration, pct } from "./format";
import { hooks } from "./hooks";
import { type Loaded, loaded, onLoadedChange } from "./loaded";
import { setView, viewOf } from "./urlstate";

type Kind = "kernels" | "operators" | "annotations";
const KINDS: { kind: Kind; label: string }[] = [
  { kind: "kernels", label: "GPU kernels" },
  { kind: "operators", label: "CPU operators" },
  { kind: "annotations", label: "Annotations" },
];
const LABELS: Record<string, string> = {
  name: "Name", kernel_type: "Type", launches: "Launches", calls: "Calls", count: "Count", total_ns: "Total",
  self_ns: "Self", mean_ns: "Mean", min_ns: "Min", p50_ns: "p50", p90_ns: "p90", p99_ns: "p99", max_ns: "Max",
  grid: "Grid", block: "Block", registers_per_thread: "Registers", occupancy_pct: "Occupancy", input_shapes: "Input shapes",
};  // prettier-ignore

export interface TablesState {
  kind: Kind;
  table: Table | null;
  sort: string;
  order: "asc" | "desc";
  filter: string;
  /** the rows shown, in order (names), and ms of the last sort + draw */
  shown: string[];
  sortMs: number;
}

function cell(column: string, value: Row[string]): string {
  if (value === null || value === undefined) return "–";
  if (typeof value === "number") {
    if (column.endsWith("_ns")) return duration(value);
    if (column.endsWith("_pct")) return pct(value);
    return count(value);
  }
  return String(value);
}

export function tablesPage(): { root: HTMLElement; setActive(on: boolean): void } {
  const state: TablesState = { kind: "kernels", table: null, sort: "total_ns", order: "desc", filter: "", shown: [], sortMs: 0 };
  (hooks as unknown as { tables: TablesState }).tables = state;
  let active = false;
  let ticket = 0;

  const picker = h("div", { class: "chips", role: "tablist", "aria-label": "Table" });
  const filter = h("input", { type: "search", id: "tables-filter", placeholder: "filter by name", "aria-label": "Filter by name", autocomplete: "off" });
  const info = h("span", { class: "muted", id: "tables-info" });
  const scopeNote = h("span", { class: "muted", id: "tables-scope" });
  const thead = h("thead");
  const tbody = h("tbody");
  const notes = h("ul", { class: "notes", id: "tables-notes" });
  const table = h("table", { class: "data-table", id: "tables-table" }, thead, tbody);
  const placeholder = h("div", { class: "placeholder" }, h("p", {}, "No profile loaded."), h("p", {}, h("a", { href: "#/jobs" }, "Open the Jobs page"), " and load a job."));
  const body = h("div", {}, h("div", { class: "toolbar" }, picker, filter, info, scopeNote), h("div", { class: "table-wrap" }, table), notes);
  const root = h("main", { class: "page tables-page", id: "tables", "data-state": "idle" }, placeholder, body);

  filter.addEventListener(
    "input",
    debounce(() => {
      state.filter = filter.value;
      draw();
    }, 150),
  );

  function save(): void {
    const l = loaded();
    if (!l) return;
    setView(l.profileId, {
      table: state.kind === "kernels" ? null : state.kind,
      sort: state.sort === "total_ns" ? null : state.sort,
      order: state.order === "desc" ? null : state.order,
      tf: state.filter || null,
    });
  }

  function drawPicker(): void {
    picker.replaceChildren(
      ...KINDS.map(({ kind, label }) =>
        h("button", { type: "button", role: "tab", class: kind === state.kind ? "" : "secondary", "aria-selected": String(kind === state.kind), "data-table": kind, onclick: () => void choose(kind) }, label),
      ),
    );
  }

  function draw(): void {
    const t0 = performance.now();
    const t = state.table;
    if (!t) return;
    const needle = state.filter.trim().toLowerCase();
    const rows = needle ? t.rows.filter((r) => String(r.name ?? "").toLowerCase().includes(needle)) : [...t.rows];
    const key = state.sort;
    const sign = state.order === "asc" ? 1 : -1;
    rows.sort((a, b) => {
      const x = a[key] ?? null;
      const y = b[key] ?? null;
      if (x === y) return 0;
      if (x === null) return 1; // blanks last either way
      if (y === null) return -1;
      return (typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y))) * sign;
    });
    thead.replaceChildren(
      h(
        "tr",
        {},
        t.columns.map((c) =>
          h(
            "th",
            {
              class: `sortable${c === key ? " sorted" : ""}`,
              "data-sort": c,
              "aria-sort": c === key ? (state.order === "asc" ? "ascending" : "descending") : "none",
              onclick: () => {
                if (state.sort === c) state.order = state.order === "asc" ? "desc" : "asc";
                else {
                  state.sort = c;
                  state.order = c === "name" || c === "kernel_type" ? "asc" : "desc";
                }
                draw();
              },
            },
            LABELS[c] ?? c,
            c === key ? (state.order === "asc" ? " ▲" : " ▼") : "",
          ),
        ),
        h("th", {}, ""),
      ),
    );
    tbody.replaceChildren(
      ...rows.map((r) =>
        h(
          "tr",
          { "data-name": String(r.name) },
          t.columns.map((c) => h("td", { class: typeof r[c] === "number" ? "num" : c === "name" ? "name full" : "", "data-col": c }, cell(c, r[c] ?? null))),
          h("td", {}, h("button", { type: "button", class: "secondary occurrences", title: "its occurrences on the timeline (◀ ▶: previous, next)", onclick: () => openOnTimeline(String(r.name)) }, "timeline ▸")),
        ),
      ),
    );
    state.shown = rows.map((r) => String(r.name));
    info.textContent = `${count(rows.length)} of ${count(t.rows.length)} ${state.kind === "kernels" ? "kernels" : state.kind === "operators" ? "operators" : "annotations"}`;
    state.sortMs = performance.now() - t0;
    save();
  }

  function openOnTimeline(name: string): void {
    const l = loaded();
    if (!l) return;
    setView(l.profileId, { q: name, exact: "1", sel: null, selrow: null });
    location.hash = "#/timeline";
  }

  async function choose(kind: Kind): Promise<void> {
    state.kind = kind;
    drawPicker();
    await fetchTable();
  }

  async function fetchTable(): Promise<void> {
    const l = loaded();
    if (!l) return;
    const mine = ++ticket;
    root.dataset.state = "loading";
    const v = viewOf(l.profileId);
    const parts = [
      v.getAll("node").length ? `node ${v.getAll("node").join(", ")}` : "",
      v.getAll("rank").length ? `rank${v.getAll("rank").length > 1 ? "s" : ""} ${v.getAll("rank").join(", ")}` : "",
      v.get("steps") ? `steps ${v.get("steps")?.replace(":", " to ")}` : "",
    ].filter(Boolean);
    scopeNote.textContent = `· ${parts.length ? parts.join(", ") : "the whole profile"} (the Dashboard's filters)`;
    try {
      const answer = await getTable(l.profileId, state.kind, { node: v.getAll("node"), rank: v.getAll("rank"), steps: v.get("steps") });
      if (mine !== ticket) return;
      state.table = answer;
      if (!answer.columns.includes(state.sort)) state.sort = answer.columns.includes("total_ns") ? "total_ns" : "name";
      notes.replaceChildren(...answer.notes.map((n) => h("li", {}, n)));
      draw();
      root.dataset.state = "ready";
    } catch (err) {
      if (mine !== ticket) return;
      root.dataset.state = "error";
      tbody.replaceChildren(h("tr", {}, h("td", { class: "error-inline" }, describe(err))));
      showError(err);
    }
  }

  function show(l: Loaded | null): void {
    placeholder.hidden = !!l;
    body.hidden = !l;
    if (!l) {
      root.dataset.state = "idle";
      return;
    }
    const v = viewOf(l.profileId);
    const kind = v.get("table");
    state.kind = kind === "operators" || kind === "annotations" ? kind : "kernels";
    state.sort = v.get("sort") ?? "total_ns";
    state.order = v.get("order") === "asc" ? "asc" : "desc";
    state.filter = filter.value = v.get("tf") ?? "";
    drawPicker();
    void fetchTable(); // the server keeps a finished profile's tables: a second look is a look-up
  }

  onLoadedChange((l) => {
    if (active) show(l);
  });
  return {
    root,
    setActive(on) {
      active = on;
      if (on) show(loaded());
    },
  };
}
