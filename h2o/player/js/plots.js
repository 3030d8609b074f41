/* The player's plotly drawings, mixed into Player (player.js): the detail heatmap (rebuilt when
 * the cursor leaves the steps it shows), the whole-run overview and the metrics (drawn once per
 * view), and the kept slots (every step, on a canvas: slots.js). */
import { C, LOG_DECADES } from "./constants.js";
/** A short trace's rows are drawn this tall (px): a window of them, the rest a drag away… */
const ROW_PX = 10;
/** … when, all in the plot's height, they would be thinner than this (px). */
const ROW_MIN_PX = 8;
/** A trace is short when all its positions fit in this many windows of ROW_PX rows. */
const SHORT_SCREENS = 4;
/** Rows at least this tall (px) size the eviction marks to themselves. */
const MARK_ROW_PX = 6;
import { clamp, colourscale, COUNT_FLOOR, el, esc, fmt, scaleOf, signed } from "./common.js";
export const PlotMethods = {
  plotBox(parent, cls, height) {
    const cell = el("div", "h2o-cell");
    parent.appendChild(cell);
    const cap = el("div", "h2o-cap");
    cell.appendChild(cap);
    parent = cell;
    const wrap = el("div", "h2o-plot " + cls);
    const gd = el("div", "h2o-gd");
    gd.style.height = height + "px";
    const over = el("div", "h2o-over");
    const mask = el("div", "h2o-mask");
    const win = el("div", "h2o-win");
    const cur = el("div", "h2o-cursor");
    over.append(mask, win, cur);
    wrap.append(gd, over);
    parent.appendChild(wrap);
    return { cap, wrap, gd, over, mask, win, cur };
  },

  /** A plot's layout; its title is the caption above it (HTML wraps, a plot title does not). */
  layout(v, title, height, xtitle, ytitle, extra) {
    const th = this.theme;
    const big = this.h.presenter ? 3 : 0;
    v.cap.textContent = title;
    return Object.assign({
      height,
      font: { size: 14 + big, family: th.font, color: th.text },
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: C.plotBg,
      margin: { l: 64, r: 16, t: 12, b: 56 },
      xaxis: { title: { text: xtitle }, zeroline: false, gridcolor: "rgba(128,128,128,0.25)", tickfont: { size: 14 + big } },
      yaxis: { title: { text: ytitle }, zeroline: false, gridcolor: "rgba(128,128,128,0.25)", tickfont: { size: 14 + big } },
      legend: { orientation: "h", x: 0, xanchor: "left", yanchor: "top", font: { size: 14 + big } },
      hoverlabel: { font: { size: 15 } },
      showlegend: true,
    }, extra || {});
  },

  /** Milestones (performance.now) for the benchmark: load, decoded, first render. */
  mark(name) {
    const m = this.marks || (this.marks = {});
    if (!(name in m)) m[name] = performance.now();
  },

  timed(name, t0) {
    const tm = this.timings || (this.timings = {});
    (tm[name] || (tm[name] = [])).push(performance.now() - t0);
    if (tm[name].length > 200) tm[name].shift();
  },

  /** Room under the x axis for a legend of however many rows its entries need. */
  fitLegend(v, lay, data) {
    const names = data.filter((d) => d.showlegend !== false && d.name && d.type !== "heatmap").map((d) => d.name);
    for (const sh of lay.shapes || []) if (sh.showlegend) names.push(sh.name);
    const width = Math.max(200, (v.gd.clientWidth || 420) - 20);
    let rows = names.length ? 1 : 0;
    let used = 0;
    for (const name of names) {
      const w = 44 + 7.6 * String(name).replace(/&[a-z]+;/g, "x").length;
      if (used && used + w > width) { rows++; used = 0; }
      used += w;
    }
    lay.margin.b = 72 + 24 * rows;
    lay.height += 24 * rows;
    // Legend rows start under the x axis title, in the plot's own (paper) coordinates.
    const ph = lay.height - lay.margin.t - lay.margin.b;
    lay.legend.y = -70 / Math.max(ph, 1);
    v.gd.style.height = lay.height + "px"; // plotly sizes a responsive plot to its div
    return lay;
  },

  /** Once per plot: a click jumps to its step; a redraw (resize, zoom) re-places the overlays. */
  bind(gd) {
    if (gd.__h2oBound) return;
    gd.__h2oBound = true;
    gd.on("plotly_click", (ev) => {
      const pt = ev && ev.points && ev.points[0];
      if (pt && pt.x !== undefined) this.jump(Math.round(Number(pt.x)));
    });
    gd.on("plotly_afterplot", () => this.placeAll());
  },

  config() {
    return { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d"] };
  },

  heatTrace(P, z, raw, x, y, text, scale, pooled) {
    const pooledNote = pooled ? "max " : "";
    const what = P.meta.scored
      ? `${pooledNote}${esc(P.meta.score_label)}: %{customdata:.4g}`
      : `${pooledNote}age %{customdata} steps (this policy keeps no score)`;
    const bar = { title: { text: esc(scale.title), side: "right" }, thickness: 14, tickfont: { size: 13 } };
    if (scale.ticks) Object.assign(bar, scale.ticks);
    return {
      type: "heatmap", z, x, y, customdata: raw, text, hoverongaps: false,
      zmin: scale.zmin, zmax: scale.zmax, colorscale: colourscale(this.theme.seq), colorbar: bar,
      hovertemplate: `step %{x}<br>%{text}<br>${what}<extra></extra>`, name: P.meta.scored ? P.meta.score_label : "age",
    };
  },

  drawDetail(i) {
    const T0 = performance.now();
    try { return this._drawDetail(i); } finally { this.timed("drawDetail", T0); }
  },

  _drawDetail(i) {
    const P = this.panels[i];
    const v = this.views[i];
    const [p0, p1] = this.page;
    const W = p1 - p0;
    const scale = scaleOf(P.meta, this.st.colour === "log", this.h.steps);
    const kept = this.st.rows === "kept";
    // Rows: every position kept at some step shown (one row each), or all positions, pooled.
    const top = p1; // positions < p1
    let rowOf, rows, stride = 1, y, labels;
    if (kept) {
      const mark = new Uint8Array(top);
      for (let t = p0; t < p1; t++) for (const p of this.keptAt(i, t).pos) mark[p] = 1;
      rows = [];
      rowOf = new Int32Array(top).fill(-1);
      for (let p = 0; p < top; p++) if (mark[p]) { rowOf[p] = rows.length; rows.push(p); }
      y = rows.map((_, r) => r);
      labels = rows.map((p) => esc(this.posLabel(p)));
    } else {
      stride = Math.max(1, Math.ceil(top / 400));
      const n = Math.ceil(top / stride);
      rows = Array.from({ length: n }, (_, r) => r * stride);
      y = rows.map((p) => p + (stride - 1) / 2);
      labels = rows.map((p) => (stride > 1 ? `positions ${p}–${Math.min(p + stride, top) - 1}` : esc(this.posLabel(p))));
    }
    const row = (p) => (kept ? rowOf[p] : Math.floor(p / stride));
    const T1 = performance.now();
    const z = rows.map(() => new Float32Array(W).fill(NaN));
    const raw = rows.map(() => new Float32Array(W).fill(NaN));
    for (let t = p0; t < p1; t++) {
      const { pos, score } = this.keptAt(i, t);
      const c = t - p0;
      for (let k = 0; k < pos.length; k++) {
        const r = row(pos[k]);
        const val = score ? score[k] : t - pos[k];
        const cur = raw[r][c];
        if (!(cur >= val)) { raw[r][c] = val; z[r][c] = scale.value(val); }
      }
    }
    const x = Array.from({ length: W }, (_, c) => p0 + c);
    this.timed("detail.grid", T1);
    const text = labels.map((lab) => new Array(W).fill(lab));
    const data = [this.heatTrace(P, z, raw, x, y, text, scale, !kept && stride > 1)];
    // Evictions in these steps: a ✕ at (step, row); hover says who and why; click jumps there.
    const ev = { x: [], y: [], text: [] };
    const a = P.a;
    for (let j = P.vIdx[p0 - P.A]; j < P.vIdx[p1 - P.A]; j++) {
      const t = a.v_step[j];
      const p = a.v_pos[j];
      ev.x.push(t);
      ev.y.push(kept ? rowOf[p] : y[row(p)]);
      const why = esc(this.storyAt(i, t)).replace(" — ", "<br>— ").replace(/; /g, "<br>").replace(/\n/g, "<br>");
      ev.text.push(`<b>${esc(this.posLabel(p))}</b> evicted at step ${t}<br>${why}`);
    }
    if (ev.x.length) {
      data.push({
        type: "scatter", mode: "markers", x: ev.x, y: ev.y, hovertext: ev.text, hoverinfo: "text",
        name: "eviction (click: go to its step)",
        marker: { symbol: "x-thin", size: clamp(360 / W, 5, 12), color: C.evict, line: { width: 2, color: C.evict } },
      });
    }
    const shapes = [];
    const ypos = (p, edge) => (kept ? rowOf[p] + edge : p + edge);
    const win = P.meta.window;
    if (win > 0) {
      const tx = [], ty = [], by = [];
      for (let t = p0; t < p1; t++) {
        const pos = this.keptAt(i, t).pos;
        const n = pos.length;
        if (!n) continue;
        tx.push(t - 0.5, t + 0.5);
        ty.push(ypos(pos[n - 1], 0.5), ypos(pos[n - 1], 0.5));
        by.push(ypos(pos[Math.max(0, n - win)], -0.5), ypos(pos[Math.max(0, n - win)], -0.5));
      }
      if (tx.length) {
        const xs = tx.concat(tx.slice().reverse());
        const ys = ty.concat(by.slice().reverse());
        shapes.push({
          type: "path", path: "M" + xs.map((xx, k) => `${xx},${ys[k]}`).join("L") + "Z",
          fillcolor: C.protectFill, line: { color: C.protectLine, width: 1 }, layer: "above",
          name: `protected recent window (${win})`, showlegend: true,
        });
      }
    }
    const sinks = P.meta.sinks;
    if (sinks) {
      const y1 = kept ? rows.filter((p) => p < sinks).length - 0.5 : sinks - 0.5;
      shapes.push({
        type: "rect", x0: p0 - 0.5, x1: p1 - 0.5, y0: -0.5, y1, fillcolor: C.sinkFill,
        line: { color: C.sinkLine, width: 1 }, layer: "above", showlegend: true,
        name: sinks === 1 ? "pinned sink (position 0)" : `pinned sinks (positions 0–${sinks - 1})`,
      });
    }
    this.highlightShapes(shapes, (p) => (kept ? (p < top ? rowOf[p] : -1) : p), kept ? 1 : stride);
    const held = P.meta.selects ? "read" : "kept";
    const title = (P.meta.scored ? `${P.meta.score_label} ${P.meta.selects ? "when read" : "while kept"}` : "age of each kept position (no score)") + ` — steps ${p0}–${p1 - 1}`;
    const ytitle = kept ? `${held} position (one row each)` : "position" + (stride > 1 ? ` (pooled by ${stride})` : "");
    const lay = this.layout(v.detail, title, this.h.presenter ? 500 : 430, "decode step", ytitle, { shapes });
    lay.xaxis.range = [p0 - 0.5, p1 - 0.5];
    this.fitLegend(v.detail, lay, data);
    const full = [y.length ? y[0] - (kept ? 0.5 : stride / 2) : -0.5, y.length ? y[y.length - 1] + (kept ? 0.5 : stride / 2) : 0.5];
    v.rows = { n: rows.length, unit: kept ? 1 : stride, kept, positions: rows, rowOf: row, page: this.page, full, W, title };
    // The rows' plot height as the layout asks for it; plotly may take some of it for the
    // legend, and then the rows are fitted again to the height it drew (fitRows).
    const ph = lay.height - lay.margin.t - lay.margin.b;
    const ax = this.rowAxis(i, ph);
    Object.assign(lay.yaxis, ax.yaxis);
    Object.assign(lay.xaxis, ax.xaxis);
    lay.dragmode = ax.dragmode;
    const marks = data.findIndex((d) => d.type === "scatter");
    if (marks >= 0) Object.assign(data[marks].marker, ax.marker);
    const gd = v.detail.gd;
    const T2 = performance.now();
    const drawn = window.Plotly.react(gd, data, lay, this.config());
    this.timed("detail.react", T2);
    this.bind(gd);
    Promise.resolve(drawn).then(() => this.fitRows(i, ph, marks));
  },

  /** Panel i's rows in a plot `len` px high: a short trace's (every position fits in
   * SHORT_SCREENS windows) at ROW_PX each, a window of them that follows the step, the rest a
   * drag away; a long trace's as they always were, every one in the plot's height. The
   * eviction marks are a row high at most, so neighbours stay apart (on a long trace's thin
   * rows, a column wide as before). Returns the layout's y axis, x axis, drag mode and marks. */
  rowAxis(i, len) {
    const R = this.views[i].rows;
    const V = Math.max(1, Math.floor(len / ROW_PX));
    R.windowed = len / R.n < ROW_MIN_PX && R.n > V && this.h.steps <= SHORT_SCREENS * V;
    R.V = R.windowed ? V : R.n;
    const yaxis = {};
    const rows = R.positions;
    if (R.windowed) {
      const lo = this.rowWindow(i, this.st.t, null);
      yaxis.range = [-0.5 + lo * R.unit, -0.5 + (lo + V) * R.unit];
      if (R.kept) {
        const every = Math.ceil(V / (this.h.presenter ? 6 : 9));
        const tv = rows.map((_, r) => r).filter((r) => r % every === 0);
        yaxis.tickvals = tv;
        yaxis.ticktext = tv.map((r) => String(rows[r]));
      }
    } else {
      yaxis.range = R.full;
      if (R.kept) {
        const nt = Math.min(rows.length, this.h.presenter ? 6 : 9);
        const tv = [];
        for (let k = 0; k < nt; k++) tv.push(Math.round((k * (rows.length - 1)) / Math.max(nt - 1, 1)));
        const uniq = [...new Set(tv)];
        yaxis.tickvals = uniq;
        yaxis.ticktext = uniq.map((r) => String(rows[r]));
      }
    }
    const rowPx = len / Math.max(R.V, 1);
    const marker = rowPx >= MARK_ROW_PX
      ? { size: clamp(0.7 * rowPx, 4, 12), line: { width: rowPx < 12 ? 1.5 : 2, color: C.evict } }
      : { size: clamp(360 / R.W, 5, 12), line: { width: 2, color: C.evict } };
    this.views[i].detail.cap.textContent = R.title + (R.windowed ? ` · ${V} of its ${R.n} rows at a time (drag up or down for the rest)` : "");
    // Windowed, a drag moves up and down the rows; the steps stay those of the page.
    return { yaxis, xaxis: { fixedrange: R.windowed }, dragmode: R.windowed ? "pan" : "zoom", marker };
  },

  /** The rows fitted again to the plot height plotly drew (its legend may take more than the
   * layout asked for), if that changes how many are shown. */
  fitRows(i, asked, marks) {
    const v = this.views[i];
    const gd = v.detail.gd;
    const fl = gd._fullLayout;
    if (!v.rows || v.rows.page !== this.page || !fl || !fl.yaxis || !fl.yaxis._length) return;
    const len = fl.yaxis._length;
    const same = (a, b) => Math.floor(a / ROW_PX) === Math.floor(b / ROW_PX) && (a / v.rows.n < ROW_MIN_PX) === (b / v.rows.n < ROW_MIN_PX);
    if (same(len, asked)) return;
    const ax = this.rowAxis(i, len);
    const lay = { dragmode: ax.dragmode, "xaxis.fixedrange": ax.xaxis.fixedrange };
    for (const k in ax.yaxis) lay[`yaxis.${k}`] = ax.yaxis[k];
    if (marks < 0) window.Plotly.relayout(gd, lay);
    else window.Plotly.update(gd, { "marker.size": ax.marker.size, "marker.line.width": ax.marker.line.width }, lay, [marks]);
  },

  /** The first row of panel i's window of rows at step t: where it is (`current`, the range
   * shown, which a drag may have moved) while that still holds the rows the step is about —
   * every kept position's if they fit, else this step's victims and admission, else its
   * victims — else moved so they do, the newest three quarters of the way up. */
  rowWindow(i, t, current) {
    const R = this.views[i].rows;
    const { pos, victims } = this.keptAt(i, t);
    const rowsOf = (list) => Array.from(list, (p) => R.rowOf(p)).filter((r) => r >= 0);
    const span = (rs) => (rs.length ? Math.max(...rs) - Math.min(...rs) : Infinity);
    const all = rowsOf(pos);
    const act = rowsOf(victims).concat(rowsOf(pos.subarray(pos.length - 1)));
    const need = span(all) < R.V ? all : span(act) < R.V ? act : rowsOf(victims).slice(0, 1);
    if (!need.length) return current === null ? 0 : current;
    const lo = Math.min(...need);
    const hi = Math.max(...need);
    if (current !== null && lo >= current && hi < current + R.V) return current;
    return clamp(Math.min(lo, hi - Math.floor(0.75 * R.V)), 0, R.n - R.V);
  },

  /** Keep panel i's window of rows on what step t is about (a short trace's heatmap). */
  followRows(i, t) {
    const v = this.views[i];
    const R = v.rows;
    const fl = v.detail.gd._fullLayout;
    if (!R || !R.windowed || R.page !== this.page || !fl || !fl.yaxis || t < this.page[0] || t >= this.page[1]) return;
    const [a, b] = fl.yaxis.range;
    // The rows wholly in view: a drag leaves the window anywhere.
    const first = Math.ceil((Math.min(a, b) + 0.5) / R.unit - 1e-6);
    const last = Math.floor((Math.max(a, b) + 0.5) / R.unit + 1e-6) - 1;
    const now = clamp(first, 0, Math.max(0, R.n - R.V));
    const whole = last - first + 1 >= R.V;
    const want = this.rowWindow(i, t, whole ? now : null);
    if (whole && want === now) return;
    window.Plotly.relayout(v.detail.gd, { "yaxis.range": [-0.5 + want * R.unit, -0.5 + (want + R.V) * R.unit] });
  },

  highlightShapes(shapes, yOf, half) {
    const hl = this.h.highlights || [];
    const labels = [...new Set(hl.map((x) => x[1]))];
    const seen = new Set();
    for (const [p, label] of hl) {
      const yy = yOf(p);
      if (yy < 0) continue;
      const k = labels.indexOf(label);
      shapes.push({
        type: "rect", xref: "paper", x0: 0, x1: 1, y0: yy - 1.5 * half, y1: yy + 1.5 * half, layer: "above",
        line: { color: C.highlight[k % C.highlight.length], width: k === 0 ? 2 : 1.5, dash: "dot" },
        name: esc(label), legendgroup: "hl " + label, showlegend: !seen.has(label),
      });
      seen.add(label);
    }
  },

  drawBars(i, t) {
    const T0 = performance.now();
    try { return this._drawBars(i, t); } finally { this.timed("drawBars", T0); }
  },

  _drawBars(i, t) {
    const P = this.panels[i];
    const v = this.views[i];
    const { pos, score, victims } = this.keptAt(i, t);
    const n = pos.length;
    const meta = P.meta;
    const log = !meta.scored || (this.st.colour === "log" && !signed(meta));
    const floor = meta.counts ? COUNT_FLOOR : meta.hi * Math.pow(10, -LOG_DECADES); // as scaleOf
    const lo = meta.scored ? (log ? floor : Math.min(0, meta.lo ?? 0)) : 0.5;
    const hi = meta.scored ? meta.hi : Math.max(this.h.steps, 2);
    const values = new Float64Array(n);
    const gone = new Uint8Array(n);
    for (let k = 0, j = 0; k < n; k++) {
      values[k] = score ? score[k] : t - pos[k];
      if (j < victims.length && pos[k] === victims[j]) { gone[k] = 1; j++; }
    }
    const budget = meta.budget;
    const out = victims.length;
    v.bars.cap.textContent = meta.selects
      ? `Read at step ${t}: ${n} of the ${t} positions before it — ${n === t ? "every one" : "the pages whose bound on q·k is highest"}; all ${t + 1} are held, nothing is evicted`
      : n > budget
      ? `Kept slots at step ${t}: ${n} positions — the budget of ${budget} plus position ${t}, just admitted; ${out === 1 ? "one is" : out + " are"} evicted now`
      : `Kept slots at step ${t}: ${n} of ${budget} slots in use — ${n < budget ? "room left, " : ""}nothing to evict`;
    v.bars.chart.draw({
      n, values, gone, log, lo, hi, counts: !!meta.counts, colour: meta.colour, window: meta.window, sinks: meta.sinks,
      theme: this.theme, big: this.h.presenter,
      ytitle: meta.scored ? meta.score_label + (log ? " (log)" : "") : "age in steps (log)",
      xtitle: meta.selects ? "read position (labelled by position)" : null,
      xlabel: (k) => String(pos[k]),
      hover: (k) => {
        const val = values[k];
        const what = meta.scored ? `${meta.score_label}: ${fmt(val)}` : `age ${val} step${val === 1 ? "" : "s"}` + (val === 0 ? " (just admitted)" : "");
        return `slot ${k} · ${this.posLabel(pos[k])}\n${what}` + (gone[k] ? "\nevicted at this step" : "");
      },
    });
  },

  drawOverview(i) {
    const T0 = performance.now();
    try { return this._drawOverview(i); } finally { this.timed("drawOverview", T0); }
  },

  _drawOverview(i) {
    const P = this.panels[i];
    const v = this.views[i];
    const o = P.meta.overview;
    const grid = P.a.overview;
    const scale = scaleOf(P.meta, this.st.colour === "log", this.h.steps);
    const z = [], raw = [], text = [];
    for (let r = 0; r < o.rows; r++) {
      const rz = new Float32Array(o.cols).fill(NaN);
      const rr = grid.subarray(r * o.cols, (r + 1) * o.cols);
      for (let c = 0; c < o.cols; c++) if (!Number.isNaN(rr[c])) rz[c] = P.meta.scored ? scale.value(rr[c]) : 0.5 * scale.zmax;
      z.push(rz);
      raw.push(P.meta.scored ? rr : new Float32Array(o.cols).fill(NaN));
      const lab = `positions ≈ ${r * o.sy}–${(r + 1) * o.sy - 1}`;
      text.push(new Array(o.cols).fill(lab));
    }
    const x = Array.from({ length: o.cols }, (_, c) => c * o.sx + (o.sx - 1) / 2);
    const y = Array.from({ length: o.rows }, (_, r) => r * o.sy + (o.sy - 1) / 2);
    const heat = this.heatTrace(P, z, raw, x, y, text, scale, true);
    heat.hovertemplate = P.meta.scored
      ? `steps ≈ %{x:.0f}<br>%{text}<br>max ${esc(P.meta.score_label)}: %{customdata:.4g}<extra></extra>`
      : "steps ≈ %{x:.0f}<br>%{text}<br>kept<extra></extra>";
    if (!P.meta.scored) heat.showscale = false;
    const shapes = [];
    if (P.meta.band) {
      const [bx, by] = P.meta.band;
      shapes.push({ type: "path", path: "M" + bx.map((xx, k) => `${xx},${by[k]}`).join("L") + "Z", fillcolor: C.protectFill, line: { color: C.protectLine, width: 1 }, layer: "above", name: `protected recent window (${P.meta.window})`, showlegend: true });
    }
    if (P.meta.sinks) {
      shapes.push({ type: "rect", xref: "paper", x0: 0, x1: 1, y0: -0.5, y1: P.meta.sinks - 0.5, fillcolor: C.sinkFill, line: { color: C.sinkLine, width: 1 }, layer: "above", name: "pinned sinks", showlegend: true });
    }
    this.highlightShapes(shapes, (p) => p, o.sy);
    const lay = this.layout(v.overview, "Whole run, max-pooled (the box: the steps in the detail view)", 300, `decode step (cells pooled by ${o.sx})`, `position (pooled by ${o.sy})`, { shapes });
    lay.xaxis.range = [-0.5, this.h.steps - 0.5];
    lay.yaxis.range = [-0.5, this.h.steps - 0.5];
    const gd = v.overview.gd;
    window.Plotly.react(gd, [heat], this.fitLegend(v.overview, lay, [heat]), this.config());
    this.bind(gd);
  },

  /** The metrics plots' descriptions: at step t, each panel's value and its running mean (what
   * the plots' hover says at the cursor), and the oracle bound. */
  sayMetrics(t) {
    const h = this.h;
    const at = (arr, digits) => (arr && Number.isFinite(arr[t]) ? arr[t].toFixed(digits) : null);
    const defs = [["mass", "run_mass", "retained mass"], ["recall", "run_recall", `top-${h.top_k} recall`]];
    defs.forEach(([key, runKey, what], m) => {
      const parts = [];
      this.panels.forEach((P) => {
        if (P.error) return;
        const y = at(P.a[key], 3);
        const r = at(P.a[runKey], 4);
        parts.push(`${P.meta.title}: ${what} ${y === null ? "not measured" : y}` + (r === null ? "" : `, mean to step ${t} ${r}`));
      });
      const o = key === "mass" ? at(this.oracle, 3) : null;
      if (o !== null) parts.push(`oracle bound ${o}`);
      const text = `Step ${t}: ${parts.join("; ")}.`;
      const said = this.mViews[m].said;
      if (said.textContent !== text) said.textContent = text;
    });
  },

  drawMetrics() {
    const T0 = performance.now();
    try { return this._drawMetrics(); } finally { this.timed("drawMetrics", T0); }
  },

  _drawMetrics() {
    const h = this.h;
    const defs = [
      ["mass", "run_mass", "Retained attention mass", "retained mass"],
      ["recall", "run_recall", `Top-${h.top_k} recall`, `top-${h.top_k} recall`],
    ];
    defs.forEach(([key, runKey, title, ytitle], m) => {
      const data = [];
      this.panels.forEach((P) => {
        if (P.error) return;
        const label = esc(P.meta.title);
        data.push({ type: "scatter", mode: "lines", x0: 0, dx: 1, y: P.a[key], opacity: 0.35, line: { color: P.meta.colour, width: 1, dash: P.meta.dash }, name: `${label}, per step`, legendgroup: label, showlegend: false, hovertemplate: `${label}<br>step %{x}: %{y:.3f}<extra></extra>` });
        data.push({ type: "scatter", mode: "lines", x0: 0, dx: 1, y: P.a[runKey], line: { color: P.meta.colour, width: 3, dash: P.meta.dash }, name: label, legendgroup: label, hovertemplate: `${label}<br>mean to step %{x}: %{y:.4f}<extra></extra>` });
      });
      if (key === "mass" && this.oracle) {
        data.push({ type: "scatter", mode: "lines", x0: 0, dx: 1, y: this.oracle, line: { color: C.oracle, width: 2, dash: "dot" }, name: `oracle bound (best ${h.budget} positions)`, hovertemplate: "oracle at step %{x}: %{y:.3f}<extra></extra>" });
      }
      const shapes = [];
      const evicts = this.panels.some((P) => !P.error && !P.meta.selects); // a selection never does
      if (evicts && h.budget > 0 && h.budget < h.steps) {
        shapes.push({ type: "line", x0: h.budget, x1: h.budget, y0: 0, y1: 1, yref: "paper", line: { color: C.neutral, width: 1, dash: "dot" }, name: `cache full: evictions start (step ${h.budget})`, showlegend: true });
      }
      const mv = this.mViews[m];
      const lay = this.layout(mv, `${title} per step (thin) and running mean from step ${h.budget} (thick)`, 330, "decode step", ytitle, { shapes });
      lay.yaxis.range = [0, 1.02];
      lay.xaxis.range = [-0.5, h.steps - 0.5];
      const gd = mv.gd;
      window.Plotly.react(gd, data, this.fitLegend(mv, lay, data), this.config());
      this.bind(gd);
    });
  }
};
