// Rows of the tree as drawn: each open group's children below it, heights from what a row holds
// (nesting levels of events, a sample track, a group line), and which rows a tile must carry.
import type { TlRow } from "./data";
import { eventRowHeight, GROUP_H, type Layout, SAMPLE_H } from "./geometry";

/** device rows drawn on a closed group's line, at most */
export const SUMMARY_ROWS = 32;

function devices(row: TlRow): string[] {
  if (row.type === "events") return row.id.startsWith("stream/") ? [row.id] : [];
  return (row.children ?? []).flatMap(devices);
}

export function buildLayout(root: TlRow, open: Set<string>): Layout[] {
  const out: Layout[] = [];
  let y = 0;
  const walk = (row: TlRow, level: number): void => {
    const isOpen = open.has(row.id);
    const lanes = row.type === "events" ? Math.max(1, row.depths ?? 1) : 1; // every nesting level
    const hh = row.type === "group" ? GROUP_H : row.type === "samples" ? SAMPLE_H : eventRowHeight(lanes);
    const entry: Layout = { id: row.id, label: row.label, type: row.type, level, y, h: hh, open: isOpen, lanes };
    if (row.type === "samples") entry.unit = row.unit ?? "";
    // a closed node or GPU draws its streams flattened on its line: never a blank page
    if (row.type === "group" && !isOpen && row.id !== "job") entry.summary = devices(row).slice(0, SUMMARY_ROWS);
    out.push(entry);
    y += hh;
    if (row.type === "group" && isOpen) for (const c of row.children ?? []) walk(c, level + 1);
  };
  walk(root, 0);
  return out;
}

/** The parent of every row of the tree, for the nearest row shown of a hidden one. */
export function parents(root: TlRow): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (row: TlRow): void => {
    for (const c of row.children ?? []) {
      out.set(c.id, row.id);
      walk(c);
    }
  };
  walk(root);
  return out;
}

/** The row drawn for `id`: itself when shown, else its nearest shown ancestor (a closed group). */
export function shownRow(layout: Map<string, Layout>, parentOf: Map<string, string>, id: string): Layout | null {
  let at: string | undefined = id;
  while (at !== undefined) {
    const r = layout.get(at);
    if (r) return r;
    at = parentOf.get(at);
  }
  return null;
}

/** The rows a tile carries: those in view and a screenful around, closed groups by their streams. */
export function rowsInView(layout: Layout[], scrollY: number, height: number): string[] {
  const lo = scrollY - height;
  const hi = scrollY + 2 * height;
  const ids = new Set<string>();
  for (const r of layout) {
    if (r.y + r.h < lo || r.y > hi) continue;
    if (r.type !== "group") ids.add(r.id);
    else for (const id of r.summary ?? []) ids.add(id);
  }
  return [...ids];
}

/** The rows a profile opens with: its first node, that node's first GPU (else its first CPU
 * process) and so that GPU's host threads and streams, so the first look shows events, not a
 * list of closed groups. */
export function firstLook(root: TlRow): Set<string> {
  const open = new Set([root.id]);
  const node = (root.children ?? []).find((c) => c.type === "group");
  if (!node) return open;
  open.add(node.id);
  const groups = (node.children ?? []).filter((c) => c.type === "group");
  const first = groups.find((c) => c.id.startsWith("gpu/")) ?? groups.find((c) => c.id.startsWith("proc/"));
  if (first) open.add(first.id);
  return open;
}
