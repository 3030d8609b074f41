/*
 * The step-through player: draws one view of a replay and steps, plays and scrubs it in the
 * browser, with no round trip to the server inside the loaded range of steps.
 *
 * The server (app/playback.py) packs, per view and per range of steps, each panel's kept scores,
 * victims and narration, plus the whole run's metrics and a max-pooled overview. This file decodes
 * that payload, derives the kept positions at every step (a step admits its own position and drops
 * its victims), and draws with plotly.js (window.Plotly, loaded by the page, never from a CDN).
 *
 * Per step only cheap things change: the narration, the kept-slot bars, and absolutely positioned
 * overlays (the cursor, the veil over steps not reached yet) placed with the axes' own mapping —
 * so a step never re-renders a heatmap. The detail heatmap is rebuilt when the cursor leaves the
 * steps it shows. Renders are coalesced into animation frames: a click always moves the step at
 * once, however fast the clicks come; play advances by the wall clock, so its rate is its label.
 *
 * Used two ways: as a Streamlit custom component (app/player/component.py wraps it; `report`
 * sends the step and settings back when the user pauses or stops interacting, and asks for the
 * next range), and standalone in an exported HTML file (no server: the range is all there is).
 */
var H2OPlayer = (function () {
  "use strict";

  const SPEEDS = [1, 2, 5, 10, 20, 30, 60]; // steps per second
  const IDLE_REPORT_MS = 700;
  const REQUEST_RETRY_MS = 4000;
  const C = {
    evict: "#E8175D",
    oracle: "#E15759",
    protectFill: "rgba(44,165,141,0.22)",
    protectLine: "rgba(44,165,141,0.95)",
    sinkFill: "rgba(242,142,43,0.25)",
    sinkLine: "rgba(242,142,43,0.95)",
    neutral: "rgba(128,128,128,0.9)",
    plotBg: "rgba(128,128,128,0.10)",
    highlight: ["#E8175D", "#2CA58D", "#B07AA1", "#9C755F"],
  };
  const SEQ_LIGHT = ["#e4f5ff", "#c7ebff", "#a6dcff", "#83c9ff", "#60b4ff", "#3d9df3", "#1c83e1", "#0068c9", "#0054a3", "#004280"];
  const LOG_DECADES = 4;
  const TYPES = { f4: Float32Array, i4: Int32Array };
  // Icons as inline SVG: glyphs such as ⏮ are missing from many projector machines' fonts.
  const svg = (d) => `<svg viewBox="0 0 24 24" width="18" height="18" aria-hidden="true"><path fill="currentColor" d="${d}"/></svg>`;
  const ICON = {
    first: svg("M6 5h2v14H6zM20 5v14L9 12z"),
    last: svg("M16 5h2v14h-2zM4 5v14l11-7z"),
    play: svg("M7 4v16l13-8z"),
    pause: svg("M6 4h4v16H6zM14 4h4v16h-4z"),
  };

  // -- the payload (see app/playback.py) ---------------------------------------------------------
  function decode(bytes) {
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
  function panelData(h, p, get) {
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
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  /** Plotly renders a little HTML in hover text: a token or a name from a file must not be it. */
  function esc(s) {
    return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }
  const fmt = (x) => (x === 0 ? "0" : Math.abs(x) >= 1e5 || Math.abs(x) < 1e-3 ? x.toExponential(3) : String(Number(x.toPrecision(4))));
  const clamp = (v, lo, hi) => Math.max(lo, Math.min(hi, v));
  const comma = (n) => n.toLocaleString("en-US");

  function themeOf(node) {
    const cs = getComputedStyle(node);
    const v = (name, dflt) => (cs.getPropertyValue(name) || "").trim() || dflt;
    const bg = v("--st-background-color", "#ffffff");
    const text = v("--st-text-color", "#31333F");
    const m = bg.match(/^#?([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})/i);
    const dark = m ? (parseInt(m[1], 16) + parseInt(m[2], 16) + parseInt(m[3], 16)) / 3 < 110 : false;
    return { bg, text, dark, font: v("--st-font", "sans-serif"), seq: dark ? SEQ_LIGHT.slice().reverse() : SEQ_LIGHT };
  }

  function colourscale(seq) {
    return seq.map((c, i) => [i / (seq.length - 1), c]);
  }

  /** Score → colour value, as app/figures.py ColourScale: log keeps young positions and heavy
   * hitters visible at once; the bottom is pushed below the smallest shown value. */
  function scaleOf(panel, log, steps) {
    if (!panel.scored) {
      const top = Math.log10(Math.max(steps, 2));
      return { value: (age) => Math.log10(age + 1), zmin: -0.3 * top, zmax: top, ticks: logTicks(0, top, (d) => Math.pow(10, d) - 1), title: "age (steps, log)" };
    }
    const hi = panel.hi;
    if (log) {
      const top = Math.log10(hi);
      const lo = hi * Math.pow(10, -LOG_DECADES);
      return { value: (s) => Math.log10(Math.max(s, lo)), zmin: top - LOG_DECADES * 1.3, zmax: top, lo, ticks: logTicks(Math.log10(lo), top, (d) => Math.pow(10, d)), title: panel.score_label + " (log)" };
    }
    return { value: (s) => s, zmin: -0.3 * hi, zmax: hi, ticks: null, title: panel.score_label };
  }

  function logTicks(lo, hi, label) {
    const vals = [];
    for (let d = Math.ceil(lo); d <= Math.floor(hi); d++) vals.push(d);
    return { tickvals: vals, ticktext: vals.map((d) => fmt(label(d))) };
  }


  /**
   * The kept slots at one step, drawn on a canvas: it changes at every step, and a Plotly
   * update costs 30–100 ms where this costs about one. One bar per kept slot (kept order,
   * labelled by position), the protected window and the pinned sinks shaded behind, this step's
   * victim in red; a tooltip on hover.
   */
  class SlotChart {
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
      const y0 = spec.log ? Math.log10(spec.lo) : 0;
      const y1 = spec.log ? Math.log10(spec.hi) : spec.hi * 1.02;
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
      const ticks = [];
      if (spec.log) {
        for (let d = Math.ceil(y0); d <= Math.floor(y1); d++) ticks.push(Math.pow(10, d));
      } else {
        const step = niceStep(y1 / 5);
        for (let v = 0; v <= y1; v += step) ticks.push(v);
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
      const nt = Math.min(n, Math.max(2, Math.floor(pw / 40)));
      const seen = new Set();
      for (let q = 0; q < nt; q++) {
        const k = Math.round((q * (n - 1)) / Math.max(nt - 1, 1));
        if (seen.has(k)) continue;
        seen.add(k);
        g.fillText(spec.xlabel(k), l + (k + 0.5) * bw, base + 5);
      }
      g.fillText("kept slot (labelled by position)", l + pw / 2, base + font + 12);
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

  function niceStep(raw) {
    const p = Math.pow(10, Math.floor(Math.log10(raw || 1)));
    const m = raw / p;
    return (m >= 5 ? 5 : m >= 2 ? 2 : 1) * p;
  }

  // -- the player --------------------------------------------------------------------------------
  class Player {
    constructor(root, bytes, opts) {
      this.root = root;
      this.opts = opts || {};
      this.report = this.opts.report || null;
      this.h = null;
      this.st = null;
      this.page = null;
      this.raf = 0;
      this.playing = false;
      this.requested = null;
      this.lastReport = null;
      this.idleTimer = 0;
      this.renders = 0;
      this.buildSkeleton();
      this.onKey = (e) => this.key(e);
      document.addEventListener("keydown", this.onKey);
      this.load(bytes);
    }

    destroy() {
      this.playing = false;
      document.removeEventListener("keydown", this.onKey);
      clearTimeout(this.idleTimer);
      if (window.Plotly) this.root.querySelectorAll(".h2o-gd").forEach((gd) => window.Plotly.purge(gd));
    }

    // -- data ------------------------------------------------------------------------------------
    load(bytes) {
      this.mark("load");
      const { header: h, get } = decode(bytes);
      if (this.h && this.h.view === h.view && this.h.range[0] === h.range[0] && this.h.range[1] === h.range[1]) {
        return; // the same bytes again (a rerun that changed nothing)
      }
      const newView = !this.h || this.h.view !== h.view;
      const sameTrace = this.h && this.h.trace_id === h.trace_id;
      const prev = this.st;
      this.h = h;
      this.panels = h.panels.map((p) => panelData(h, p, get));
      this.mark("decoded");
      this.oracle = get(h.oracle);
      this.requested = null;
      if (newView) {
        const s = h.start;
        this.st = prev && sameTrace
          ? { ...prev }
          : { t: s.step, colour: s.colour, rows: s.rows, width: s.width, speed: s.speed, reveal: !!s.reveal };
        if (!SPEEDS.includes(this.st.speed)) this.st.speed = 5;
        this.st.t = this.opts.standalone ? clamp(this.st.t, h.range[0], h.range[1] - 1) : clamp(this.st.t, 0, h.steps - 1);
      }
      if (this.playing) this.clock = { t0: this.st.t, ms0: performance.now() };
      if (newView) {
        this.buildView();
        if (prev && sameTrace) this.sendReport(true); // the server may hold an older step
      } else {
        this.page = null;
        this.render();
      }
    }

    inRange(t) {
      return t >= this.h.range[0] && t < this.h.range[1];
    }

    needsLoad(t) {
      if (this.opts.standalone) return false;
      const [A, B] = this.h.range;
      const m = this.h.margin;
      return !this.inRange(t) || (t < A + m && A > 0) || (t >= B - m && B < this.h.steps);
    }

    keptAt(pi, t) {
      const P = this.panels[pi];
      const i = t - P.A;
      const pos = P.pos.subarray(P.offs[i], P.offs[i + 1]);
      const score = P.a.scores ? P.a.scores.subarray(P.offs[i], P.offs[i + 1]) : null;
      return { pos, score, victims: P.a.v_pos.subarray(P.vIdx[i], P.vIdx[i + 1]) };
    }

    storyAt(pi, t) {
      return this.panels[pi].meta.stories[t - this.panels[pi].A];
    }

    token(pos) {
      const toks = this.h.tokens;
      return toks && pos < toks.length ? toks[pos] : null;
    }

    posLabel(pos) {
      const tok = this.token(pos);
      return `position ${pos}` + (tok !== null ? ` ${JSON.stringify(tok)}` : "");
    }

    // -- skeleton and controls -------------------------------------------------------------------
    buildSkeleton() {
      const r = this.root;
      r.classList.add("h2o-player");
      r.replaceChildren();
      const bar = el("div", "h2o-bar");
      const buttons = el("div", "h2o-buttons");
      const mk = (label, title, fn, cls) => {
        const b = el("button", "h2o-btn" + (cls ? " " + cls : ""));
        if (ICON[label]) b.innerHTML = ICON[label]; // our own markup, never data
        else b.textContent = label;
        b.type = "button";
        b.title = title;
        b.setAttribute("aria-label", title);
        b.addEventListener("click", (e) => { e.preventDefault(); fn(); });
        buttons.appendChild(b);
        return b;
      };
      this.btn = {
        first: mk("first", "First step (Home)", () => this.jump(0)),
        back100: mk("−100", "Back 100 steps", () => this.move(-100)),
        back10: mk("−10", "Back 10 steps (Shift+←)", () => this.move(-10)),
        back: mk("−1", "Back one step (←)", () => this.move(-1)),
        play: mk("play", "Play / pause (Space)", () => this.togglePlay(), "h2o-play"),
        next: mk("+1", "Forward one step (→)", () => this.move(1)),
        next10: mk("+10", "Forward 10 steps (Shift+→)", () => this.move(10)),
        next100: mk("+100", "Forward 100 steps", () => this.move(100)),
        last: mk("last", "Last step (End)", () => this.jump(Infinity)),
      };
      this.setPlayLabel(false);
      for (const k in this.btn) this.btn[k].dataset.action = k;
      bar.appendChild(buttons);
      const where = el("div", "h2o-where");
      this.stepLabel = el("span", "h2o-steplabel");
      where.appendChild(this.stepLabel);
      const speedLab = el("label", "h2o-speed");
      speedLab.appendChild(el("span", null, "Play speed "));
      this.speedSel = el("select");
      for (const s of SPEEDS) {
        const o = el("option", null, `${s} step${s > 1 ? "s" : ""}/s`);
        o.value = String(s);
        this.speedSel.appendChild(o);
      }
      this.speedSel.addEventListener("change", () => {
        this.st.speed = Number(this.speedSel.value);
        if (this.playing) this.clock = { t0: this.st.t, ms0: performance.now() };
        this.touched();
      });
      speedLab.appendChild(this.speedSel);
      where.appendChild(speedLab);
      this.status = el("span", "h2o-status");
      where.appendChild(this.status);
      bar.appendChild(where);
      this.slider = el("input", "h2o-slider");
      this.slider.type = "range";
      this.slider.setAttribute("aria-label", "Decode step");
      this.slider.addEventListener("input", () => this.jump(Number(this.slider.value), true));
      bar.appendChild(this.slider);
      r.appendChild(bar);

      const options = el("div", "h2o-options");
      this.opt = {
        colour: this.segmented(options, "Colour scale", [["log", "log"], ["linear", "linear"]], (v) => { this.st.colour = v; this.redraw(); }),
        rows: this.segmented(options, "Rows", [["kept", "kept positions"], ["all", "every position (pooled)"]], (v) => { this.st.rows = v; this.page = null; this.render(); this.touched(); }),
        width: this.segmented(options, "Steps shown", [], (v) => { this.st.width = Number(v); this.page = null; this.render(); this.touched(); }),
      };
      const rev = el("label", "h2o-reveal");
      this.revealBox = el("input");
      this.revealBox.type = "checkbox";
      this.revealBox.addEventListener("change", () => { this.st.reveal = this.revealBox.checked; this.render(); this.touched(); });
      rev.appendChild(this.revealBox);
      rev.appendChild(el("span", null, " reveal the whole run (steps not reached yet)"));
      options.appendChild(rev);
      r.appendChild(options);
      this.panelsBox = el("div", "h2o-panels");
      r.appendChild(this.panelsBox);
      this.metricsBox = el("div", "h2o-metrics");
      r.appendChild(this.metricsBox);
      r.__h2o = this;
    }

    setPlayLabel(playing) {
      this.btn.play.innerHTML = (playing ? ICON.pause : ICON.play) + `<span>${playing ? "Pause" : "Play"}</span>`;
    }

    segmented(parent, label, items, onPick) {
      const g = el("div", "h2o-seg");
      g.appendChild(el("span", "h2o-seg-label", label));
      const box = el("div", "h2o-seg-items");
      g.appendChild(box);
      parent.appendChild(g);
      const seg = {
        box,
        set: (items2) => {
          box.replaceChildren();
          for (const [value, text] of items2) {
            const b = el("button", "h2o-seg-btn", text);
            b.type = "button";
            b.dataset.value = String(value);
            b.addEventListener("click", () => { onPick(b.dataset.value); seg.mark(b.dataset.value); });
            box.appendChild(b);
          }
        },
        mark: (value) => box.querySelectorAll("button").forEach((b) => b.classList.toggle("on", b.dataset.value === String(value))),
      };
      seg.set(items);
      return seg;
    }

    syncControls() {
      const st = this.st;
      // Steps shown at once: 64, 128 or 256, or the whole range when it is shorter.
      const R = this.h.range[1] - this.h.range[0];
      const widths = [64, 128, 256].filter((w) => w < R).map((w) => [w, String(w)]);
      if (R <= 256) widths.push([256, `all ${R}`]);
      this.opt.width.set(widths);
      this.opt.colour.mark(st.colour);
      this.opt.rows.mark(st.rows);
      this.opt.width.mark(Math.min(st.width, R) === R ? (R <= 256 ? 256 : st.width) : st.width);
      this.revealBox.checked = st.reveal;
      this.speedSel.value = String(st.speed);
      const sa = this.opts.standalone;
      this.slider.min = String(sa ? this.h.range[0] : 0);
      this.slider.max = String(sa ? this.h.range[1] - 1 : this.h.steps - 1);
      const anyScored = this.panels.some((P) => !P.error && P.meta.scored);
      this.opt.colour.box.parentElement.style.display = anyScored ? "" : "none";
    }

    // -- interaction -----------------------------------------------------------------------------
    move(delta) {
      this.pause(false);
      this.jump(this.st.t + delta);
    }

    jump(t, fromSlider) {
      if (!fromSlider) this.pause(false);
      const lo = this.opts.standalone ? this.h.range[0] : 0;
      const hi = this.opts.standalone ? this.h.range[1] - 1 : this.h.steps - 1;
      this.st.t = clamp(Math.round(t === Infinity ? hi : t), lo, hi);
      this.touched();
      this.schedule();
    }

    togglePlay() {
      if (this.playing) { this.pause(true); return; }
      const end = this.opts.standalone ? this.h.range[1] - 1 : this.h.steps - 1;
      if (this.st.t >= end) this.st.t = this.opts.standalone ? this.h.range[0] : 0; // again from the start
      this.playing = true;
      this.clock = { t0: this.st.t, ms0: performance.now() };
      this.setPlayLabel(true);
      this.root.dataset.playing = "1";
      const tick = (now) => {
        if (!this.playing) return;
        this.advance(now);
        this.render();
        if (this.playing) requestAnimationFrame(tick);
      };
      requestAnimationFrame(tick);
    }

    advance(now) {
      const st = this.st;
      const [, B] = this.h.range;
      const end = this.opts.standalone ? B - 1 : this.h.steps - 1;
      const target = this.clock.t0 + Math.floor(((now - this.clock.ms0) * st.speed) / 1000);
      if (target >= end) {
        st.t = end;
        this.pause(true);
        return;
      }
      if (target >= B) { // the next range is not here yet: hold at the edge and keep asking
        st.t = B - 1;
        this.clock = { t0: st.t, ms0: now };
        this.request();
        return;
      }
      st.t = target;
      if (this.needsLoad(st.t)) this.request();
    }

    pause(report) {
      if (!this.playing) return;
      this.playing = false;
      this.setPlayLabel(false);
      delete this.root.dataset.playing;
      this.schedule();
      if (report) this.sendReport(true);
    }

    key(e) {
      if (!this.root.isConnected || e.ctrlKey || e.metaKey || e.altKey) return;
      const tgt = e.target;
      const tag = tgt && tgt.tagName;
      if (tgt && tgt !== this.slider && (tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || tgt.isContentEditable)) return;
      const k = e.key;
      const big = e.shiftKey ? 10 : 1;
      if (k === "ArrowRight" || k === "PageDown") this.move(big);
      else if (k === "ArrowLeft" || k === "PageUp") this.move(-big);
      else if (k === " " || k === "k") this.togglePlay();
      else if (k === "Home") this.jump(0);
      else if (k === "End") this.jump(Infinity);
      else return;
      e.preventDefault();
      e.stopPropagation();
    }

    /** The user did something: tell the server once they stop (the link then holds the view). */
    touched() {
      if (!this.report) return;
      clearTimeout(this.idleTimer);
      this.idleTimer = setTimeout(() => { if (!this.playing) this.sendReport(false); }, IDLE_REPORT_MS);
    }

    view() {
      const { t, colour, rows, width, speed, reveal } = this.st;
      return { step: t, colour, rows, width, speed, reveal };
    }

    sendReport(now) {
      if (!this.report) return;
      clearTimeout(this.idleTimer);
      const v = this.view();
      const key = JSON.stringify(v);
      if (!now && key === this.lastReport) return;
      this.lastReport = key;
      this.report(v);
      this.syncUrl(v);
    }

    /** Keep the address bar a shareable link to what is on screen (the browser owns the step). */
    syncUrl(v) {
      const spec = this.h.url;
      if (!spec || this.opts.standalone) return;
      try {
        const u = new URL(window.location.href);
        u.searchParams.set(spec.step, String(v.step));
        for (const name in spec.defaults) {
          const val = v[name];
          if (val === undefined) continue;
          if (val === spec.defaults[name]) u.searchParams.delete(name);
          else u.searchParams.set(name, typeof val === "boolean" ? (val ? "1" : "0") : String(val));
        }
        if (u.href !== window.location.href) window.history.replaceState(window.history.state, "", u.href);
      } catch (e) {
        /* a sandboxed page may refuse: the server still holds the step */
      }
    }

    /** Ask the server for the range around the current step (at most once per few seconds). */
    request() {
      if (!this.report || this.opts.standalone) return;
      const now = performance.now();
      if (this.requested && now - this.requested < REQUEST_RETRY_MS) return;
      this.requested = now;
      this.sendReport(true);
    }

    schedule() {
      if (this.raf || this.playing) return;
      this.raf = requestAnimationFrame(() => { this.raf = 0; this.render(); });
    }

    // -- drawing ---------------------------------------------------------------------------------
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
    }

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
    }

    /** Milestones (performance.now) for the benchmark: load, decoded, first render. */
    mark(name) {
      const m = this.marks || (this.marks = {});
      if (!(name in m)) m[name] = performance.now();
    }

    timed(name, t0) {
      const tm = this.timings || (this.timings = {});
      (tm[name] || (tm[name] = [])).push(performance.now() - t0);
      if (tm[name].length > 200) tm[name].shift();
    }

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
    }

    config() {
      return { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d"] };
    }

    buildView() {
      const h = this.h;
      this.theme = themeOf(this.root);
      this.root.classList.toggle("h2o-presenter", !!h.presenter);
      if (window.Plotly) this.root.querySelectorAll(".h2o-gd").forEach((gd) => window.Plotly.purge(gd));
      this.panelsBox.replaceChildren();
      this.metricsBox.replaceChildren();
      this.panelsBox.style.gridTemplateColumns = `repeat(${this.panels.length}, minmax(0, 1fr))`;
      this.views = this.panels.map((P, i) => {
        const box = el("div", "h2o-panel");
        const head = el("h3", "h2o-title", P.meta.title);
        head.style.borderBottomColor = P.meta.colour;
        box.appendChild(head);
        this.panelsBox.appendChild(box);
        if (P.error) {
          box.appendChild(el("div", "h2o-error", P.error));
          return null;
        }
        const v = { box, story: el("div", "h2o-story") };
        box.appendChild(v.story);
        v.detail = this.plotBox(box, "h2o-detail", h.presenter ? 500 : 430);
        const cap = el("div", "h2o-cap");
        box.appendChild(cap);
        v.bars = { cap, chart: new SlotChart(box, h.presenter ? 300 : 260) };
        const legend = [[P.meta.colour, P.meta.scored ? "kept slot (height: its score)" : "kept slot (height: its age)"], [C.evict, "evicted at this step"]];
        if (P.meta.window) legend.push([C.protectFill, `protected recent window (${P.meta.window})`, C.protectLine]);
        if (P.meta.sinks) legend.push([C.sinkFill, `pinned sinks (${P.meta.sinks})`, C.sinkLine]);
        v.bars.chart.setLegend(legend);
        v.overview = h.presenter ? null : this.plotBox(box, "h2o-overview", 300);
        return v;
      });
      this.mViews = h.presenter ? [] : [this.plotBox(this.metricsBox, "h2o-mass", 330), this.plotBox(this.metricsBox, "h2o-recall", 330)];
      this.syncControls();
      this.redraw(true);
    }

    /** Redraw everything drawn once per view (overview, metrics) and force the detail view. */
    redraw(first) {
      this.page = null;
      this.render(); // the controls, stories, kept slots and detail view first: the first paint
      clearTimeout(this.lateTimer);
      this.lateTimer = setTimeout(() => {
        if (!window.Plotly) return;
        this.panels.forEach((P, i) => { if (!P.error && this.views[i].overview) this.drawOverview(i); });
        if (this.mViews.length) this.drawMetrics();
        this.placeAll();
      }, 0);
      if (!first) this.touched();
    }

    /** plotly.js has arrived (the stories and kept slots did not need it): draw the plots. */
    plotlyReady() {
      if (this.h) this.redraw(true);
    }

    render() {
      const t = this.st.t;
      const h = this.h;
      this.stepLabel.textContent = `step ${comma(t)} of ${comma(h.steps - 1)}`;
      this.slider.value = String(t);
      this.root.dataset.step = String(t);
      if (!this.inRange(t)) {
        this.status.textContent = "loading steps…";
        this.root.dataset.loading = "1";
        this.request();
        return;
      }
      const waiting = this.playing && t === h.range[1] - 1 && h.range[1] < h.steps;
      this.status.textContent = waiting ? "loading the next steps…" : "";
      delete this.root.dataset.loading;
      if (this.needsLoad(t)) this.request();
      this.ensurePage(t);
      this.panels.forEach((P, i) => {
        if (P.error) return;
        const v = this.views[i];
        v.story.textContent = this.storyAt(i, t);
        this.drawBars(i, t);
        this.place(v.detail, t);
        if (v.overview) this.place(v.overview, t, this.page);
      });
      for (const mv of this.mViews) this.place(mv, t);
      this.renders++;
      this.mark("rendered");
      this.root.dataset.rendered = String(t);
    }

    /** The steps the detail heatmap shows: `width` steps inside the loaded range, around t. */
    ensurePage(t) {
      if (!window.Plotly) return;
      const [A, B] = this.h.range;
      const W = Math.min(this.st.width, B - A);
      const pg = this.page;
      if (pg && pg[1] - pg[0] === W && pg.rows === this.st.rows) {
        const m = Math.floor(W / 8);
        const okLeft = t >= pg[0] + m || pg[0] === A;
        const okRight = t < pg[1] - m || pg[1] === B;
        if (t >= pg[0] && t < pg[1] && okLeft && okRight) return;
      }
      const p0 = clamp(t - Math.floor(W / 2), A, B - W);
      this.page = [p0, p0 + W];
      this.page.rows = this.st.rows;
      this.panels.forEach((P, i) => { if (!P.error) this.drawDetail(i); });
    }

    /** Cursor at step t, a veil over the steps after it, and (overview) the detail steps. */
    place(v, t, outline) {
      const fl = v.gd._fullLayout;
      if (!fl || !fl.xaxis || !fl.xaxis.l2p) return;
      const xa = fl.xaxis;
      const ya = fl.yaxis;
      const x = (val) => xa._offset + xa.l2p(val);
      const left = xa._offset;
      const right = xa._offset + xa._length;
      const top = ya._offset;
      const put = (node, x0, x1) => {
        const a = clamp(x0, left, right);
        const b = clamp(x1, left, right);
        node.style.display = b > a || x1 === x0 ? "" : "none";
        node.style.left = a + "px";
        node.style.width = Math.max(0, b - a) + "px";
        node.style.top = top + "px";
        node.style.height = ya._length + "px";
      };
      const xc = x(t);
      put(v.cur, xc, xc);
      if (xc < left || xc > right) v.cur.style.display = "none";
      if (this.st.reveal) v.mask.style.display = "none";
      else put(v.mask, x(t + 0.5), right);
      if (outline) put(v.win, x(outline[0] - 0.5), x(outline[1] - 0.5));
      else v.win.style.display = "none";
    }

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
    }

    drawDetail(i) {
      const T0 = performance.now();
      try { return this._drawDetail(i); } finally { this.timed("drawDetail", T0); }
    }

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
      const yaxis = { range: [y.length ? y[0] - (kept ? 0.5 : stride / 2) : -0.5, y.length ? y[y.length - 1] + (kept ? 0.5 : stride / 2) : 0.5] };
      if (kept) {
        const nt = Math.min(rows.length, this.h.presenter ? 6 : 9);
        const tv = [];
        for (let k = 0; k < nt; k++) tv.push(Math.round((k * (rows.length - 1)) / Math.max(nt - 1, 1)));
        const uniq = [...new Set(tv)];
        yaxis.tickvals = uniq;
        yaxis.ticktext = uniq.map((r) => String(rows[r]));
      }
      const title = (P.meta.scored ? `${P.meta.score_label} while kept` : "age of each kept position (no score)") + ` — steps ${p0}–${p1 - 1}`;
      const ytitle = kept ? "kept position (one row each)" : "position" + (stride > 1 ? ` (pooled by ${stride})` : "");
      const lay = this.layout(v.detail, title, this.h.presenter ? 500 : 430, "decode step", ytitle, { shapes });
      lay.xaxis.range = [p0 - 0.5, p1 - 0.5];
      Object.assign(lay.yaxis, yaxis);
      const gd = v.detail.gd;
      const T2 = performance.now();
      window.Plotly.react(gd, data, this.fitLegend(v.detail, lay, data), this.config());
      this.timed("detail.react", T2);
      if (!gd.__h2oBound) {
        gd.__h2oBound = true;
        gd.on("plotly_click", (ev2) => {
          const pt = ev2 && ev2.points && ev2.points[0];
          if (pt && pt.x !== undefined) this.jump(Math.round(Number(pt.x)));
        });
        gd.on("plotly_afterplot", () => this.placeAll());
      }
    }

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
    }

    drawBars(i, t) {
      const T0 = performance.now();
      try { return this._drawBars(i, t); } finally { this.timed("drawBars", T0); }
    }

    _drawBars(i, t) {
      const P = this.panels[i];
      const v = this.views[i];
      const { pos, score, victims } = this.keptAt(i, t);
      const n = pos.length;
      const meta = P.meta;
      const log = !meta.scored || this.st.colour === "log";
      const lo = meta.scored ? (log ? meta.hi * Math.pow(10, -LOG_DECADES) : 0) : 0.5;
      const hi = meta.scored ? meta.hi : Math.max(this.h.steps, 2);
      const values = new Float64Array(n);
      const gone = new Uint8Array(n);
      for (let k = 0, j = 0; k < n; k++) {
        values[k] = score ? score[k] : t - pos[k];
        if (j < victims.length && pos[k] === victims[j]) { gone[k] = 1; j++; }
      }
      const budget = meta.budget;
      const out = victims.length;
      v.bars.cap.textContent = n > budget
        ? `Kept slots at step ${t}: ${n} positions — the budget of ${budget} plus position ${t}, just admitted; ${out === 1 ? "one is" : out + " are"} evicted now`
        : `Kept slots at step ${t}: ${n} of ${budget} slots in use — ${n < budget ? "room left, " : ""}nothing to evict`;
      v.bars.chart.draw({
        n, values, gone, log, lo, hi, colour: meta.colour, window: meta.window, sinks: meta.sinks,
        theme: this.theme, big: this.h.presenter,
        ytitle: meta.scored ? meta.score_label + (log ? " (log)" : "") : "age in steps (log)",
        xlabel: (k) => String(pos[k]),
        hover: (k) => {
          const val = values[k];
          const what = meta.scored ? `${meta.score_label}: ${fmt(val)}` : `age ${val} step${val === 1 ? "" : "s"}` + (val === 0 ? " (just admitted)" : "");
          return `slot ${k} · ${this.posLabel(pos[k])}\n${what}` + (gone[k] ? "\nevicted at this step" : "");
        },
      });
    }

    drawOverview(i) {
      const T0 = performance.now();
      try { return this._drawOverview(i); } finally { this.timed("drawOverview", T0); }
    }

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
      if (!gd.__h2oBound) {
        gd.__h2oBound = true;
        gd.on("plotly_click", (ev) => {
          const pt = ev && ev.points && ev.points[0];
          if (pt && pt.x !== undefined) this.jump(Math.round(Number(pt.x)));
        });
        gd.on("plotly_afterplot", () => this.placeAll());
      }
    }

    drawMetrics() {
      const T0 = performance.now();
      try { return this._drawMetrics(); } finally { this.timed("drawMetrics", T0); }
    }

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
        if (h.budget > 0 && h.budget < h.steps) {
          shapes.push({ type: "line", x0: h.budget, x1: h.budget, y0: 0, y1: 1, yref: "paper", line: { color: C.neutral, width: 1, dash: "dot" }, name: `cache full: evictions start (step ${h.budget})`, showlegend: true });
        }
        const mv = this.mViews[m];
        const lay = this.layout(mv, `${title} per step (thin) and running mean from step ${h.budget} (thick)`, 330, "decode step", ytitle, { shapes });
        lay.yaxis.range = [0, 1.02];
        lay.xaxis.range = [-0.5, h.steps - 0.5];
        const gd = mv.gd;
        window.Plotly.react(gd, data, this.fitLegend(mv, lay, data), this.config());
        if (!gd.__h2oBound) {
          gd.__h2oBound = true;
          gd.on("plotly_click", (ev) => {
            const pt = ev && ev.points && ev.points[0];
            if (pt && pt.x !== undefined) this.jump(Math.round(Number(pt.x)));
          });
          gd.on("plotly_afterplot", () => this.placeAll());
        }
      });
    }

    placeAll() {
      if (!this.h || !this.inRange(this.st.t)) return;
      const t = this.st.t;
      this.panels.forEach((P, i) => {
        if (P.error) return;
        const v = this.views[i];
        if (this.page) this.place(v.detail, t);
        if (v.overview) this.place(v.overview, t, this.page);
      });
      for (const mv of this.mViews) this.place(mv, t);
    }
  }

  return {
    decode,
    mount(root, bytes, opts) {
      return new Player(root, bytes, opts);
    },
  };
})();
