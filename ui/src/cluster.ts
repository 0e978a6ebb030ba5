// The Cluster page: a cluster's nodes (group, Slurm state, health and the reason Slurm holds, the
// agent's last action), its spares, the agent's decisions with their reasons (agent.log), and each
// job's attempts, restarts and goodput, each rank's straggler score, and a "profile now" button
// per running job (what `hyperscope capture JOB --steps N` does). Refreshed every few seconds.
import {
  type CaptureStarted,
  type Cluster,
  type ClusterJob,
  type ClusterNode,
  type Decision,
  type RankSpeed,
  captureJob,
  getCluster,
  listClusters,
} from "./api";
import { h } from "./dom";
import { clearError, showError } from "./errors";
import { datetime, num } from "./format";

const REFRESH_MS = 3000;

export interface ClusterPage {
  root: HTMLElement;
  setActive(active: boolean): void;
}

function health(n: ClusterNode): HTMLElement {
  const [label, cls] =
    n.healthy === null ? ["unknown", "unknown"] : n.healthy ? ["healthy", "healthy"] : ["unhealthy", "unhealthy"];
  return h("span", { class: `health health-${cls}`, "data-health": label }, label);
}

function seconds(s: number): string {
  return `${num(s, s < 10 ? 1 : 0)} s`;
}

function nodeRow(n: ClusterNode): HTMLElement {
  return h(
    "tr",
    { "data-node": n.node, class: n.healthy === false ? "bad" : "" },
    h("td", { class: "name" }, n.node),
    h("td", {}, n.group),
    h("td", {}, n.spare ? `${n.role} (spare)` : n.role),
    h("td", {}, n.status),
    h("td", { "data-col": "slurm-state" }, n.slurm_state || "–"),
    h("td", {}, health(n)),
    h("td", { "data-col": "reason" }, n.reason),
    h("td", { class: "num" }, n.replacements),
    h("td", { "data-col": "last-action" }, n.last_action),
    h("td", { "data-col": "straggler" }, n.straggler),
  );
}

function speedRow(r: RankSpeed): HTMLElement {
  return h(
    "tr",
    { "data-job": r.job, "data-rank": r.rank, class: r.named ? "bad" : "" },
    h("td", { class: "num" }, r.job),
    h("td", { class: "num" }, r.rank),
    h("td", {}, r.node),
    h("td", { class: "num" }, `${num(r.step_s * 1e3, 1)} ms`),
    h("td", { class: "num" }, `${num(r.median_s * 1e3, 1)} ms`),
    h("td", { class: "num", "data-col": "score" }, `${r.score >= 0 ? "+" : ""}${num(r.score * 100, 0)} %`),
    h("td", { "data-col": "named" }, r.named ? "straggler" : ""),
  );
}

function captured(job: number, c: CaptureStarted): HTMLElement {
  const ranks = c.ranks.join(", ");
  const text =
    `Job ${job}: recording profile ${c.profile_id} of the store's job ${c.catalog_job} (ranks ${ranks}, ${c.steps} steps from step ` +
    `${c.start_step}) into ${c.store}. `;
  const open = c.in_this_server
    ? h("a", { href: `#/timeline/${c.profile_id}`, id: "capture-link" }, "Open its timeline")
    : h("span", {}, `Open it with \`hyperscope ui --home ${c.store}\`.`);
  const notes = c.notes.length ? ` ${c.notes.join("; ")}` : "";
  return h("span", {}, text, open, notes);
}

function decisionRow(d: Decision): HTMLElement {
  const target = d.job ? `job ${d.job}` : d.nodes.join(" → ");
  return h(
    "tr",
    { "data-kind": d.kind, "data-phase": d.phase },
    h("td", {}, datetime(d.time * 1e9)),
    h("td", {}, d.kind),
    h("td", {}, d.phase),
    h("td", {}, target),
    h("td", { "data-col": "reason" }, d.error ? `${d.reason}${d.reason ? "; " : ""}error: ${d.error}` : d.reason),
    h("td", { class: "num" }, d.seconds === null ? "" : seconds(d.seconds)),
  );
}

function attempts(j: ClusterJob): string {
  return j.attempts
    .map((a) => {
      const start = a.start_ns === null ? "?" : datetime(a.start_ns);
      const end = a.end_ns === null ? "running" : `${a.end_state.toLowerCase()} ${datetime(a.end_ns)}`;
      return `#${a.attempt}: ${start} – ${end}`;
    })
    .join("\n");
}

function jobRow(j: ClusterJob, busy: boolean, profile: (job: number) => void): HTMLElement {
  const g = j.goodput;
  const button = h("button", { class: "profile-now", "data-profile-job": j.id, disabled: busy || null }, busy ? "Profiling…" : "Profile now");
  button.addEventListener("click", () => profile(j.id));
  return h(
    "tr",
    { "data-slurm-job": j.id },
    h("td", { class: "num" }, j.id),
    h("td", { class: "name" }, j.name),
    h("td", {}, j.state),
    h("td", {}, j.nodes),
    h("td", { class: "num", "data-col": "attempts", title: attempts(j) || null }, g.attempts),
    h("td", { class: "num", "data-col": "restarts" }, j.restarts),
    h("td", { class: "num" }, seconds(g.training_s)),
    h("td", { class: "num" }, seconds(g.lost_s)),
    h("td", { class: "num", "data-col": "goodput" }, g.goodput === null ? "–" : `${num(g.goodput * 100, 1)} %`),
    h("td", {}, j.state === "RUNNING" ? button : ""),
  );
}

