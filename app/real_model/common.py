"""What the Real model page's sections share: session keys, the policy settings, callbacks."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

import h2o
from app import controls, data, pages, state

# Re-exported: the sections read them here.
from app.real_model.claims import MARGIN, fmt_layers  # noqa: F401

STEP_PAGE = pages.STEP_THROUGH
GOTO, OPEN_ERROR = "_rm_goto", "_rm_open_error"
WINDOW, SINKS = "rm_recent_window", "rm_sinks"
TOP_K = 32
#: The methods the model runs as it reads (not one that reads a trace's key norms).
POLICY_NAMES = [n for n, cls in h2o.POLICIES.items() if not cls.reads_trace]
GEN_TEXT = "lighthouse"

ss = st.session_state


@dataclass(frozen=True)
class Settings:
    """The page's policy settings for the sections that run the model."""

    window: int
    sinks: int

    def params_for(self, name: str) -> dict[str, int]:
        """The settings that ``name`` takes (``h2o.policies.policy_params``; TOVA keeps its own
        window, the sliding window takes none)."""
        return controls.policy_settings(name, self.window, self.sinks)

    def refusal(self, name: str, budget: int) -> str | None:
        """Why ``name`` refuses ``budget`` with these settings, naming the fix; None if it
        runs."""
        return controls.refusal(name, budget, self.window, self.sinks)


def go(flag: str) -> None:
    """Callback of a "compute" button: the section runs the model on the rerun it starts."""
    ss[flag] = True


def open_in_step_through(key: str, upload: data.Upload | None = None) -> None:
    """Callback: select the trace ``key`` (registering ``upload`` under it once it loads) with its
    suggested settings and H2O vs StreamingLLM, mid-way into the run, then switch to the
    Step-through page. The sidebar upload's path (``controls.open_trace``); a trace that does not
    load leaves everything as it was and says why."""
    try:
        trace = controls.open_trace(key, upload)
    except ValueError as e:
        ss[OPEN_ERROR] = (
            f"Could not open {state.shown(key, 80)} in the step-through view: {state.md(e, 400)}."
        )
        return
    state.set_value(state.POLICY_A, "h2o")
    state.set_value(state.POLICY_B, "streaming-llm")
    ss[state.STEP] = min(trace.steps - 1, 4 * ss[state.BUDGET])
    ss[GOTO] = STEP_PAGE
