// The one loaded profile (kept across page reloads) and the bar that shows it with its trash icon.
import type { JobStatus } from "./api";
import { h, trashIcon } from "./dom";
import { statusBadge } from "./status";

export interface Loaded {
  profileId: string;
  jobId: number;
  jobName: string;
  status: JobStatus;
}

const KEY = "hyperscope.loaded";
const listeners: ((l: Loaded | null) => void)[] = [];
let current: Loaded | null = read();

function read(): Loaded | null {
  try {
    const raw = localStorage.getItem(KEY);
    return raw ? (JSON.parse(raw) as Loaded) : null;
  } catch {
    return null;
  }
}

export function loaded(): Loaded | null {
  return current;
}

export function setLoaded(next: Loaded | null): void {
  const changed = JSON.stringify(current) !== JSON.stringify(next);
  current = next;
  try {
    if (next) localStorage.setItem(KEY, JSON.stringify(next));
    else localStorage.removeItem(KEY);
  } catch {
    /* storage may be disabled: the page still works for this visit */
  }
  if (changed) for (const fn of listeners) fn(next);
}

export function onLoadedChange(fn: (l: Loaded | null) => void): void {
  listeners.push(fn);
}

export function loadedBar(): HTMLElement {
  const bar = h("div", { class: "loaded-bar", id: "loaded-bar", "aria-live": "polite" });
  const draw = (l: Loaded | null) => {
    if (!l) {
      bar.dataset.loaded = "false";
      bar.replaceChildren(h("span", { class: "muted" }, "No profile loaded: pick a job on the Jobs page."));
      return;
    }
    bar.dataset.loaded = "true";
    bar.replaceChildren(
      h("span", { class: "muted" }, "Loaded profile:"),
      h("a", { class: "loaded-name", href: "#/dashboard", "data-testid": "loaded-name" }, l.jobName),
      h("code", { class: "loaded-id" }, l.profileId),
      statusBadge(l.status),
      h(
        "button",
        {
          class: "icon-button",
          type: "button",
          title: "Unload this profile",
          "aria-label": "Unload profile",
          "data-testid": "unload",
          onclick: () => setLoaded(null),
        },
        trashIcon(),
      ),
    );
  };
  draw(current);
  onLoadedChange(draw);
  return bar;
}
