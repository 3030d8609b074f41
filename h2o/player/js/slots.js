import { C } from "./constants.js";
import { countStep, countValues, el, fmt, niceStep } from "./common.js";

/**
 * The kept slots at one step, drawn on a canvas: it changes at every step, and a Plotly
 * update costs 30–100 ms where this costs about one. One bar per kept slot (kept order,
 * labelled by position), the protected window and the pinned sinks shaded behind, this step's
 * victim in red; a tooltip on hover.
 */
export class SlotChart {
  constructor(parent, height) {
    this.height = height;
    this.box = el("div", "h2o-slots");
    this.canvas = el("canvas");
    this.tip = el("div", "h2o-tip");
    this.legend = el("div", "h2o-legend");
    this.box.append(this.canvas, this.tip);
    parent.append(this.box, this.legend);
    this.spec = null;
    this.canvas.addEventListener("mousemove", (e) => this.hover(e));
    this.canvas.addEventListener("mouseleave", () => { this.tip.style.display = "none"; });
  }

  setLegend(items) {
    this.legend.replaceChildren();
    for (const [colour, label, line] of items) {
      const it = el("span", "h2o-legend-item");
      const sw = el("span", "h2o-swatch");
      sw.style.background = colour;
      if (line) sw.style.border = `1px solid ${line}`;
      it.append(sw, el("span", null, label));
      this.legend.appendChild(it);
    }
  }

  geometry() {
    const big = this.spec && this.spec.big ? 3 : 0;
    return { l: 70 + 2 * big, r: 14, t: 10, b: 52 + 2 * big, font: 14 + big };
  }

