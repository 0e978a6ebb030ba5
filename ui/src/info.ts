// The information panel of the loaded profile: job, source, hosts, devices, world size, capture
// settings and notes.
import { type DeviceInfo, type ProfileInfo, exportUrl, getProfile } from "./api";
import { type Child, h } from "./dom";
import { describe, showError } from "./errors";
import { bytes, count, datetime, duration, localZone } from "./format";
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

function gpuText(g: DeviceInfo): string {
  return `GPU ${g.index} · ${g.name}${g.memory_bytes ? ` · ${bytes(g.memory_bytes)}` : ""}`;
}

/** The GPUs the ranks ran on, counted once per host and index: "8 × Tesla V100-SXM2-32GB". */
function devicesSummary(info: ProfileInfo): Child[] {
  const seen = new Map<string, string>();
  for (const r of info.ranks) for (const g of r.gpus) seen.set(`${r.node}\u0000${g.index}`, g.name);
  const visible = Math.max(0, ...info.ranks.map((r) => r.devices.length));
  const byName = new Map<string, number>();
  for (const name of seen.values()) byName.set(name, (byName.get(name) ?? 0) + 1);
  const used = [...byName].map(([name, n]) => `${n} × ${name}`).join(", ");
  if (!used) return [visible ? h("span", { class: "muted" }, `no device events (${visible} visible)`) : "–"];
  const hint = visible > 0 && info.ranks.some((r) => r.devices.length > r.gpus.length) ? ` (each trace lists ${visible} visible)` : "";
  return [used, hint ? h("span", { class: "muted" }, hint) : null];
}

export function infoPanel(info: ProfileInfo): HTMLElement {
  const settings = Object.entries(info.settings ?? {});
  return h(
    "div",
    { class: "info", "data-profile": info.id },
    h(
      "h2",
      {},
      `Profile ${info.id} `,
      h("a", { class: "button secondary", id: "info-export", href: exportUrl(info.id), download: "", title: "Chrome-trace JSON: one rank's file, or a ZIP of one file per rank (Perfetto, chrome://tracing, HTA)" }, "Export"),
    ),
    kv([
      ["Job", [info.job, " ", statusBadge(info.status)]],
      ["Source", info.source],
      ["Created", `${datetime(info.created_ns)} (${localZone()})`],
      ["Hosts", info.hosts.length ? info.hosts.join(", ") : h("span", { class: "muted", title: "Kineto traces do not name their host" }, "not recorded in the traces")],
      ["Devices", devicesSummary(info)],
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
      h("thead", {}, h("tr", {}, ["Rank", "Node", "Local rank", "GPUs used", "Visible devices", "Events", "Complete", "Source file", "Notes"].map((c) => h("th", {}, c)))),
      h(
        "tbody",
        {},
        info.ranks.map((r) =>
          h(
            "tr",
            { "data-rank": r.rank },
            h("td", { class: "num" }, r.rank),
            h("td", {}, r.node || h("span", { class: "muted" }, "–")),
            h("td", { class: "num" }, r.local_rank),
            h("td", { "data-col": "gpus" }, r.gpus.length ? r.gpus.map(gpuText).join(", ") : h("span", { class: "muted" }, "none (no device events)")),
            h("td", { class: "num", "data-col": "visible", title: r.devices.join(", ") || null }, r.devices.length),
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
