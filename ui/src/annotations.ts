// "Add a chart": a histogram of one annotation's durations (any name the profile holds).
import { type Scope, getAnnotationHistogram } from "./api";
import { type Card, card, dispose, histogram, render } from "./charts";
import { h } from "./dom";
import { describe } from "./errors";
import { count, duration } from "./format";

export interface CustomCharts {
  root: HTMLElement;
  setAnnotations(names: string[]): void;
  /** Re-query every added chart (after the scope changed). */
  refresh(profileId: string, scope: Scope): Promise<void>;
  clear(): void;
}

export const chartName = (annotation: string) => `annotation:${annotation}`;

export function customCharts(current: () => { profileId: string; scope: Scope } | null): CustomCharts {
  const added = new Map<string, Card>();
  const select = h("select", { id: "add-chart-select", "aria-label": "Annotation" });
  const button = h("button", { type: "button", id: "add-chart" }, "Add a chart");
  const grid = h("div", { class: "grid custom-grid" });
  const control = h(
    "div",
    { class: "add-chart" },
    h("span", {}, "Histogram of an annotation's durations:"),
    select,
    button,
  );

  async function draw(name: string, c: Card, profileId: string, scope: Scope): Promise<void> {
    c.root.dataset.state = "loading";
    try {
      const answer = await getAnnotationHistogram(profileId, name, scope);
      const s = answer.stats;
      const notes = [...answer.histogram.notes];
      if (s) {
        notes.unshift(
          `${count(s.count as number)} occurrences, total ${duration(s.total_ns as number)}, ` +
            `mean ${duration(s.mean_ns as number)}, p50 ${duration(s.p50_ns as number)}, ` +
            `p90 ${duration(s.p90_ns as number)}, max ${duration(s.max_ns as number)}`,
        );
      }
      const empty = !answer.histogram.rows.some((r) => Number(r.count) > 0);
      render(chartName(name), c, empty ? { empty: `No "${name}" annotations in this scope.` } : { option: histogram(answer.histogram, "occurrences") }, notes);
      c.root.dataset.state = "ready";
    } catch (err) {
      dispose(chartName(name));
      c.body.replaceChildren(h("p", { class: "error-inline", role: "alert" }, describe(err)));
      c.root.dataset.state = "error";
    }
  }

  function add(name: string): void {
    const ctx = current();
    if (!ctx || !name || added.has(name)) return;
    const c = card(chartName(name), `Annotation “${name}”: duration histogram`, "custom");
    c.tools.append(
      h(
        "button",
        {
          type: "button",
          class: "icon-button",
          title: "Remove this chart",
          "aria-label": `Remove chart ${name}`,
          onclick: () => {
            dispose(chartName(name));
            c.root.remove();
            added.delete(name);
          },
        },
        "×",
      ),
    );
    added.set(name, c);
    grid.append(c.root);
    void draw(name, c, ctx.profileId, ctx.scope);
  }

  button.addEventListener("click", () => add(select.value));

  return {
    root: h("section", { class: "custom-charts" }, h("h2", {}, "Custom charts"), control, grid),
    setAnnotations(names) {
      select.replaceChildren(...names.map((n) => h("option", { value: n }, n)));
      const none = names.length === 0;
      select.disabled = none;
      button.disabled = none;
      if (none) select.append(h("option", { value: "" }, "(no annotations in this profile)"));
    },
    async refresh(profileId, scope) {
      await Promise.all([...added].map(([name, c]) => draw(name, c, profileId, scope)));
    },
    clear() {
      for (const name of added.keys()) dispose(chartName(name));
      added.clear();
      grid.replaceChildren();
    },
  };
}