  draw(spec) {
    this.spec = spec;
    const cv = this.canvas;
    const dpr = window.devicePixelRatio || 1;
    const W = this.box.clientWidth || 400;
    const H = this.height;
    if (cv.width !== Math.round(W * dpr) || cv.height !== Math.round(H * dpr)) {
      cv.width = Math.round(W * dpr);
      cv.height = Math.round(H * dpr);
      cv.style.width = W + "px";
      cv.style.height = H + "px";
    }
    const g = cv.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, W, H);
    const { l, r, t, b, font } = this.geometry();
    const pw = W - l - r;
    const ph = H - t - b;
    const n = spec.n;
    const bw = pw / Math.max(n, 1);
    // Linear bars start at lo: 0, or a lowest score below 0 (K-norm's).
    const y0 = spec.log ? Math.log10(spec.lo) : Math.min(0, spec.lo);
    const y1 = spec.log ? Math.log10(spec.hi) : spec.hi + 0.02 * (spec.hi - y0);
    const ypx = (v) => {
      const u = spec.log ? Math.log10(Math.max(v, spec.lo)) : v;
      return t + ph - ((u - y0) / (y1 - y0 || 1)) * ph;
    };
    this.layoutInfo = { l, t, pw, ph, bw, n };
    // Plot area, shading, grid.
    g.fillStyle = C.plotBg;
    g.fillRect(l, t, pw, ph);
    if (spec.sinks && n) {
      g.fillStyle = C.sinkFill;
      g.fillRect(l, t, Math.min(spec.sinks, n) * bw, ph);
    }
    if (spec.window && n) {
      g.fillStyle = C.protectFill;
      g.fillRect(l + (n - Math.min(spec.window, n)) * bw, t, Math.min(spec.window, n) * bw, ph);
    }
    g.font = `${font}px ${spec.theme.font}`;
    g.fillStyle = spec.theme.text;
    g.strokeStyle = "rgba(128,128,128,0.25)";
    g.lineWidth = 1;
    g.textAlign = "right";
    g.textBaseline = "middle";
    // Counts (votes) are ticked in whole numbers only: 1, 2, 5, 10 … on a log axis.
    const ticks = [];
    if (spec.log && spec.counts) {
      ticks.push(...countValues(spec.hi));
    } else if (spec.log) {
      for (let d = Math.ceil(y0); d <= Math.floor(y1); d++) ticks.push(Math.pow(10, d));
    } else {
      const step = spec.counts ? countStep(y1 - y0) : niceStep((y1 - y0) / 5);
      for (let v = Math.ceil(y0 / step) * step; v <= y1; v += step) ticks.push(v);
    }
    for (const v of ticks) {
      const y = Math.round(ypx(v)) + 0.5;
      g.beginPath();
      g.moveTo(l, y);
      g.lineTo(l + pw, y);
      g.stroke();
      g.fillText(fmt(v), l - 6, y);
    }
    // Bars: one rectangle per slot (at least a pixel wide), victims in red.
    const base = t + ph;
    g.fillStyle = spec.colour;
    for (let k = 0; k < n; k++) {
      if (spec.gone[k]) continue;
      const y = ypx(spec.values[k]);
      g.fillRect(l + k * bw, y, Math.max(bw - (bw > 4 ? 1 : 0), 1), base - y);
    }
    g.fillStyle = C.evict;
    for (let k = 0; k < n; k++) {
      if (!spec.gone[k]) continue;
      const x = l + k * bw;
      const y = ypx(spec.values[k]);
      g.fillRect(x, y, Math.max(bw, 3), base - y);
      g.font = `bold ${font + 4}px ${spec.theme.font}`;
      g.textAlign = "center";
      g.textBaseline = "bottom";
      g.fillText("✕", x + Math.max(bw, 3) / 2, Math.max(y, t + font + 4));
    }
    // Axes and their labels.
    g.strokeStyle = spec.theme.text;
    g.globalAlpha = 0.6;
    g.strokeRect(l + 0.5, t + 0.5, pw, ph);
    g.globalAlpha = 1;
    g.font = `${font}px ${spec.theme.font}`;
    g.fillStyle = spec.theme.text;
    g.textAlign = "center";
    g.textBaseline = "top";
    // Every slot's label when they all fit side by side (a short trace's few slots), else
    // evenly spaced ones.
    let every = n <= Math.floor(pw / 12);
    for (let k = 0; every && k < n; k++) every = g.measureText(spec.xlabel(k)).width + 6 <= bw;
    const nt = every ? n : Math.min(n, Math.max(2, Math.floor(pw / 40)));
    const seen = new Set();
    for (let q = 0; q < nt; q++) {
      const k = every ? q : Math.round((q * (n - 1)) / Math.max(nt - 1, 1));
      if (seen.has(k)) continue;
      seen.add(k);
      g.fillText(spec.xlabel(k), l + (k + 0.5) * bw, base + 5);
    }
    // What the canvas shows, as text: its y ticks and labelled slots (a canvas has no DOM).
    this.drawn = { yticks: ticks.map(fmt), xlabels: [...seen].map((k) => spec.xlabel(k)) };
    g.fillText(spec.xtitle || "kept slot (labelled by position)", l + pw / 2, base + font + 12);
    g.save();
    g.translate(16, t + ph / 2);
    g.rotate(-Math.PI / 2);
    g.textBaseline = "middle";
    g.fillText(spec.ytitle, 0, 0);
    g.restore();
    if (this.tipSlot !== undefined && this.tip.style.display !== "none") this.showTip(this.tipSlot);
  }

  hover(e) {
    const info = this.layoutInfo;
    if (!info || !this.spec) return;
    const rect = this.canvas.getBoundingClientRect();
    const x = e.clientX - rect.left;
    const y = e.clientY - rect.top;
    const k = Math.floor((x - info.l) / info.bw);
    if (k < 0 || k >= info.n || y < info.t || y > info.t + info.ph) {
      this.tip.style.display = "none";
      return;
    }
    this.tipSlot = k;
    this.showTip(k, x, y);
  }

  showTip(k, x, y) {
    if (k >= this.spec.n) { this.tip.style.display = "none"; return; }
    this.tip.textContent = this.spec.hover(k); // text, never markup: tokens come from files
    this.tip.style.display = "block";
    if (x !== undefined) {
      const W = this.box.clientWidth;
      this.tip.style.left = Math.min(x + 12, W - 220) + "px";
      this.tip.style.top = Math.max(0, y - 60) + "px";
    }
  }
}
