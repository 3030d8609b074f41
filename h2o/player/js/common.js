/* Shared by the player's modules: the payload's decoder, small helpers, colour scales. The
 * constants shared with the server come from constants.js (generated from Python). */
import { C, LOG_DECADES, SEQ_LIGHT } from "./constants.js";
const TYPES = { f4: Float32Array, i4: Int32Array };
// Icons as inline SVG: glyphs such as ⏮ are missing from many projector machines' fonts.
const svg = (d) => `<svg viewBox="0 0 24 24" width="18" height="18" aria-hidden="true"><path fill="currentColor" d="${d}"/></svg>`;
export const ICON = {
  first: svg("M6 5h2v14H6zM20 5v14L9 12z"),
  last: svg("M16 5h2v14h-2zM4 5v14l11-7z"),
  play: svg("M7 4v16l13-8z"),
  pause: svg("M6 4h4v16H6zM14 4h4v16h-4z"),
};

// -- the payload (see h2o/player/playback.py) ---------------------------------------------------------
export function decode(bytes) {
  const u8 = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
  const buf = u8.slice().buffer; // own, aligned copy: typed views need aligned offsets
  const magic = String.fromCharCode(u8[0], u8[1], u8[2], u8[3]);
  if (magic !== "H2OP") throw new Error("not a player payload");
  const n = new DataView(buf).getUint32(4, true);
  const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 8, n)));
  const base = 8 + n + ((8 - ((8 + n) % 8)) % 8);
  const get = (ref) => (ref ? new TYPES[ref[2]](buf, base + ref[0], ref[1]) : null);
  return { header, get };
}

/** One panel's arrays for the loaded range, with the kept positions derived at every step. */
export function panelData(h, p, get) {
  if (p.error) return { meta: p, error: p.error };
  const a = {};
  for (const k in p.arrays) a[k] = get(p.arrays[k]);
  const [A, B] = h.range;
  const R = B - A;
  const offs = new Int32Array(R + 1);
  for (let i = 0; i < R; i++) offs[i + 1] = offs[i] + a.n_kept[i];
  const vIdx = new Int32Array(R + 1); // victims of step A+i: v_*[vIdx[i] .. vIdx[i+1])
  for (let i = 0, j = 0; i < R; i++) {
    vIdx[i] = j;
    while (j < a.v_step.length && a.v_step[j] === A + i) j++;
    vIdx[i + 1] = j;
  }
  if (a.kept_all) {
    // a selection (Quest): each step's read positions are sent whole, not derived
    if (a.kept_all.length !== offs[R]) throw new Error("read positions do not add up");
    return { meta: p, a, offs, vIdx, pos: a.kept_all, A, B };
  }
  const pos = new Int32Array(offs[R]);
  pos.set(a.kept0, 0);
  for (let i = 1; i < R; i++) {
    // kept(t) = kept(t-1) without the victims of t-1, then t itself (all ascending).
    let w = offs[i];
    let v = vIdx[i - 1];
    for (let k = offs[i - 1]; k < offs[i]; k++) {
      if (v < vIdx[i] && a.v_pos[v] === pos[k]) { v++; continue; }
      pos[w++] = pos[k];
    }
    pos[w++] = A + i;
    if (w !== offs[i + 1]) throw new Error(`kept positions do not add up at step ${A + i}`);
  }
  return { meta: p, a, offs, vIdx, pos, A, B };
}

// -- small helpers -----------------------------------------------------------------------------
export function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}
/** Plotly renders a little HTML in hover text: a token or a name from a file must not be it. */
export function esc(s) {
  return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}
export const fmt = (x) => (x === 0 ? "0" : Math.abs(x) >= 1e5 || Math.abs(x) < 1e-3 ? x.toExponential(3) : String(Number(x.toPrecision(4))));
export const clamp = (v, lo, hi) => Math.max(lo, Math.min(hi, v));
/** An id no other element of the page has: a host may show several players, and load this
 * script more than once (each copy draws its own prefix). */
const ID_PREFIX = "h2o-" + Math.random().toString(36).slice(2, 8) + "-";
let lastId = 0;
export const uid = (what) => ID_PREFIX + what + "-" + ++lastId;
/** Name a chart (role, its title element) and describe it (the elements with its sentences),
 * for assistive technology: plotly.js and a canvas give it neither. */
export function describeChart(node, role, titled, described) {
  for (const e of [titled, ...described]) if (!e.id) e.id = uid("text");
  node.setAttribute("role", role);
  node.setAttribute("aria-labelledby", titled.id);
  node.setAttribute("aria-describedby", described.map((e) => e.id).join(" "));
}
export const comma = (n) => n.toLocaleString("en-US");

