"""The step-through player in a notebook (Jupyter, JupyterLab, VS Code, Colab, marimo).

An anywidget whose front end is the app's own (:mod:`h2o.player`: the same ES modules, payload
and colour scale), offline: plotly.js comes from the installed ``plotly`` package, sent once per
page (to the first player that asks for it), never from a CDN. ::

    import h2o
    from h2o.notebook import Player

    Player(h2o.canonical_trace(), "h2o", "scissorhands", budget=256)

A policy is a name from :data:`h2o.POLICIES`, a class (yours too, defined in a cell) or a fresh
instance. Stepping, playing, the slider and the keys run in the browser; when the step nears the
edge of the loaded range the browser asks the kernel for the next one, as the app asks its
server — the only message it sends (none per step, none on a pause). Needs
``pip install 'h2o[notebook]'`` (anywidget).
"""

from __future__ import annotations

import functools
import importlib.util
import math
from pathlib import Path
from typing import Any

import anywidget
import traitlets

from h2o import player as front
from h2o.player import constants, playback
from h2o.policies import POLICIES, Policy, make_policy
from h2o.policies.registry import build
from h2o.replay import replay
from h2o.trace import Trace

#: Panel colours: the app's H2O blue and StreamingLLM orange (mid-tones for light and dark).
COLOURS = ("#3D9DF3", "#F28E2B")

_ESM = """
const bytesOf = (v) => (v instanceof DataView ? new Uint8Array(v.buffer, v.byteOffset, v.byteLength)
  : v instanceof ArrayBuffer ? new Uint8Array(v) : new Uint8Array(v.buffer || v));
// plotly.js is the installed plotly package's own file, asked of the kernel once per page by the
// first player that needs it (never a CDN; not in every widget's state: it is 4.6 MB). The
// others wait for the page's "h2o-plotly" event; one whose asker went away asks again.
function withPlotly(model, ready) {
  if (window.Plotly) { ready(); return () => {}; }
  const arrived = () => window.dispatchEvent(new Event("h2o-plotly"));
  const inject = () => {
    const source = model.get("plotly_js");
    if (source && !window.Plotly) {
      const s = document.createElement("script");
      s.textContent = source;
      document.head.appendChild(s);
    }
    if (window.Plotly) arrived();  // from this script, or one the page loaded meanwhile
  };
  const ask = () => {
    if (window.Plotly) { arrived(); return; }
    window.__h2oPlotlyAsked = true;
    model.send({ need: "plotly" });
  };
  model.on("change:plotly_js", inject);
  window.addEventListener("h2o-plotly", ready, { once: true });
  inject();  // a state saved with the notebook may carry it already
  if (!window.__h2oPlotlyAsked) ask();
  const retry = setTimeout(ask, 15000);
  return () => { clearTimeout(retry); window.removeEventListener("h2o-plotly", ready); };
}
export default {
  render({ model, el }) {
    // The stylesheet, once per page — or per shadow root: marimo draws each widget in one.
    const scope = el.getRootNode() instanceof ShadowRoot ? el.getRootNode() : document.head;
    if (!scope.querySelector("#h2o-player-css")) {
      const style = document.createElement("style");
      style.id = "h2o-player-css";
      style.textContent = model.get("css");
      scope.appendChild(style);
    }
    const root = document.createElement("div");
    root.className = "h2o-root";
    root.tabIndex = 0;  // a click gives the player the keys; else they are the notebook's
    // ...and while it has them, JupyterLab's own shortcuts (Lumino's) leave them alone.
    root.dataset.lmSuppressShortcuts = "true";
    el.appendChild(root);
    const player = H2OPlayer.mount(root, bytesOf(model.get("payload")), {
      // The kernel only serves ranges: the browser's step is sent when it needs the next range,
      // never per step nor when the user pauses (root.__h2o is the player, set before it loads).
      report: (view) => { if (root.__h2o.needsLoad(view.step)) model.send({ view }); },
      keysInside: true,
    });
    model.on("change:payload", () => player.load(bytesOf(model.get("payload"))));
    const stop = withPlotly(model, () => player.plotlyReady());
    return () => { stop(); player.destroy(); };
  },
};
"""


