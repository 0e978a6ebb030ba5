// The toolbar's "zoom to step…" list. A profile of 10M events has ~10,000 steps: as many <option>s
// cost Chromium ~250 ms of style and layout on 2 cores (and ~100 ms to create), most of what the
// first paint spent after its tile had arrived. Built later, when the page is idle, they would
// still cost one frame that much. So the list says at once how many steps there are and gets its
// options when the user reaches for it (pointer, touch, keyboard focus), before it opens.
import { h } from "../dom";
import type { TlStep } from "./data";

export interface StepList {
  /** The steps of a newly shown profile (their options built at the list's first use). */
  set(steps: TlStep[]): void;
}

export function stepList(select: HTMLSelectElement, zoom: (steps: TlStep[]) => void): StepList {
  let all: TlStep[] = [];
  let names: string[] | null = null; // the options still to build; null once built
  const fill = (): void => {
    if (names === null) return;
    const shown = names;
    names = null;
    select.append(...shown.map((n) => h("option", { value: n }, n.replace(/^ProfilerStep#/, "step_"))));
  };
  for (const type of ["pointerdown", "focus", "keydown"]) select.addEventListener(type, fill);
  select.addEventListener("change", () => {
    const steps = all.filter((s) => s.name === select.value);
    if (steps.length > 0) zoom(steps);
  });
  return {
    set(steps: TlStep[]) {
      all = steps;
      names = [...new Set(steps.map((s) => s.name))];
      select.replaceChildren(h("option", { value: "" }, `zoom to step… (${names.length})`));
      if (document.activeElement === select) fill(); // focused already: no focus event to come
    },
  };
}
