// Mouse and keyboard on the timeline canvas: wheel zooms around the pointer (horizontal wheel pans,
// shift+wheel scrolls the rows), drag pans time and rows, a click without a drag selects or
// toggles, shift+drag (or a drag on the ruler) marks a time range, W/S zoom, A/D pan, F fits the
// selection (or, with none, the profile), Esc clears it.
import { GUTTER, RULER } from "./geometry";

export interface InputControl {
  view(): { t0: number; t1: number; scrollY: number };
  scrollTo(y: number): void;
  setView(t0: number, t1: number): void;
  zoom(factor: number, atX?: number): void;
  pan(fraction: number): void;
  fit(): void;
  /** Esc: no selection */
  clear(): void;
  click(x: number, y: number): void;
  /** the pointer over the canvas, no button down */
  hover(x: number, y: number): void;
  /** a range being marked from x0 to x1 (``done`` on release); without it, no range selection */
  range?(x0: number, x1: number, done: boolean): void;
}

export function installInput(canvas: HTMLCanvasElement, ctl: InputControl): void {
  let drag: { x: number; y: number; t0: number; t1: number; sy: number; moved: boolean; range: boolean } | null = null;
  canvas.addEventListener("mousedown", (e) => {
    const v = ctl.view();
    const range = ctl.range !== undefined && (e.shiftKey || (e.offsetY < RULER && e.offsetX > GUTTER));
    drag = { x: e.offsetX, y: e.offsetY, t0: v.t0, t1: v.t1, sy: v.scrollY, moved: false, range };
    canvas.focus();
  });
  canvas.addEventListener("mousemove", (e) => {
    if (!drag) ctl.hover(e.offsetX, e.offsetY);
  });
  window.addEventListener("mousemove", (e) => {
    if (!drag) return;
    const dx = e.offsetX - drag.x;
    const dy = e.offsetY - drag.y;
    if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
    if (!drag.moved || e.target !== canvas) return;
    if (drag.range) {
      ctl.range?.(drag.x, e.offsetX, false);
      return;
    }
    const ns = ((drag.t1 - drag.t0) / (canvas.clientWidth - GUTTER)) * dx;
    ctl.scrollTo(drag.sy - dy);
    ctl.setView(drag.t0 - ns, drag.t1 - ns);
  });
  window.addEventListener("mouseup", (e) => {
    const d = drag;
    drag = null;
    if (d?.range && d.moved && e.target === canvas) ctl.range?.(d.x, e.offsetX, true);
    if (!d || d.moved || e.target !== canvas) return;
    ctl.click(e.offsetX, e.offsetY);
  });
  canvas.addEventListener(
    "wheel",
    (e) => {
      e.preventDefault();
      if (e.shiftKey) ctl.scrollTo(ctl.view().scrollY + e.deltaY);
      else if (Math.abs(e.deltaX) > Math.abs(e.deltaY)) ctl.pan(e.deltaX / (canvas.clientWidth - GUTTER));
      else ctl.zoom(Math.exp(e.deltaY * 0.002), e.offsetX);
    },
    { passive: false },
  );
  canvas.addEventListener("keydown", (e) => {
    const k = e.key.toLowerCase();
    if (k === "w") ctl.zoom(0.7);
    else if (k === "s") ctl.zoom(1 / 0.7);
    else if (k === "a") ctl.pan(-0.2);
    else if (k === "d") ctl.pan(0.2);
    else if (k === "f") ctl.fit();
    else if (k === "escape") ctl.clear();
    else return;
    e.preventDefault();
  });
}
