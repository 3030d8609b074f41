"""Where the player's JavaScript and the server's Python must agree, run both on the same input.

The browser decides by itself when to ask for the next range (``needsLoad``, against
``playback.needs_load``), colours the heatmaps it redraws (``scaleOf``, against
``figures.ColourScale``) and reads the server's payload (``decode``, against
``playback.decode``). Each pair is one rule written twice, in two languages no single tool reads:
node runs the browser's own modules here, so a change to one side that the other does not follow
fails a test.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import h2o
from app import figures
from h2o import player
from h2o.player import playback

ROOT = Path(__file__).resolve().parents[1]
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> str:
    """The player's modules written to a folder node can import from (its file URL)."""
    folder = tmp_path_factory.mktemp("player")
    for name in player.JS_FILES:
        (folder / name).write_text(player.module_source(name), encoding="utf-8")
    return folder.as_uri()


def run(modules: str, body: str, stdin: bytes = b"") -> object:
    """Run ``body`` (an async function body that returns JSON-able data) with the modules'
    exports in scope as ``common`` and ``Player``; its result, parsed."""
    script = (
        f'const common = await import("{modules}/common.js");\n'
        f'const {{ Player }} = await import("{modules}/player.js");\n'
        "const input = require('fs').readFileSync(0);\n"
        f"const out = await (async () => {{ {body} }})();\n"
        "process.stdout.write(JSON.stringify(out));\n"
    )
    wrapped = (
        "import { createRequire } from 'module'; const require = createRequire(import.meta.url);\n"
    )
    done = subprocess.run(
        [NODE, "--input-type=module", "-e", wrapped + script], input=stdin, capture_output=True
    )
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout)


def encode(trace, panels, rng: tuple[int, int], step: int) -> bytes:
    """The payload the server sends for ``panels`` over steps ``rng``, opening at ``step``."""
    return playback.encode(
        view="twins",
        trace_id=trace.name,
        trace=trace,
        panels=panels,
        rng=rng,
        range_blocks=[playback.range_block(p.replay, trace, *rng) for p in panels],
        run_blocks=[playback.run_block(p.replay) for p in panels],
        start={"step": step},
    )


def test_the_browser_asks_for_a_range_exactly_when_the_server_would(modules):
    cases = [
        (a, b, steps, t)
        for steps in (50, 400)
        for a, b in ((0, 32), (64, 192), (steps - 96, steps), (0, steps))
        for t in range(-1, steps + 1)
        if 0 <= a < b <= steps
    ]
    margins = {b - a: playback.margin(b - a) for a, b, _, _ in cases}
    got = run(
        modules,
        f"const M = {json.dumps(margins)}; const cases = JSON.parse(input);"
        "return cases.map(([a, b, steps, t]) => Player.prototype.needsLoad.call("
        "{ opts: {}, h: { range: [a, b], margin: M[b - a], steps },"
        " inRange: Player.prototype.inRange }, t));",
        json.dumps(cases).encode(),
    )
    want = [playback.needs_load((a, b), t, steps) for a, b, steps, t in cases]
    assert got == want


def test_the_browsers_colour_scale_is_the_servers(modules):
    his = [0.05, 1.0, 37.5, 4096.0]
    scores = [0.0, 1e-9, 1e-5, 0.003, 0.5, 1.0, 12.0, 4096.0]
    got = run(
        modules,
        f"const his = {json.dumps(his)}, scores = {json.dumps(scores)};"
        "return his.flatMap((hi) => [true, false].map((log) => {"
        " const s = common.scaleOf({ scored: true, hi, score_label: 'x' }, log, 100);"
        " return { zmin: s.zmin, zmax: s.zmax, v: scores.map(s.value) }; }));",
    )
    i = 0
    for hi in his:
        for log in (True, False):
            scale = figures.ColourScale(hi, log=log)
            lo, top = scale.zrange()
            assert got[i]["zmin"] == pytest.approx(lo) and got[i]["zmax"] == pytest.approx(top)
            want = scale.values(np.asarray(scores, dtype=np.float64))
            np.testing.assert_allclose(got[i]["v"], want, rtol=1e-6)  # float32 on the server
            i += 1


