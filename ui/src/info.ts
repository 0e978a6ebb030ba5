// The information panel of the loaded profile: job, source, hosts, devices, world size, capture
// settings and notes.
import { type ProfileInfo, getProfile } from "./api";
import { type Child, h } from "./dom";
import { describe, showError } from "./errors";
import { bytes, count, datetime, duration } from "./format";
import { type Loaded, loaded, onLoadedChange } from "./loaded";
import { statusBadge } from "./status";

export interface InfoPage {
  root: HTMLElement;
  setActive(active: boolean): void;
}

function kv(rows: [string, Child | Child[]][]): HTMLElement {
  return h(
    "dl",
    { class: "kv" },
    rows.flatMap(([k, v]) => [h("dt", {}, k), h("dd", { "data-field": k }, ...(Array.isArray(v) ? v : [v]))]),
  );
}

function settingValue(value: unknown): string {
  if (value === null || value === undefined) return "–";
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

export function infoPanel(info: ProfileInfo): HTMLElement {
  const hosts = [...new Set(info.ranks.map((r) => r.node))];
  const devices = [...new Set(info.ranks.flatMap((r) => r.devices))];
  const settings = Object.entries(info.settings ?? {});
  return h(
    "div",
    { class: "info", "data-profile": info.id },
    h("h2", {}, `Profile ${info.id}`),
    kv([
      ["Job", [info.job, " ", statusBadge(info.status)]],
      ["Source", info.source],
      ["Created", datetime(info.created_ns)],
      ["Hosts", hosts.join(", ") || "–"],
      ["Devices", devices.join(", ") || "–"],
      ["World size", count(info.world_size)],
      ["Ranks stored", count(info.ranks.length)],
      ["Events", count(info.events)],
      ["Stored size", bytes(info.bytes)],
      ["Time span", info.ts_max_ns > info.ts_min_ns ? duration(info.ts_max_ns - info.ts_min_ns) : "–"],
    ]),
    h("h3", {}, "Ranks"),
    h(
      "table",
      { class: "ranks-table" },
      h("thead", {}, h("tr", {}, ["Rank", "Node", "Local rank", "Devices", "Events", "Complete", "Source file", "Notes"].map((c) => h("th", {}, c)))),
      h(
        "tbody",
        {},
        info.ranks.map((r) =>
          h(
            "tr",
            { "data-rank": r.rank },
            h("td", { class: "num" }, r.rank),
            h("td", {}, r.node),
            h("td", { class: "num" }, r.local_rank),
            h("td", {}, r.devices.join(", ") || "–"),
            h("td", { class: "num" }, count(r.events)),
            h("td", {}, r.complete ? "yes" : "no"),
            h("td", { class: "path" }, r.source_file || "–"),
            h("td", {}, r.notes.join("; ")),
          ),
        ),
      ),
    ),
    h("h3", {}, "Capture settings"),
    settings.length
      ? kv(settings.map(([k, v]): [string, Child] => [k, settingValue(v)]))
      : h("p", { class: "muted" }, "None: this profile was imported, not captured by hyperscope."),
    h("h3", {}, "Notes"),
    info.notes.length ? h("ul", { class: "notes" }, info.notes.map((n) => h("li", {}, n))) : h("p", { class: "muted" }, "No notes."),
  );
}

export function infoPage(): InfoPage {
  const root = h("main", { class: "page info-page", id: "info", "data-state": "idle" });
  let shownFor: string | null = null;

  async function show(l: Loaded | null): Promise<void> {
    if (!l) {
      shownFor = null;
      root.dataset.state = "idle";
      root.replaceChildren(h("div", { class: "placeholder" }, h("p", {}, "No profile loaded."), h("p", {}, h("a", { href: "#/jobs" }, "Open the Jobs page"), " and load a job.")));
      return;
    }
    if (shownFor === l.profileId) return;
    shownFor = l.profileId;
    root.dataset.state = "loading";
    try {
      const info = await getProfile(l.profileId);
      if (loaded()?.profileId !== l.profileId) return;
      root.replaceChildren(infoPanel(info));
      root.dataset.state = "ready";
    } catch (err) {
      shownFor = null;
      root.dataset.state = "error";
      root.replaceChildren(h("p", { class: "error-inline", role: "alert" }, describe(err)));
      showError(err);
    }
  }

  let active = false;
  onLoadedChange((l) => {
    if (active) void show(l);
  });
  return {
    root,
    setActive(on) {
      active = on;
      if (on) void show(loaded());
    },
  };
}