function table(id: string, head: string[], rows: HTMLElement[], empty: string): HTMLElement {
  return h(
    "table",
    { class: "cluster-table", id },
    h("thead", {}, h("tr", {}, head.map((c) => h("th", {}, c)))),
    h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: head.length, class: "empty" }, empty))),
  );
}

export function clusterPage(): ClusterPage {
  let active = false;
  let timer: number | undefined;
  let selected = "";
  const picker = h("select", { id: "cluster-select", "aria-label": "Cluster" });
  const summary = h("span", { class: "muted", id: "cluster-summary" });
  const body = h("div", { id: "cluster-body" });
  // outside the body, so the refresh every few seconds keeps what the last capture said
  const captureStatus = h("p", { id: "capture-status", "data-state": "idle" });
  const stepsInput = h("input", { id: "capture-steps", type: "number", min: "1", value: "10", "aria-label": "Steps per capture" }) as HTMLInputElement;
  let capturing: number | null = null;
  let last: Cluster | null = null;

  async function profile(job: number): Promise<void> {
    const steps = Number(stepsInput.value);
    if (!Number.isInteger(steps) || steps < 1) {
      captureStatus.dataset.state = "error";
      captureStatus.textContent = `Steps per capture is ${JSON.stringify(stepsInput.value)}: expected a whole number of steps, at least 1.`;
      return;
    }
    capturing = job;
    captureStatus.dataset.state = "running";
    captureStatus.textContent = `Job ${job}: asking its ranks to profile their next ${steps} steps…`;
    if (last) draw(last);
    try {
      const c = await captureJob(selected, job, steps);
      captureStatus.dataset.state = "done";
      captureStatus.replaceChildren(captured(job, c));
    } catch (err) {
      captureStatus.dataset.state = "error";
      captureStatus.textContent = `Job ${job} could not be profiled: ${err instanceof Error ? err.message : String(err)}`;
    } finally {
      capturing = null;
      if (last) draw(last);
    }
  }
  picker.addEventListener("change", () => {
    selected = picker.value;
    void refresh();
  });

  function draw(c: Cluster): void {
    last = c;
    const spares = c.nodes.filter((n) => n.spare);
    const unhealthy = c.nodes.filter((n) => n.healthy === false).length;
    summary.textContent =
      `${c.provider} cluster, ${c.status}: ${c.nodes.length - spares.length} nodes, ` +
      `${spares.length} spare${spares.length === 1 ? "" : "s"}, ${unhealthy} unhealthy`;
    body.replaceChildren(
      c.slurm_error ? h("p", { class: "error-inline", id: "slurm-error" }, `Slurm did not answer: ${c.slurm_error}`) : "",
      h("h2", {}, "Nodes"),
      table(
        "cluster-nodes",
        ["Node", "Group", "Role", "Status", "Slurm state", "Health", "Reason", "Replacements", "Agent's last action", "Straggler"],
        c.nodes.map(nodeRow),
        "No nodes.",
      ),
      h("h2", {}, "Spares"),
      h(
        "p",
        { id: "cluster-spares" },
        spares.length
          ? spares.map((s) => `${s.node} (${s.group}, ${s.healthy === null ? "unknown" : s.healthy ? "ready" : `not ready: ${s.reason || s.slurm_state}`})`).join(", ")
          : "No spare.",
      ),
      h("h2", {}, "Jobs"),
      h("p", { class: "muted" }, h("label", {}, "Steps per capture ", stepsInput)),
      table(
        "cluster-jobs",
        ["Slurm job", "Name", "State", "Nodes", "Attempts", "Restarts", "Training", "Lost", "Goodput", "Profile"],
        c.jobs.map((j) => jobRow(j, capturing !== null, (job) => void profile(job))),
        "No job.",
      ),
      captureStatus,
      h("h2", {}, "Stragglers"),
      table(
        "cluster-stragglers",
        ["Slurm job", "Rank", "Node", "Step time", "Median of the others", "Score", "Agent"],
        c.stragglers.map(speedRow),
        "No running job with two ranks or more reports its step times.",
      ),
      h("h2", {}, "The agent's decisions"),
      table("cluster-decisions", ["Time", "Kind", "Phase", "Target", "Reason", "Took"], c.decisions.map(decisionRow), "The agent has logged nothing yet."),
    );
  }

  async function refresh(): Promise<void> {
    window.clearTimeout(timer);
    root.dataset.state = "loading";
    try {
      const { clusters } = await listClusters();
      picker.replaceChildren(...clusters.map((c) => h("option", { value: c.name }, `${c.name} (${c.status})`)));
      if (!clusters.length) {
        summary.textContent = "";
        body.replaceChildren(h("p", { class: "placeholder", id: "no-cluster" }, "No cluster under this server's home: create one with `hyperscope cluster create`."));
        root.dataset.state = "ready";
        return;
      }
      if (!clusters.some((c) => c.name === selected)) selected = clusters[0]?.name ?? "";
      picker.value = selected;
      draw(await getCluster(selected));
      clearError();
      root.dataset.state = "ready";
    } catch (err) {
      root.dataset.state = "error";
      showError(err);
    } finally {
      if (active) timer = window.setTimeout(() => void refresh(), REFRESH_MS);
    }
  }

  const root = h("main", { class: "page cluster-page", id: "cluster-page" }, h("div", { class: "toolbar" }, picker, summary), body);
  return {
    root,
    setActive(on: boolean) {
      active = on;
      if (on) void refresh();
      else window.clearTimeout(timer);
    },
  };
}