export function themeOf(node) {
  const cs = getComputedStyle(node);
  const v = (name, dflt) => (cs.getPropertyValue(name) || "").trim() || dflt;
  const bg = v("--st-background-color", "#ffffff");
  const text = v("--st-text-color", "#31333F");
  const m = bg.match(/^#?([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})/i);
  const dark = m ? (parseInt(m[1], 16) + parseInt(m[2], 16) + parseInt(m[3], 16)) / 3 < 110 : false;
  return { bg, text, dark, font: v("--st-font", "sans-serif"), seq: dark ? SEQ_LIGHT.slice().reverse() : SEQ_LIGHT };
}

export function colourscale(seq) {
  return seq.map((c, i) => [i / (seq.length - 1), c]);
}

/** Whether a scored panel's scores go below 0 (K-norm's minus a key's norm): its scale is linear
 * from its lowest score, whatever the colour toggle says. */
export function signed(panel) {
  return panel.scored && panel.lo != null && panel.lo < 0;
}

/** Score → colour value, as h2o/player/colours.py ColourScale: log keeps young positions and
 * heavy hitters visible at once; the bottom is pushed below the smallest shown value. */
export function scaleOf(panel, log, steps) {
  if (!panel.scored) {
    const top = Math.log10(Math.max(steps, 2));
    return { value: (age) => Math.log10(age + 1), zmin: -0.3 * top, zmax: top, ticks: logTicks(0, top, (d) => Math.pow(10, d) - 1), title: "age (steps, log)" };
  }
  const hi = panel.hi;
  if (signed(panel)) {
    const lo = panel.lo;
    return { value: (s) => s, zmin: lo - 0.3 * (hi - lo), zmax: hi, ticks: null, title: panel.score_label };
  }
  if (log) {
    // Counts (votes) start at half a count, the colour of 0: no count lies between 0 and 1.
    const top = Math.log10(hi);
    const lo = panel.counts ? COUNT_FLOOR : hi * Math.pow(10, -LOG_DECADES);
    const bottom = Math.log10(lo);
    const ticks = panel.counts ? countTicks(hi) : logTicks(bottom, top, (d) => Math.pow(10, d));
    return { value: (s) => Math.log10(Math.max(s, lo)), zmin: bottom - 0.3 * (top - bottom), zmax: top, lo, ticks, title: panel.score_label + " (log)" };
  }
  let ticks = null;
  if (panel.counts) {
    const step = countStep(hi);
    const vals = [];
    for (let v = 0; v <= hi; v += step) vals.push(v);
    ticks = { tickvals: vals, ticktext: vals.map(String) };
  }
  return { value: (s) => s, zmin: -0.3 * hi, zmax: hi, ticks, title: panel.score_label };
}

/** Where a log scale of counts starts: half a count, the colour of 0 (colours.py). */
export const COUNT_FLOOR = 0.5;

/** 1, 2 or 5 times a power of ten, the largest not above `raw` (colours.py nice_step). */
export function niceStep(raw) {
  const p = Math.pow(10, Math.floor(Math.log10(raw || 1)));
  const m = raw / p;
  return (m >= 5 ? 5 : m >= 2 ? 2 : 1) * p;
}

/** Whole-number tick spacing for a linear axis of counts spanning `span` (colours.py). */
export const countStep = (span) => Math.max(1, Math.floor(niceStep(span / 5)));

/** The whole numbers a log axis of counts up to `hi` is ticked at: 1, 2, 5, 10, 20, 50 … (1, 10,
 * 100 … past a hundred, where 1-2-5 would crowd a bar). */
export function countValues(hi) {
  const mults = hi <= 100 ? [1, 2, 5] : [1];
  const vals = [];
  for (let d = 0; Math.pow(10, d) <= hi; d++) for (const m of mults) if (m * Math.pow(10, d) <= hi) vals.push(m * Math.pow(10, d));
  return vals;
}

/** A log colour bar of counts: 0 at COUNT_FLOOR, then countValues (colours.py count_ticks). */
function countTicks(hi) {
  const vals = countValues(hi);
  return { tickvals: [Math.log10(COUNT_FLOOR), ...vals.map(Math.log10)], ticktext: ["0", ...vals.map(String)] };
}

function logTicks(lo, hi, label) {
  const vals = [];
  for (let d = Math.ceil(lo); d <= Math.floor(hi); d++) vals.push(d);
  return { tickvals: vals, ticktext: vals.map((d) => fmt(label(d))) };
}
