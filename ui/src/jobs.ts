// The Jobs page: every job, searched by name on the server, filtered by creation time (ISO dates,
// in a time zone the page states) and status, sorted by a click on a header; "Load" opens a job's
// newest profile in the dashboard.
import { type Job, type JobQuery, STATUSES, listJobs } from "./api";
import { debounce, h } from "./dom";
import { clearError, showError } from "./errors";
import { ISO_INPUT_HINT, bytes, count, datetime, duration, localZone, parseIsoInput } from "./format";
import { loaded, onLoadedChange, setLoaded } from "./loaded";
import { statusBadge } from "./status";

const REFRESH_MS = 3000;

type SortKey = JobQuery["sort"];
const COLUMNS: { label: string; sort: SortKey | null; title?: string }[] = [
  { label: "Name", sort: "name" },
  { label: "Created", sort: "created" },
  { label: "Status", sort: "status" },
  { label: "Nodes", sort: null },
  { label: "Ranks", sort: "ranks" },
  { label: "Events", sort: "events", title: "events of the newest profile" },
  { label: "Size", sort: "size", title: "the newest profile's size on disk" },
  { label: "Duration", sort: null, title: "the time span the newest profile traced" },
  { label: "Profiles", sort: null },
  { label: "", sort: null },
];
const ZONE_KEY = "hyperscope.jobs.tz";

function storedZone(): string | null {
  try {
    return localStorage.getItem(ZONE_KEY);
  } catch {
    return null;
  }
}

export interface JobsPage {
  root: HTMLElement;
  refresh(): Promise<void>;
  setActive(active: boolean): void;
}

