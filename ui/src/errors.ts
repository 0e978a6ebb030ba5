// One place that shows what went wrong: the API's `detail`, with the status code and URL.
import { ApiError } from "./api";
import { h } from "./dom";

let banner: HTMLElement | null = null;

export function errorBanner(): HTMLElement {
  banner = h("div", { class: "error-banner", id: "error", role: "alert", hidden: true });
  return banner;
}

export function describe(err: unknown): string {
  if (err instanceof ApiError) {
    return err.status ? `Error ${err.status}: ${err.detail}` : err.detail;
  }
  return err instanceof Error ? err.message : String(err);
}

export function showError(err: unknown): void {
  if (err instanceof DOMException && err.name === "AbortError") return;
  console.error(err);
  if (!banner) return;
  banner.hidden = false;
  banner.replaceChildren(
    h("span", { class: "error-text", "data-testid": "error-text" }, describe(err)),
    h("button", { type: "button", class: "link", onclick: clearError }, "dismiss"),
  );
}

export function clearError(): void {
  if (!banner) return;
  banner.hidden = true;
  banner.replaceChildren();
}
