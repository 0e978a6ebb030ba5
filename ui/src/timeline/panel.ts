// The details panel of the selected event: every stored field, and its connections (the launch of
// a kernel or the kernel of a launch) with a button that jumps to them.
import { h } from "../dom";
import type { TlDetails, TlEventRef } from "./data";
import { fmtDuration } from "./draw";

export type Tab = "details" | "connections";

export function renderDetails(
  into: HTMLElement,
  d: TlDetails,
  tab: Tab,
  rel: (ts: string) => number,
  onTab: (tab: Tab) => void,
  onJump: (to: TlEventRef) => void,
  instants = 0,
): void {
  const button = (id: Tab, label: string): HTMLElement =>
    h("button", { type: "button", id: `tl-tab-${id}`, class: tab === id ? "active" : "", onclick: () => onTab(id) }, label);
  const tabs = h("div", { class: "tl-tabs" }, button("details", "Details"), button("connections", `Connections (${d.links.length})`));
  let body: HTMLElement;
  if (tab === "details") {
    const f = d.fields;
    const lines: [string, string][] = [
      ["name", String(f.name ?? "")],
      ["kind", String(f.kind ?? "")],
      ["start", `${fmtDuration(rel(String(f.ts_ns)))} (${String(f.ts_ns)} ns)`],
      ["duration", fmtDuration(Number(f.dur_ns ?? 0))],
      ["row", d.row ?? ""],
    ];
    // an instant mark stands for every instant of its row in its pixel column (or columns)
    if (instants > 1) lines.splice(2, 0, ["instants here", `${instants.toLocaleString()} under this mark (the first shown)`]);
    for (const [k, v] of Object.entries(f)) {
      if (["name", "kind", "ts_ns", "dur_ns"].includes(k)) continue;
      lines.push([k, typeof v === "object" ? JSON.stringify(v) : String(v)]);
    }
    body = h("table", { class: "tl-fields" }, lines.map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, v))));
  } else {
    body = h(
      "ul",
      { class: "tl-links", id: "tl-links" },
      d.links.length === 0 ? h("li", { class: "muted" }, "No linked launch or kernel.") : null,
      d.links.map((l) =>
        h(
          "li",
          { "data-role": l.role, "data-id": l.id },
          h("strong", {}, l.role === "launch" ? "launched by " : "launched "),
          `${l.name} · ${l.kind} · ${fmtDuration(l.dur_ns)} · ${l.row} `,
          h("button", { type: "button", class: "tl-jump", onclick: () => onJump(l) }, "Jump"),
        ),
      ),
    );
  }
  into.replaceChildren(tabs, h("div", { id: `tl-${tab}` }, body));
}