@functools.cache
def plotly_js() -> str:
    """The installed ``plotly`` package's plotly.min.js, read (once) without importing plotly."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or spec.origin is None:
        raise ValueError("the player needs the plotly package for plotly.js: pip install plotly")
    return (Path(spec.origin).parent / "package_data" / "plotly.min.js").read_text("utf-8")


def make(spec: str | type[Policy] | Policy, budget: int, params: dict[str, Any]) -> Policy:
    """A fresh policy from a name, a class or an instance (``ValueError`` naming what is wrong)."""
    if isinstance(spec, str):
        return make_policy(spec, budget, **params)
    if isinstance(spec, type) and issubclass(spec, Policy):
        return build(spec, budget, **params)  # the registry is left as it is
    if isinstance(spec, Policy):
        if len(spec) or spec.last_pos >= 0:
            raise ValueError(f"{spec!r} has already taken steps: pass a fresh one, or its class")
        return spec
    raise ValueError(f"a policy is a name ({', '.join(POLICIES)}), a Policy class or instance")


class Player(anywidget.AnyWidget):
    """Two policies side by side on a trace, stepped in the browser (see the module docstring).

    ``budget``, ``recent_window``, ``sinks`` and ``top_k`` go to the policies that take them.
    A policy that fails on the trace raises ``ValueError`` here, naming it, rather than leaving
    a blank widget.
    """

    _esm = traitlets.Unicode(front.bundle() + _ESM).tag(sync=True)
    payload = traitlets.Bytes().tag(sync=True)
    css = traitlets.Unicode().tag(sync=True)
    #: plotly.js, sent only when the page asks (its first player; see the module's script).
    plotly_js = traitlets.Unicode().tag(sync=True)

    def __init__(
        self,
        trace: Trace,
        a: str | type[Policy] | Policy = "h2o",
        b: str | type[Policy] | Policy = "streaming-llm",
        *,
        budget: int = 256,
        top_k: int = 32,
        step: int = 0,
        **params: Any,
    ) -> None:
        if not isinstance(trace, Trace):
            raise ValueError(f"trace must be an h2o.Trace, got {type(trace).__name__}")
        panels = []
        for side, spec, colour in zip("AB", (a, b), COLOURS, strict=True):
            policy = make(spec, budget, params)
            try:
                rep = replay(policy, trace, top_k, record=True)
            except Exception as e:
                raise ValueError(f"policy {side} ({policy!r}) failed on {trace.name}: {e}") from e
            panels.append(playback.Panel(f"{side} · {rep.label}", colour, rep))
        self.trace, self.panels = trace, panels
        fill = max(int(p.replay.n_kept.max()) for p in panels if p.replay is not None)
        self.length = playback.range_length(fill, trace.steps)
        self.step = max(0, min(int(step), trace.steps - 1))
        self.view = f"notebook:{trace.name}:{panels[0].title}:{panels[1].title}"
        self.rng = playback.range_around(self.step, trace.steps, self.length)
        super().__init__(
            payload=self._encode(self.rng),
            css=front.CSS_FILE.read_text("utf-8"),
        )
        plotly_js()  # here, not in the browser, is where a missing plotly package is said
        self.on_msg(self._on_report)

    def _encode(self, rng: tuple[int, int]) -> bytes:
        return playback.encode(
            view=self.view,
            trace_id=self.trace.name,
            trace=self.trace,
            panels=self.panels,
            rng=rng,
            range_blocks=[playback.range_block(p.replay, self.trace, *rng) for p in self.panels],
            run_blocks=[playback.run_block(p.replay) for p in self.panels],
            start={"step": self.step, **constants.VIEW_DEFAULTS},
        )

    def _on_report(self, _widget: Any, content: Any, _buffers: Any) -> None:
        """The browser's step, when it nears the edge of the loaded range: send the range
        around it if that is another one; or the page's request for plotly.js. Browser input:
        anything else is ignored."""
        if content == {"need": "plotly"}:
            self.plotly_js = plotly_js()
            return
        view = content.get("view") if isinstance(content, dict) else None
        t = view.get("step") if isinstance(view, dict) else None
        if not isinstance(t, int | float) or isinstance(t, bool) or not math.isfinite(t):
            return
        self.step = max(0, min(int(t), self.trace.steps - 1))
        rng = playback.range_around(self.step, self.trace.steps, self.length, self.rng)
        if rng != self.rng:
            self.rng = rng
            self.payload = self._encode(rng)