export function jobsPage(onOpen: () => void): JobsPage {
  const q: JobQuery = { search: "", statuses: [], createdAfterNs: "", createdBeforeNs: "", sort: "created", order: "desc" };
  let active = false;
  let timer: number | undefined;
  let inflight: AbortController | null = null;
  let jobs: Job[] = [];

  const search = h("input", {
    type: "search",
    id: "job-search",
    placeholder: "Search jobs by name",
    "aria-label": "Search jobs by name",
    autocomplete: "off",
  });
  const dateInput = (id: string, label: string) =>
    h("input", { type: "text", id, class: "date-input", placeholder: "YYYY-MM-DD HH:MM:SS", "aria-label": label, autocomplete: "off", spellcheck: "false", inputmode: "numeric" });
  const after = dateInput("created-after", "Created after");
  const before = dateInput("created-before", "Created before");
  const dateError = h("span", { class: "error-inline", id: "jobs-date-error", role: "alert" });
  let utc = storedZone() === "utc";
  const zone = h(
    "select",
    { id: "jobs-tz", "aria-label": "Time zone of the dates" },
    h("option", { value: "local" }, localZone()),
    h("option", { value: "utc" }, "UTC"),
  );
  zone.value = utc ? "utc" : "local";
  const statusBoxes = STATUSES.map((s) => {
    const box = h("input", { type: "checkbox", value: s, "data-status-filter": s });
    box.addEventListener("change", () => {
      q.statuses = STATUSES.filter((_, i) => (statusBoxes[i]?.querySelector("input") as HTMLInputElement).checked);
      void refresh();
    });
    return h("label", { class: "chip" }, box, statusBadge(s));
  });
  const summary = h("span", { class: "muted", id: "jobs-total" });
  const thead = h("thead");
  const tbody = h("tbody");
  const table = h("table", { class: "jobs", id: "jobs-table" }, thead, tbody);

  search.addEventListener(
    "input",
    debounce(() => {
      q.search = search.value;
      void refresh();
    }, 250),
  );
  const dates = [
    [after, "createdAfterNs"],
    [before, "createdBeforeNs"],
  ] as const;
  /** Reads both date fields in the chosen zone; ``commit`` (Enter, leaving the field) also says
   * what is wrong with one that is no date, where typing only waits for a whole one. */
  function readDates(commit: boolean): void {
    const wrong: string[] = [];
    let changed = false;
    for (const [input, key] of dates) {
      const ns = parseIsoInput(input.value, utc);
      input.setAttribute("aria-invalid", String(ns === null));
      if (ns === null) {
        wrong.push(`"${input.value.trim()}"`);
        continue;
      }
      if (q[key] !== ns) {
        q[key] = ns;
        changed = true;
      }
    }
    if (!wrong.length) dateError.textContent = "";
    else if (commit) dateError.textContent = `${wrong.join(" and ")}: not a date; expected ${ISO_INPUT_HINT} (${zoneName()})`;
    if (changed) void refresh();
  }
  const zoneName = () => (utc ? "UTC" : localZone());
  for (const [input] of dates) {
    input.addEventListener("input", debounce(() => readDates(false), 400));
    input.addEventListener("change", () => readDates(true));
    input.addEventListener("keydown", (e: KeyboardEvent) => {
      if (e.key === "Enter") readDates(true);
    });
  }
  zone.addEventListener("change", () => {
    utc = zone.value === "utc";
    try {
      localStorage.setItem(ZONE_KEY, zone.value);
    } catch {
      /* storage disabled: the choice holds for this visit */
    }
    drawHead();
    drawRows();
    readDates(true);
  });

  function drawHead(): void {
    thead.replaceChildren(
      h(
        "tr",
        {},
        COLUMNS.map((c) => {
          const label = c.sort === "created" ? `${c.label} (${utc ? "UTC" : localZone()})` : c.label;
          if (!c.sort) return h("th", { title: c.title ?? null }, label);
          const key = c.sort;
          const sorted = q.sort === key;
          return h(
            "th",
            {
              class: `sortable${sorted ? " sorted" : ""}`,
              "data-sort": key,
              "aria-sort": sorted ? (q.order === "asc" ? "ascending" : "descending") : "none",
              title: c.title ?? null,
              onclick: () => {
                if (q.sort === key) q.order = q.order === "asc" ? "desc" : "asc";
                else {
                  q.sort = key;
                  q.order = key === "name" ? "asc" : "desc";
                }
                drawHead();
                void refresh();
              },
            },
            label,
            sorted ? (q.order === "asc" ? " ▲" : " ▼") : "",
          );
        }),
      ),
    );
  }

  function load(job: Job): void {
    if (!job.latest_profile) {
      showError(new Error(`job ${job.name} has no profile yet`));
      return;
    }
    clearError();
    setLoaded({ profileId: job.latest_profile, jobId: job.id, jobName: job.name, status: job.status });
    onOpen();
  }

  function drawRows(): void {
    const current = loaded();
    if (!jobs.length) {
      tbody.replaceChildren(
        h("tr", {}, h("td", { colspan: COLUMNS.length, class: "empty" }, "No jobs match. Import traces with `hyperscope import`, or profile a run with `hyperscope profile`.")),
      );
      return;
    }
    tbody.replaceChildren(
      ...jobs.map((job) => {
        const isLoaded = current?.jobId === job.id;
        return h(
          "tr",
          { "data-job": job.name, "data-job-id": job.id, class: isLoaded ? "loaded" : "", title: job.message || null },
          h("td", { class: "name" }, job.name),
          h("td", { "data-col": "created" }, datetime(job.created_ns, utc)),
          h("td", {}, statusBadge(job.status)),
          h(
            "td",
            { "data-col": "nodes" },
            job.nodes.length ? job.nodes.join(", ") : h("span", { class: "muted", title: job.profiles ? "the traces name no host (Kineto traces do not)" : "no profile yet" }, "not recorded"),
          ),
          h("td", { class: "num" }, job.ranks),
          h("td", { class: "num", "data-col": "events" }, job.profiles ? count(job.events) : "–"),
          h("td", { class: "num", "data-col": "size", title: job.profiles ? `${job.bytes.toLocaleString("en-US")} bytes on disk` : null }, job.profiles ? bytes(job.bytes) : "–"),
          h(
            "td",
            { class: "num", "data-col": "duration", title: job.duration_ns === null ? null : `${job.duration_ns.toLocaleString("en-US")} ns traced` },
            duration(job.duration_ns),
          ),
          h("td", { class: "num" }, job.profiles),
          h(
            "td",
            {},
            h(
              "button",
              {
                type: "button",
                class: "load",
                disabled: !job.latest_profile,
                "data-testid": "load-job",
                onclick: (e: Event) => {
                  e.stopPropagation();
                  load(job);
                },
              },
              isLoaded ? "Loaded" : "Load",
            ),
          ),
        );
      }),
    );
    for (const [i, row] of [...tbody.rows].entries()) {
      const job = jobs[i];
      if (job) row.addEventListener("click", () => load(job));
    }
  }

  async function refresh(): Promise<void> {
    window.clearTimeout(timer);
    inflight?.abort();
    const ctrl = new AbortController();
    inflight = ctrl;
    root.dataset.state = "loading";
    try {
      const answer = await listJobs(q, ctrl.signal);
      if (ctrl.signal.aborted) return;
      jobs = answer.jobs;
      summary.textContent =
        `${answer.total} job${answer.total === 1 ? "" : "s"}` +
        (answer.total > jobs.length ? ` (the first ${jobs.length} shown: narrow the search)` : "");
      drawRows();
      root.dataset.state = "ready";
      // A loaded job that is still running: keep its status in the bar current.
      const current = loaded();
      const mine = current && jobs.find((j) => j.id === current.jobId);
      if (current && mine && mine.status !== current.status) setLoaded({ ...current, status: mine.status });
    } catch (err) {
      if (ctrl.signal.aborted) return;
      root.dataset.state = "error";
      showError(err);
    } finally {
      if (inflight === ctrl) inflight = null;
      if (active && jobs.some((j) => j.status === "InProgress" || j.status === "Stopping")) {
        timer = window.setTimeout(() => void refresh(), REFRESH_MS);
      }
    }
  }

  const root = h(
    "main",
    { class: "page jobs-page", id: "jobs-page" },
    h(
      "div",
      { class: "toolbar" },
      search,
      h("label", { class: "field" }, "Created after", after),
      h("label", { class: "field" }, "before", before),
      h("label", { class: "field" }, "in", zone),
      dateError,
      h("div", { class: "chips", role: "group", "aria-label": "Status" }, statusBoxes),
      summary,
    ),
    table,
  );
  drawHead();
  onLoadedChange(drawRows);

  return {
    root,
    refresh,
    setActive(on: boolean) {
      active = on;
      if (on) void refresh();
      else window.clearTimeout(timer);
    },
  };
}
