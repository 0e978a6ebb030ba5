// The dashboard of the loaded profile: a filter bar (node, rank, steps), every chart of the
// analysis tables, and the custom annotation charts. Running jobs are re-queried every few seconds.
import { type Filters, type Scope, getDashboard, getFilters, getJob } from "./api";
import { customCharts } from "./annotations";
import { type Card, card, disposeAll, render } from "./charts";
import { h } from "./dom";
import { clearError, describe, showError } from "./errors";
import { hooks } from "./hooks";
import { type Loaded, loaded, onLoadedChange, setLoaded } from "./loaded";
import { cpuTime, cpuUtilization } from "./panels/cpu";
import { gpuActivity, gpuTime, gpuUtilization, gpuUtilizationNodes, memoryOps, precision } from "./panels/gpu";
import { kernelLaunches, kernelTime } from "./panels/kernels";
import { latencyHistogram, ranks, stepHistogram } from "./panels/steps";
import { idleCauses, kernelTypes, latencyOutliers, stragglers } from "./panels/answers";
import { memoryView } from "./panels/memory";
import { waitsView } from "./panels/waits";
import type { Panel } from "./panels/types";
import { setView, viewOf } from "./urlstate";

const REFRESH_MS = 5000;
const DEFAULT_TOP_K = 15;

const SECTIONS: { title: string; panels: Panel[] }[] = [
  { title: "GPU", panels: [gpuTime, idleCauses, kernelTypes, gpuActivity, memoryOps, precision, gpuUtilizationNodes, gpuUtilization] },
  { title: "Kernels", panels: [kernelTime, kernelLaunches, latencyHistogram, latencyOutliers] },
  { title: "Steps and ranks", panels: [stepHistogram, ranks, stragglers] },
  { title: "CPU", panels: [cpuTime, cpuUtilization] },
];

export interface DashboardPage {
  root: HTMLElement;
  setActive(active: boolean): void;
}

