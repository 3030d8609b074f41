/*
 * The step-through player: draws one view of a replay and steps, plays and scrubs it in the
 * browser, with no round trip to the server inside the loaded range of steps.
 *
 * The server (h2o/player/playback.py) packs, per view and per range of steps, each panel's kept scores,
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
 * Used two ways: as a Streamlit custom component (app/player/__init__.py wraps it; `report`
 * sends the step and settings back when the user pauses or stops interacting, and asks for the
 * next range), and standalone in an exported HTML file (no server: the range is all there is).
 */
import { C, IDLE_REPORT_MS, REQUEST_RETRY_MS, SPEEDS } from "./constants.js";
import { clamp, comma, decode, describeChart, el, ICON, panelData, themeOf } from "./common.js";
import { PlotMethods } from "./plots.js";
import { SlotChart } from "./slots.js";
/** What takes its own keys: a focused button, link or ARIA widget (a page's other controls). */
const WIDGET = 'button, a[href], summary, [contenteditable="true"], [role="button"], [role="tab"], '
  + '[role="radio"], [role="checkbox"], [role="switch"], [role="slider"], [role="spinbutton"], '
  + '[role="option"], [role="menuitem"], [role="combobox"], [role="listbox"], [role="grid"]';

// -- the player --------------------------------------------------------------------------------
export class Player {
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
    const where = (this.where = el("div", "h2o-where"));
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
    this.options = options;
    // Presenter mode: the view settings behind a button in the bar (buildView), so the first
    // heatmap fits a projected screen under the controls.
    this.settings = el("details", "h2o-settings");
    this.settings.appendChild(el("summary", null, "View settings"));
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
    // In a notebook the page's keys are the notebook's: the player takes them only while it has
    // the focus (a click on it gives it; opts.keysInside). Its own root's focus: a host such as
    // marimo draws widgets in a shadow root, where the document's activeElement is the host.
    if (this.opts.keysInside && !this.root.contains(this.root.getRootNode().activeElement)) return;
    const k = e.key;
    // The keyboard alone: another widget's keys are its own (a radio group's arrows, a button's
    // Space), and Space or Enter on one of the player's buttons presses that button.
    const widget = tgt && tgt !== this.slider && tgt.closest ? tgt.closest(WIDGET) : null;
    if (widget && (!this.root.contains(widget) || k === " " || k === "Enter")) return;
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

  buildView() {
    const h = this.h;
    this.theme = themeOf(this.root);
    this.root.classList.toggle("h2o-presenter", !!h.presenter);
    if (h.presenter && this.options.parentElement !== this.settings) {
      this.settings.appendChild(this.options);
      this.where.appendChild(this.settings);
    } else if (!h.presenter && this.options.parentElement === this.settings) {
      this.settings.remove();
      this.panelsBox.before(this.options);
    }
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
      // Projected, the story goes under the heatmap: the heatmap is what the room looks at.
      if (!h.presenter) box.appendChild(v.story);
      v.detail = this.plotBox(box, "h2o-detail", h.presenter ? 500 : 430);
      if (h.presenter) box.appendChild(v.story);
      const cap = el("div", "h2o-cap");
      box.appendChild(cap);
      v.bars = { cap, chart: new SlotChart(box, h.presenter ? 300 : 260) };
      const slot = P.meta.selects ? "read position" : "kept slot";
      const legend = [[P.meta.colour, P.meta.scored ? `${slot} (height: its score)` : `${slot} (height: its age)`]];
      if (!P.meta.selects) legend.push([C.evict, "evicted at this step"]); // a selection evicts nothing
      if (P.meta.window) legend.push([C.protectFill, `protected recent window (${P.meta.window})`, C.protectLine]);
      if (P.meta.sinks) legend.push([C.sinkFill, `pinned sinks (${P.meta.sinks})`, C.sinkLine]);
      v.bars.chart.setLegend(legend);
      v.overview = h.presenter ? null : this.plotBox(box, "h2o-overview", 300);
      // Each chart is named by its title and described by the step's story ("step 273: evicted
      // position 241 …"), which every render rewrites; the kept slots by their own caption.
      describeChart(v.detail.wrap, "figure", v.detail.cap, [v.story]);
      describeChart(v.bars.chart.canvas, "img", cap, [v.story]);
      if (v.overview) describeChart(v.overview.wrap, "figure", v.overview.cap, [v.story]);
      return v;
    });
    this.mViews = h.presenter ? [] : [this.plotBox(this.metricsBox, "h2o-mass", 330), this.plotBox(this.metricsBox, "h2o-recall", 330)];
    for (const mv of this.mViews) {
      mv.said = el("p", "h2o-said");
      mv.said.hidden = true; // a description only: the plot shows these numbers on hover
      mv.wrap.appendChild(mv.said);
      describeChart(mv.wrap, "figure", mv.cap, [mv.said]);
    }
    this.syncControls();
    this.redraw(true);
  }

  /** Redraw everything drawn once per view (overview, metrics) and force the detail view. */
  redraw(first) {
    this.page = null;
    // The controls, stories and kept slots first — the first paint — then, a frame later, the
    // first panel's detail heatmap, a frame after it the other panels', and a frame after those
    // the overview and the metrics (a browser paints only between tasks: drawn in one, every
    // plot waits for the last).
    this.lateDetail = true;
    this.render();
    clearTimeout(this.lateTimer);
    cancelAnimationFrame(this.lateFrame);
    const afterPaint = (draw) => {
      this.lateFrame = requestAnimationFrame(() => { this.lateTimer = setTimeout(draw, 0); });
    };
    this.lateTimer = setTimeout(() => {
      this.lateDetail = false;
      if (!window.Plotly) return;
      this.page = null;
      this.ensurePage(this.st.t, 1);
      this.placeAll();
      afterPaint(() => {
        this.panels.forEach((P, i) => { if (i > 0 && !P.error) this.drawDetail(i); });
        this.placeAll();
        afterPaint(() => {
          this.panels.forEach((P, i) => { if (!P.error && this.views[i].overview) this.drawOverview(i); });
          if (this.mViews.length) this.drawMetrics();
          this.placeAll();
        });
      });
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
      this.followRows(i, t);
      if (v.overview) this.place(v.overview, t, this.page);
    });
    for (const mv of this.mViews) this.place(mv, t);
    if (this.mViews.length) this.sayMetrics(t);
    this.renders++;
    this.mark("rendered");
    this.root.dataset.rendered = String(t);
  }

  /** The steps the detail heatmap shows: `width` steps inside the loaded range, around t; on a
   * first draw, only the first `panels` panels' heatmaps (the caller draws the rest). */
  ensurePage(t, panels = Infinity) {
    if (!window.Plotly || this.lateDetail) return;
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
    const moved = pg !== null;
    this.page = [p0, p0 + W];
    this.page.rows = this.st.rows;
    if (!moved) {
      this.panels.forEach((P, i) => { if (i < panels && !P.error) this.drawDetail(i); });
      return;
    }
    // The cursor left the steps shown: paint the step first (story, slots, cursor), then redraw
    // the heatmaps after that frame — a click never waits for a heatmap.
    cancelAnimationFrame(this.pageFrame);
    this.pageFrame = requestAnimationFrame(() => setTimeout(() => {
      this.panels.forEach((P, i) => { if (!P.error) this.drawDetail(i); });
      this.placeAll();
    }, 0));
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

Object.assign(Player.prototype, PlotMethods);
