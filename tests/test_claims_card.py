"""The H2O policy card as the app quotes it: the project's specification, introduced as such, its
sentences quoted whole and credited to it (not to the paper it is based on).

The card ships with the project (``docs/reference/h2o-policy-card.txt``, a copy of the
workspace's ``../shared/h2o-policy-card.txt``): the quoted passages are checked against its text,
and the copy against the workspace's card where the workspace has one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import h2o
from app import card
from h2o.policies.base import ScoredPolicy

ROOT = Path(__file__).resolve().parents[1]
MAIN = str(ROOT / "app" / "main.py")
CARD_FILE = ROOT / "docs" / "reference" / "h2o-policy-card.txt"
WORKSPACE_CARD = ROOT.parent / "shared" / "h2o-policy-card.txt"


def test_the_shipped_card_is_the_workspaces():
    if not WORKSPACE_CARD.is_file():
        pytest.skip(f"no workspace card to compare with ({WORKSPACE_CARD})")
    assert CARD_FILE.read_bytes() == WORKSPACE_CARD.read_bytes()


def card_text() -> str:
    # The card sets apostrophes as ’; the app's quotes use the plain one.
    return " ".join(CARD_FILE.read_text(encoding="utf-8").replace("’", "'").split())


def test_the_cost_passages_are_whole_sentences_of_the_card():
    text = card_text()
    for passage in (card.CARD_COST, card.CARD_COMPLEXITY):
        at = text.find(passage)
        assert at >= 0, passage
        # A whole sentence: it starts where one of the card's starts and ends with a full stop.
        assert at == 0 or text[:at].rstrip()[-1] in ".:•", text[max(0, at - 40) : at]
        assert passage[0].isupper() and passage.endswith(".")


def test_the_cost_sentence_states_the_librarys_sizes_and_quotes_the_card_whole():
    per_slot, score = h2o.H2O.nbytes_per_slot, ScoredPolicy.SCORE_DTYPE.itemsize
    text = card.cost_sentence(score, per_slot)
    assert text.startswith(f"Of H2O's {per_slot} bytes a slot, {score} are its score; ")
    assert (per_slot, score) == (13, 8)  # the card: 4 bytes of position, 8 of score, 1 of scratch
    quoted = re.findall(r"\*([^*]+)\*", text)
    assert quoted == [card.CARD_COST, card.CARD_COMPLEXITY]
    # The garbled form quoted half a sentence after a colon and gave StreamingLLM H2O's 8 bytes.
    assert ": This" not in text and "against its zero" not in text
    for sentence in re.split(r"(?<=\.)\s+", text.replace("*", "")):
        # The card writes policy names in lower case, at the start of a sentence too.
        starts = sentence[0].isupper() or sentence.startswith("streaming-llm ")
        assert starts and sentence.endswith("."), sentence


def test_the_caption_credits_the_card_and_names_the_paper_as_its_source():
    assert card.CARD_CAPTION.startswith(
        "Quotes from the H2O policy card, the project's specification, which is based on "
        "Zhang et al., H2O: Heavy-Hitter Oracle"
    )
    assert card.CARD_CAPTION.endswith("NeurIPS 2023, https://arxiv.org/abs/2306.14048")
    assert "Source:" not in card.CARD_CAPTION


def test_the_card_is_introduced_as_the_projects_specification():
    intro = card.CARD_INTRO
    assert "H2O policy card" in intro and "one-page specification" in intro
    assert "written for this project from the paper" in intro and "Zhang et al." in intro
    assert "this library implements" in intro


def test_how_it_works_renders_the_cost_sentence_and_the_caption():
    at = AppTest.from_file(MAIN, default_timeout=300)
    at.run()
    at.switch_page("views/how_it_works.py").run()
    assert not at.exception, [e.value for e in at.exception]
    shown = [m.value for m in at.markdown]
    per_slot, score = h2o.H2O.nbytes_per_slot, ScoredPolicy.SCORE_DTYPE.itemsize
    assert card.cost_sentence(score, per_slot) in shown
    assert card.CARD_CAPTION in shown
    assert not any("Source: Zhang" in m or "against its zero" in m for m in shown)
    # the card's first "use it" point sits beside what the real model measured of it
    from app.lesson import chapters_7_10
    from app.needle import shipped

    measured = chapters_7_10.grid_fact(shipped.grid()[0].records)
    assert measured and (
        f"**The first point, measured on the real model (SmolLM2-135M):** {measured}." in shown
    )
    table = next(d.value for d in at.dataframe if "of which scores (bytes)" in d.value.columns)
    assert list(table["of which scores (bytes)"]) == [score * b for b in table["budget"]]
