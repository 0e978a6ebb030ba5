import type { JobStatus } from "./api";
import { h } from "./dom";

export function statusBadge(status: JobStatus | string): HTMLElement {
  return h("span", { class: `badge badge-${status}`, "data-status": status }, status);
}
