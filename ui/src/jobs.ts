// The Jobs page: every job, searched by name on the server, filtered by creation time and status,
// sorted by a click on a header; "Load" opens a job's newest profile in the dashboard.
import { type Job, type JobQuery, STATUSES, listJobs } from "./api";
import { debounce, h } from "./dom";
import { clearError, showError } from "./errors";
import { datetime, localInputToNs } from "./format";
import { loaded, onLoadedChange, setLoaded } from "./loaded";
import { statusBadge } from "./status";

const REFRESH_MS = 3000;

type SortKey = JobQuery["sort"];
const COLUMNS: { label: string; sort: SortKey | null }[] = [
  { label: "Name", sort: "name" },
  { label: "Created", sort: "created" },
  { label: "Status", sort: "status" },
  { label: "Nodes", sort: null },
  { label: "Ranks", sort: "ranks" },
  { label: "Profiles", sort: null },
  { label: "", sort: null },
];

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
  const after = h("input", { type: "datetime-local", id: "created-after", step: 1, "aria-label": "Created after" });
  const before = h("input", { type: "datetime-local", id: "created-before", step: 1, "aria-label": "Created before" });
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
  for (const [input, key] of [
    [after, "createdAfterNs"],
    [before, "createdBeforeNs"],
  ] as const) {
    input.addEventListener("change", () => {
      q[key] = localInputToNs(input.value);
      void refresh();
    });
  }

  function drawHead(): void {
    thead.replaceChildren(
      h(
        "tr",
        {},
        COLUMNS.map((c) => {
          if (!c.sort) return h("th", {}, c.label);
          const key = c.sort;
          const sorted = q.sort === key;
          return h(
            "th",
            {
              class: `sortable${sorted ? " sorted" : ""}`,
              "data-sort": key,
              "aria-sort": sorted ? (q.order === "asc" ? "ascending" : "descending") : "none",
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
            c.label,
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
          h("td", {}, datetime(job.created_ns)),
          h("td", {}, statusBadge(job.status)),
          h("td", {}, job.nodes.join(", ")),
          h("td", { class: "num" }, job.ranks),
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