export function dashboardPage(): DashboardPage {
  let active = false;
  let profileId: string | null = null;
  let filters: Filters | null = null;
  let scope: Scope = { nodes: [], ranks: [], steps: null, topK: DEFAULT_TOP_K };
  let generation = 0;
  let timer: number | undefined;
  let inflight: AbortController | null = null;

  const cards = new Map<string, Card>();
  const sections = SECTIONS.map((s) =>
    h(
      "section",
      { class: "dash-section" },
      h("h2", {}, s.title),
      h(
        "div",
        { class: "grid" },
        s.panels.map((p) => {
          const c = card(p.name, p.title, p.wide ? "wide" : "");
          cards.set(p.name, c);
          return c.root;
        }),
      ),
    ),
  );

  // top k, in the kernel chart's header
  const topK = h("input", { type: "number", id: "top-k", min: 1, max: 200, value: DEFAULT_TOP_K, "aria-label": "top k kernels" });
  topK.addEventListener("change", () => {
    const k = Math.max(1, Math.min(200, Math.round(Number(topK.value)) || DEFAULT_TOP_K));
    topK.value = String(k);
    scope = { ...scope, topK: k };
    void refresh();
  });
  cards.get("kernels")?.tools.append(h("label", { class: "field" }, "top k", topK));

  // filter bar
  const nodeSel = h("select", { id: "filter-node", "aria-label": "Node" });
  // several ranks at once (ctrl/shift-click); none chosen: every rank of the node chosen
  const rankSel = h("select", { id: "filter-rank", "aria-label": "Ranks", multiple: true, size: 3, title: "none chosen: all ranks; ctrl- or shift-click for several" });
  const stepFrom = h("input", { type: "number", id: "filter-step-from", "aria-label": "First step", min: 0 });
  const stepTo = h("input", { type: "number", id: "filter-step-to", "aria-label": "Last step", min: 0 });
  const scopeText = h("span", { class: "muted", id: "scope-text" });
  const filterError = h("span", { class: "error-inline", id: "filter-error", role: "alert", hidden: true });
  const apply = h("button", { type: "button", id: "filter-apply" }, "Apply");
  const reset = h("button", { type: "button", id: "filter-reset", class: "secondary" }, "Reset");
  const filterBar = h(
    "form",
    { class: "filter-bar", id: "filter-bar", onsubmit: (e: Event) => e.preventDefault() },
    h("label", { class: "field" }, "Node", nodeSel),
    h("label", { class: "field" }, "Ranks", rankSel),
    h("label", { class: "field" }, "Steps", stepFrom, "to", stepTo),
    apply,
    reset,
    scopeText,
    filterError,
  );
  apply.addEventListener("click", () => {
    const read = readFilters();
    if ("error" in read) {
      filterError.textContent = read.error;
      filterError.hidden = false;
      return;
    }
    filterError.hidden = true;
    scope = { ...scope, ...read };
    void refresh();
  });
  nodeSel.addEventListener("change", () => fillRanks());
  reset.addEventListener("click", () => {
    fillFilters();
    scope = { nodes: [], ranks: [], steps: null, topK: scope.topK };
    void refresh();
  });

  const custom = customCharts(() => (profileId ? { profileId, scope } : null));
  const memory = memoryView();
  const waits = waitsView();
  const status = h("div", { class: "dash-status", id: "dash-status" });
  const body = h("div", { class: "dash-body" }, filterBar, status, ...sections, waits.root, memory.root, custom.root);
  const placeholder = h(
    "div",
    { class: "placeholder", id: "dash-placeholder" },
    h("p", {}, "No profile loaded."),
    h("p", {}, h("a", { href: "#/jobs" }, "Open the Jobs page"), " and load a job to see its dashboard."),
  );
  const root = h("main", { class: "page dashboard-page", id: "dashboard", "data-state": "idle" }, placeholder, body);

  /** The filters chosen, or what is wrong with them in the words the user typed. */
  function readFilters(): Pick<Scope, "nodes" | "ranks" | "steps"> | { error: string } {
    const nodes = nodeSel.value ? [nodeSel.value] : [];
    const ranksPicked = [...rankSel.selectedOptions].map((o) => Number(o.value));
    let steps: Scope["steps"] = null;
    const from = stepFrom.value.trim();
    const to = stepTo.value.trim();
    const bounds = filters?.steps;
    for (const [what, text] of [["first", from], ["last", to]] as const) {
      if (text !== "" && !/^\d+$/.test(text)) return { error: `Steps: the ${what} step "${text}" is not a step number (a whole number, e.g. 3).` };
    }
    if (from !== "" || to !== "") {
      const a = from !== "" ? Number(from) : (bounds?.min ?? 0);
      const b = to !== "" ? Number(to) : (bounds?.max ?? a);
      if (b < a) {
        const typed = from !== "" && to !== "" ? `"${from}" to "${to}"` : from !== "" ? `from "${from}"` : `to "${to}"`;
        const last = to !== "" ? `the last step, ${to},` : `the profile's last step, ${b},`;
        return { error: `Steps ${typed}: ${last} is before the first, ${a}.` };
      }
      // the whole range is "all steps": leave it out so the span stays the profile's
      if (!(bounds && a === bounds.min && b === bounds.max)) steps = { from: a, to: b };
    }
    return { nodes, ranks: ranksPicked, steps };
  }

  /** The ranks offered: those of the node chosen (every rank with none), keeping those picked. */
  function fillRanks(): void {
    const f = filters;
    const node = nodeSel.value;
    const picked = new Set([...rankSel.selectedOptions].map((o) => o.value));
    const of = (r: number): string[] => f?.rank_nodes?.[String(r)] ?? [];
    const offered = (f?.ranks ?? []).filter((r) => !node || !f?.rank_nodes || of(r).includes(node));
    rankSel.replaceChildren(
      ...offered.map((r) => {
        const nodesOf = of(r).filter((n) => n !== "");
        const label = !node && nodesOf.length ? `rank ${r} (${nodesOf.join(", ")})` : `rank ${r}`;
        return h("option", { value: String(r), selected: picked.has(String(r)) }, label);
      }),
    );
  }

  function fillFilters(): void {
    const f = filters;
    nodeSel.replaceChildren(h("option", { value: "" }, "All nodes"), ...(f?.nodes ?? []).filter((n) => n !== "").map((n) => h("option", { value: n }, n)));
    rankSel.replaceChildren();
    fillRanks();
    filterError.hidden = true;
    stepFrom.value = "";
    stepTo.value = "";
    const steps = f?.steps;
    stepFrom.placeholder = steps ? String(steps.min) : "–";
    stepTo.placeholder = steps ? String(steps.max) : "–";
    stepFrom.disabled = stepTo.disabled = !steps;
    custom.setAnnotations(f?.annotations ?? []);
  }

  /** A bar of the kernel charts takes the Timeline to that kernel's occurrences (as a row of
   * the Tables page does); the "(all N kernels)" bar stands for no one name. */
  const linked = new WeakSet<object>();
  function linkBars(id: string): void {
    for (const name of ["kernels", "kernel_launches"]) {
      const chart = hooks.charts[name];
      if (!chart || linked.has(chart)) continue;
      linked.add(chart);
      chart.on("click", (p: { name?: string }) => {
        const kernel = p.name ?? "";
        if (!kernel || kernel.startsWith("(all ")) return;
        setView(id, { q: kernel, exact: "1", sel: null, selrow: null });
        location.hash = "#/timeline";
      });
    }
  }

  /** The scope a link gives (node, rank…, steps A:B, k), else the defaults. */
  function linkedScope(id: string): Scope {
    const v = viewOf(id);
    const steps = /^(\d+):(\d+)$/.exec(v.get("steps") ?? "");
    const k = Number(v.get("k"));
    return {
      nodes: v.getAll("node").filter((n) => n !== ""),
      ranks: v.getAll("rank").filter((r) => /^\d+$/.test(r)).map(Number),
      steps: steps ? { from: Number(steps[1]), to: Number(steps[2]) } : null,
      topK: Number.isInteger(k) && k >= 1 && k <= 200 ? k : scope.topK,
    };
  }

  /** The filter bar shows the scope in force (after a link set it). */
  function showScope(): void {
    nodeSel.value = scope.nodes[0] ?? "";
    fillRanks();
    const picked = new Set(scope.ranks.map(String));
    for (const o of rankSel.options) o.selected = picked.has(o.value);
    stepFrom.value = scope.steps ? String(scope.steps.from) : "";
    stepTo.value = scope.steps ? String(scope.steps.to) : "";
    topK.value = String(scope.topK);
  }

  function describeScope(): string {
    const parts = [
      scope.nodes.length ? `node ${scope.nodes.join(", ")}` : "all nodes",
      scope.ranks.length ? `rank${scope.ranks.length > 1 ? "s" : ""} ${scope.ranks.join(", ")}` : "all ranks",
      scope.steps ? `steps ${scope.steps.from} to ${scope.steps.to}` : "all steps",
    ];
    return `Showing ${parts.join(", ")}.`;
  }

  async function open(l: Loaded | null): Promise<void> {
    generation += 1;
    const mine = generation;
    inflight?.abort();
    window.clearTimeout(timer);
    disposeAll();
    custom.clear();
    hooks.dashboard = null;
    profileId = l?.profileId ?? null;
    filters = null;
    scope = l ? linkedScope(l.profileId) : { nodes: [], ranks: [], steps: null, topK: scope.topK };
    if (!l) {
      root.dataset.state = "idle";
      hooks.state = "idle";
      placeholder.hidden = false;
      body.hidden = true;
      return;
    }
    placeholder.hidden = true;
    body.hidden = false;
    root.dataset.state = "loading";
    hooks.state = "loading";
    // The filter bar's choices and the dashboard itself are fetched at once: the first render
    // needs only the default scope.
    fillFilters();
    showScope();
    const filtersReady = getFilters(l.profileId).then(
      (f) => {
        if (mine !== generation) return;
        filters = f;
        fillFilters();
        showScope();
      },
      (err: unknown) => {
        if (mine === generation) showError(err);
      },
    );
    await Promise.all([refresh(), filtersReady]);
  }

  function failed(err: unknown): void {
    root.dataset.state = "error";
    hooks.state = "error";
    status.replaceChildren(h("p", { class: "error-inline", role: "alert" }, describe(err)));
    showError(err);
  }

  async function refresh(): Promise<void> {
    const id = profileId;
    if (!id) return;
    const mine = generation;
    window.clearTimeout(timer);
    inflight?.abort();
    const ctrl = new AbortController();
    inflight = ctrl;
    root.dataset.state = "loading";
    hooks.state = "loading";
    status.replaceChildren(h("span", { class: "muted" }, "Querying…"));
    const t0 = performance.now();
    // the memory view, the collectives' waits and the added charts are asked at once with the
    // dashboard (not after it: at 10M events they held the first render up by 1-2 s); each
    // draws when its answer comes, and a later scope's answers win
    const side = Promise.all([custom.refresh(id, scope), memory.refresh(id, scope), waits.refresh(id, scope)]);
    try {
      const answer = await getDashboard(id, scope, ctrl.signal);
      if (ctrl.signal.aborted || mine !== generation) return;
      const t1 = performance.now();
      hooks.dashboard = answer;
      for (const section of SECTIONS) {
        for (const panel of section.panels) {
          const c = cards.get(panel.name);
          if (!c) continue;
          const notes = panel.notes.flatMap((t) => answer.tables[t]?.notes ?? []);
          render(panel.name, c, panel.build(answer.tables), notes);
        }
      }
      linkBars(id);
      const sideErrors = await side;
      if (mine !== generation) return;
      // wait for the browser to paint what ECharts drew
      await new Promise((r) => requestAnimationFrame(() => r(null)));
      const t2 = performance.now();
      hooks.timings = { fetch_ms: t1 - t0, render_ms: t2 - t1, total_ms: t2 - t0 };
      status.replaceChildren(
        h("span", { class: "muted" }, `${describeScope()} Server query ${answer.elapsed_ms.toFixed(0)} ms.`),
      );
      scopeText.textContent = "";
      clearError();
      for (const err of sideErrors.slice(1)) if (err) showError(err);
      setView(id, {
        node: scope.nodes,
        rank: scope.ranks.map(String),
        steps: scope.steps ? `${scope.steps.from}:${scope.steps.to}` : null,
        k: scope.topK === DEFAULT_TOP_K ? null : String(scope.topK),
      });
      hooks.renders += 1;
      root.dataset.state = "ready";
      hooks.state = "ready";
    } catch (err) {
      if (ctrl.signal.aborted || mine !== generation) return;
      failed(err);
    } finally {
      if (inflight === ctrl) inflight = null;
      schedule();
    }
  }

  /** While the loaded job is running, re-read it: a newer profile replaces the loaded one. */
  function schedule(): void {
    window.clearTimeout(timer);
    const l = loaded();
    if (!active || !l || (l.status !== "InProgress" && l.status !== "Stopping")) return;
    timer = window.setTimeout(async () => {
      try {
        const job = await getJob(l.jobId);
        const now = loaded();
        if (!now || now.profileId !== l.profileId) return;
        if (job.latest_profile && job.latest_profile !== l.profileId) {
          setLoaded({ profileId: job.latest_profile, jobId: job.id, jobName: job.name, status: job.status });
          return;
        }
        if (job.status !== l.status) setLoaded({ ...l, status: job.status });
        await refresh();
      } catch (err) {
        showError(err);
        schedule();
      }
    }, REFRESH_MS);
  }

  // Queried only while shown: a timeline opened by a link does not wait behind the dashboard's
  // queries for the server's analysis slots.
  onLoadedChange((l) => {
    if (!active) return;
    if ((l?.profileId ?? null) !== profileId) void open(l);
    else schedule();
  });

  return {
    root,
    setActive(on: boolean) {
      active = on;
      if (on) {
        const l = loaded();
        if ((l?.profileId ?? null) !== profileId) void open(l);
        for (const chart of Object.values(hooks.charts)) chart.resize();
        schedule();
      } else window.clearTimeout(timer);
    },
  };
}
