// What the page exposes for tests and the benchmark: live charts, the last dashboard answer, state.
import type { ECharts } from "echarts/core";

import type { Dashboard } from "./api";

export interface Hooks {
  charts: Record<string, ECharts>;
  dashboard: Dashboard | null;
  /** "idle" (nothing loaded), "loading", "ready" or "error": the dashboard's state. */
  state: string;
  /** Completed dashboard renders since the page opened. */
  renders: number;
  /** ms from the dashboard request to the last chart drawn, for the last render. */
  timings: { fetch_ms: number; render_ms: number; total_ms: number } | null;
}

declare global {
  interface Window {
    __hyperscope: Hooks;
  }
}

export const hooks: Hooks = { charts: {}, dashboard: null, state: "idle", renders: 0, timings: null };
window.__hyperscope = hooks;
