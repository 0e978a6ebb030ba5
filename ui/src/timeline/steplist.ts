// The toolbar's "zoom to step…" list. A profile of 10M events has ~10,000 steps: as many <option>s
// cost Chromium ~250 ms of style and layout on 2 cores, most of what the first paint spent after
// its tile had arrived. So the list says at once how many steps there are and gets its options
// only once the page is idle after the first tile, or at once when the user reaches for it.
import { h } from "../dom";
import type { TlStep } from "./data";

export interface StepList {
  /** The steps of a newly shown profile (their options not built yet). */
  set(steps: TlStep[]): void;
  /** Build the options when the page is next idle (after the first tile is drawn). */
  fillWhenIdle(): void;
}

export function stepList(select: HTMLSelectElement, zoom: (steps: TlStep[]) => void): StepList {
  let all: TlStep[] = [];
  let names: string[] | null = null; // the options still to build; null once built
  let version = 0;
  const fill = (): void => {
    if (names === null) return;
    const shown = names;
    names = null;
    select.append(...shown.map((n) => h("option", { value: n }, n.replace(/^ProfilerStep#/, "step_"))));
  };
  // before the list opens (mouse, touch, keyboard): the options are there when it does
  for (const type of ["pointerdown", "focus", "keydown"]) select.addEventListener(type, fill);
  select.addEventListener("change", () => {
    const steps = all.filter((s) => s.name === select.value);
    if (steps.length > 0) zoom(steps);
  });
  return {
    set(steps: TlStep[]) {
      version += 1;
      all = steps;
      names = [...new Set(steps.map((s) => s.name))];
      select.replaceChildren(h("option", { value: "" }, `zoom to step… (${names.length})`));
    },
    fillWhenIdle() {
      if (names === null) return;
      const ticket = version;
      const later = (): void => {
        if (ticket === version) fill();
      };
      // (every browser the UI supports has requestIdleCallback; Safari only behind a flag)
      if (typeof window.requestIdleCallback === "function") window.requestIdleCallback(later, { timeout: 2000 });
      else setTimeout(later, 500);
    },
  };
}