def test_a_scale_of_scores_below_zero_is_the_servers_too(modules):
    """K-norm's scores are minus a key's norm: the scale is linear from the lowest score, on both
    sides, whichever way the colour toggle is set."""
    spans = [(-19.5, -5.9), (-3.0, 2.0)]
    scores = [-19.5, -12.25, -5.9, 0.0, 2.0]
    got = run(
        modules,
        f"const spans = {json.dumps(spans)}, scores = {json.dumps(scores)};"
        "return spans.flatMap(([lo, hi]) => [true, false].map((log) => {"
        " const s = common.scaleOf({ scored: true, hi, lo, score_label: 'x' }, log, 100);"
        " return { zmin: s.zmin, zmax: s.zmax, v: scores.map(s.value) }; }));",
    )
    i = 0
    for lo, hi in spans:
        for log in (True, False):
            scale = figures.ColourScale(hi, log=log, floor=lo)
            assert not scale.log
            zmin, zmax = scale.zrange()
            assert got[i]["zmin"] == pytest.approx(zmin) and got[i]["zmax"] == pytest.approx(zmax)
            assert zmin < lo  # the lowest score is never the background's colour
            want = scale.values(np.asarray(scores, dtype=np.float64))
            np.testing.assert_allclose(got[i]["v"], want, rtol=1e-6)
            i += 1


def test_the_browser_reads_the_servers_payload_as_the_server_does(modules):
    trace = h2o.toy_trace()
    panels = [
        playback.Panel("A", "#1f77b4", h2o.replay(h2o.H2O(8, recent_window=2), trace)),
        playback.Panel("B", "#ff7f0e", h2o.replay(h2o.StreamingLLM(8, sinks=1), trace)),
    ]
    payload = encode(trace, panels, (0, trace.steps), 3)
    got = run(
        modules,
        "const { header, get } = common.decode(new Uint8Array(input));"
        "const arrays = {};"
        "header.panels.forEach((p, i) => { arrays[i] = {};"
        " for (const k in p.arrays) arrays[i][k] = Array.from(get(p.arrays[k])); });"
        "if (header.oracle) arrays.oracle = { oracle: Array.from(get(header.oracle)) };"
        "return { header, arrays };",
        payload,
    )
    header, arrays = playback.decode(payload)
    assert got["header"] == json.loads(json.dumps(header))
    assert set(got["arrays"]) == set(arrays)
    for key, named in arrays.items():
        assert set(got["arrays"][key]) == set(named)
        for name, a in named.items():
            np.testing.assert_array_equal(np.asarray(got["arrays"][key][name], a.dtype), a)


def test_the_browser_derives_each_steps_positions_as_the_server_recorded_them(modules):
    """An eviction panel's positions are derived in the browser (the first step's, then each step
    drops its victims and admits itself); a selection's (Quest: what each step reads, a position
    read, skipped and read again) are sent whole. Both equal the replay's own, step by step."""
    trace = h2o.load_trace(ROOT / "traces" / "lighthouse-L8-h0.npz")
    from h2o.policies.quest import Quest

    panels = [
        playback.Panel("A", "#1f77b4", h2o.replay(h2o.H2O(64, recent_window=8), trace)),
        playback.Panel("B", "#992255", h2o.replay(Quest(64), trace)),
    ]
    rng = (200, 260)
    payload = encode(trace, panels, rng, 210)
    got = run(
        modules,
        "const { header, get } = common.decode(new Uint8Array(input));"
        "return header.panels.map((p) => { const d = common.panelData(header, p, get);"
        " const out = []; for (let i = 0; i < d.B - d.A; i++)"
        " out.push(Array.from(d.pos.subarray(d.offs[i], d.offs[i + 1]))); return out; });",
        payload,
    )
    for panel, steps in zip(panels, got, strict=True):
        for i, pos in enumerate(steps):
            want, _ = panel.replay.kept_at(rng[0] + i)
            assert pos == want.tolist(), (panel.title, rng[0] + i)
    read = [set(s) for s in got[1]]
    assert any(read[i] - read[i - 1] for i in range(1, len(read)))  # pages come and go
