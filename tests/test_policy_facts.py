"""Facts about a method live on its class (``reads_attention``, ``pins_sinks``, ``own_window``,
``prefill_selection``), and the app reads them there, not from lists of names."""

from __future__ import annotations

import h2o
from app import controls
from app.lesson import part3


def test_the_facts_of_the_built_in_policies():
    facts = {
        n: (c.reads_attention, c.pins_sinks, c.own_window, getattr(c, "prefill_selection", False))
        for n, c in h2o.POLICIES.items()
    }
    assert facts["streaming-llm"] == (False, True, False, False)
    assert facts["tova"] == (True, False, True, False)
    assert facts["h2o"] == (True, False, False, True)
    assert facts["sliding-window"] == (False, False, False, False)


def test_the_app_reads_them_from_the_class(monkeypatch):
    assert part3.PINS_SINKS == ("streaming-llm",)
    assert controls.policy_settings("tova", 32, 4) == {}
    assert controls.policy_settings("h2o", 32, 4) == {"recent_window": 32}
    # a policy whose class says it keeps its own window is left alone, whatever its name
    monkeypatch.setattr(h2o.POLICIES["scissorhands"], "own_window", True)
    assert "recent_window" not in controls.policy_settings("scissorhands", 32, 4)
