// Entry: header (tabs, loaded-profile bar, errors) and the pages routed by the URL hash:
// #/jobs, #/dashboard, #/timeline, #/compare, #/info, #/cluster. #/dashboard/<profile id> (or #/timeline/<id>) loads that
// profile first.
import "./style.css";

import { getProfile } from "./api";
import { clusterPage } from "./cluster";
import { comparePage } from "./compare";
import type { DashboardPage } from "./dashboard";
import { h } from "./dom";
import { errorBanner, showError } from "./errors";
import "./hooks";
import { infoPage } from "./info";
import { jobsPage } from "./jobs";
import { loaded, loadedBar, onLoadedChange, setLoaded } from "./loaded";
import { timelinePage } from "./timeline/view";

type Route = "jobs" | "dashboard" | "timeline" | "compare" | "info" | "cluster";

/** The dashboard and ECharts (two thirds of the code) in a chunk of their own, fetched when the
 * dashboard is first shown or, before that, when the page has been idle a while: a timeline
 * opened by a link paints without parsing them. */
function lazyDashboard(): DashboardPage {
  const root = h("div", { class: "lazy-page" });
  let page: DashboardPage | null = null;
  let active = false;
  let loading: Promise<void> | null = null;
  const ensure = (): Promise<void> =>
    (loading ??= import("./dashboard").then(
      ({ dashboardPage }) => {
        page = dashboardPage();
        root.replaceChildren(page.root);
        page.setActive(active);
      },
      (err: unknown) => {
        loading = null;
        showError(err);
      },
    ));
  const idle = (cb: () => void): void => {
    if ("requestIdleCallback" in window) window.requestIdleCallback(cb, { timeout: 3000 });
    else setTimeout(cb, 1500);
  };
  // not before the page's own first requests are answered: on 2 cores the chunk's parsing would
  // slow the timeline's first paint
  window.addEventListener("load", () => setTimeout(() => idle(() => void ensure()), 3000));
  return {
    root,
    setActive(on: boolean) {
      active = on;
      if (page) page.setActive(on);
      else if (on) void ensure();
    },
  };
}

const jobs = jobsPage(() => go("dashboard"));
const dashboard = lazyDashboard();
const info = infoPage();
const compare = comparePage();
const timeline = timelinePage();
const cluster = clusterPage();
const pages: Record<Route, { root: HTMLElement; setActive(on: boolean): void }> = { jobs, dashboard, timeline, compare, info, cluster };

const tabs = (Object.keys(pages) as Route[]).map((route) =>
  h("a", { href: `#/${route}`, class: "tab", "data-route": route }, { jobs: "Jobs", dashboard: "Dashboard", timeline: "Timeline", compare: "Compare", info: "Profile info", cluster: "Cluster" }[route]),
);

const app = document.getElementById("app") as HTMLElement;
app.replaceChildren(
  h(
    "header",
    { class: "top" },
    h("div", { class: "brand" }, h("strong", {}, "hyperscope"), h("span", { class: "muted" }, " profiler")),
    h("nav", { class: "tabs" }, tabs),
    loadedBar(),
  ),
  errorBanner(),
  jobs.root,
  dashboard.root,
  timeline.root,
  compare.root,
  info.root,
  cluster.root,
);

function go(route: Route): void {
  if (location.hash !== `#/${route}`) location.hash = `#/${route}`;
  else route_();
}

async function route_(): Promise<void> {
  const parts = location.hash.replace(/^#\/?/, "").split("/");
  const route = (parts[0] && parts[0] in pages ? parts[0] : "jobs") as Route;
  const deepLink = parts[1];
  if (route !== "jobs" && deepLink && /^[0-9a-f]{16}$/.test(deepLink) && loaded()?.profileId !== deepLink) {
    // Load at once (the dashboard starts querying), then name it from the profile's info.
    setLoaded({ profileId: deepLink, jobId: -1, jobName: deepLink, status: "Completed" });
    getProfile(deepLink).then(
      (p) => {
        if (loaded()?.profileId === p.id) setLoaded({ profileId: p.id, jobId: p.job_id, jobName: p.job, status: p.status });
      },
      (err: unknown) => {
        showError(err);
        if (loaded()?.profileId === deepLink) setLoaded(null);
      },
    );
  }
  for (const [name, page] of Object.entries(pages) as [Route, (typeof pages)[Route]][]) {
    const on = name === route;
    page.root.hidden = !on;
    page.setActive(on);
  }
  for (const tab of tabs) tab.classList.toggle("active", tab.dataset.route === route);
  const current = loaded();
  if (route === "timeline" && current) timeline.load(current.profileId);
  document.body.dataset.route = route;
}

window.addEventListener("hashchange", () => void route_());
void route_();
// A profile loaded (or another one) while the timeline is shown: show that one.
onLoadedChange((l) => {
  if (l && document.body.dataset.route === "timeline") timeline.load(l.profileId);
});
