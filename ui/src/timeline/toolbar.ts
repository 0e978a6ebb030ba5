// The timeline page's elements: the toolbar (step list, search with next/previous, the arrows and
// collectives toggles, Fit, Export, the keys and the status line), the canvas, the details panel
// and the placeholder shown when no profile is loaded. Behaviour is wired in view.ts.
import { h } from "../dom";
import { COLLECTIVES_SHOWN } from "./collective";
import { exportShown } from "./link";

export function timelineDom(on: { prev(): void; next(): void; fit(): void }) {
  const canvas = h("canvas", { id: "tl-canvas", tabindex: 0 });
  const stepSelect = h("select", { id: "tl-steps" }, h("option", { value: "" }, "zoom to step…"));
  const searchBox = h("input", { id: "tl-search", type: "search", placeholder: "search names (Enter: next)" });
  const searchInfo = h("span", { id: "tl-search-info", class: "muted" });
  const status = h("span", { id: "tl-status", class: "muted" });
  /** the status line, cut to the toolbar's one line: the whole text on hover */
  const setStatus = (text: string): void => {
    status.textContent = text;
    status.title = text;
  };
  const arrowsBox = h("input", { id: "tl-all-arrows", type: "checkbox" });
  const collBox = h("input", { id: "tl-all-collectives", type: "checkbox" });
  const details = h("div", { id: "tl-details", class: "tl-details" });
  const wrap = h("div", { class: "tl-canvas-wrap" }, canvas);
  const body = h("div", { class: "tl-body" }, wrap, details);
  const placeholder = h(
    "div",
    { class: "placeholder", id: "tl-placeholder" },
    h("p", {}, "No profile loaded."),
    h("p", {}, h("a", { href: "#/jobs" }, "Open the Jobs page"), " and load a job to see its timeline."),
  );
  const root = h(
    "section",
    { id: "timeline", class: "page tl-page", hidden: true },
    h(
      "div",
      { class: "toolbar" },
      stepSelect,
      searchBox,
      h("button", { id: "tl-prev", type: "button", onclick: on.prev }, "◀"),
      h("button", { id: "tl-next", type: "button", onclick: on.next }, "▶"),
      searchInfo,
      h("label", { class: "field" }, arrowsBox, "all arrows"),
      h("label", { class: "field", title: `Every collective with a kernel in view (the first ${COLLECTIVES_SHOWN}): arrows from each rank's kernel to the last rank's, which is outlined` }, collBox, "all collectives"),
      h("button", { id: "tl-fit", type: "button", onclick: on.fit }, "Fit (F)"),
      h("button", { id: "tl-export", type: "button", class: "secondary", title: "Download the window shown (the whole profile when all of it is shown) as Chrome-trace JSON: one rank's file, or a ZIP of one file per rank", onclick: () => exportShown() }, "Export"),
      h("span", { class: "muted tl-keys" }, "W/S zoom · A/D pan · wheel zoom · drag pan · shift+wheel scroll · Esc deselect"),
      status,
    ),
    placeholder,
    body,
  );
  return { canvas, stepSelect, searchBox, searchInfo, status, setStatus, arrowsBox, collBox, details, wrap, body, placeholder, root };
}
