"""The second question (h2o/model/followup.py, h2o/needle/haystack.py's build_followup, the
``followup`` command): two facts, the first asked, the second asked on the same cache — checked
against one closed-loop pass over the whole conversation, and against score_answer for the
first answer."""

from __future__ import annotations

import pytest
from model_marks import needs_model

from h2o.model.answer import row_quant, score_answer
from h2o.model.followup import score_followup
from h2o.model.rows import Row
from h2o.model.stack import cache_for
from h2o.needle.cells import FOLLOWUP_DEPTHS, followup_pairs
from h2o.needle.results import followup_key


@pytest.fixture(scope="module")
def model(tiny_smollm):
    return tiny_smollm


def conversation(seed: int = 11):
    from tiny_model import token_ids

    ids = token_ids(140, seed=seed)
    return ids[:100], ids[100:104], ids[104:120], ids[120:125]


@pytest.mark.parametrize("label", ["full", "h2o@48", "h2o@48:w50%", "streaming-llm@40"])
def test_the_second_answer_is_one_pass_over_the_conversation(model, label):
    """A decode-time row reads every token as a step, so the whole conversation teacher-forced
    in one closed-loop pass gives the second answer's log-probs."""
    row = Row.parse(label)
    prompt, a1, turn, a2 = conversation()
    sc = score_followup(model, prompt, a1, turn, a2, row, max_new=3)
    whole = prompt + a1 + turn + a2
    pols = row.cache.decode_policies(model) if row.kind == "policy" else None
    hidden = model.forward(
        whole[:-1], cache=cache_for(model.config, policies=pols, quant=row_quant(row))
    )
    start = len(prompt) + len(a1) + len(turn)
    ref = model.token_logprobs(hidden[start - 1 :], a2)
    assert sc.second_logprob == pytest.approx(float(ref.sum()), rel=1e-5)
    # the first answer is score_answer's, teacher-forced and greedy
    first = score_answer(model, prompt, a1, row, max_new=3)
    assert sc.logprob == pytest.approx(first.logprob, rel=1e-5)  # chunks round apart
    assert sc.produced == first.produced_ids
    assert sc.kv_bytes == first.kv_bytes


def test_the_second_greedy_answer_continues_the_conversation(model):
    from h2o.model.generate import decode_greedy
    from h2o.model.kv_cache import KVCache

    prompt, a1, turn, a2 = conversation(12)
    sc = score_followup(model, prompt, a1, turn, a2, Row.parse("full"), max_new=4)
    cache = KVCache(model.config, 200)
    h = model.forward(prompt + a1 + turn, cache=cache)
    want, _ = decode_greedy(model, h, cache, None, 4)
    assert sc.second_produced == want


def test_snapkv_meets_the_second_question_with_the_cache_it_chose(model):
    """SnapKV chose for the first question: the second reads what it kept plus every later
    token; ``held`` is the share of heads holding the second fact's span when it is asked."""
    prompt, a1, turn, a2 = conversation(13)
    row = Row.parse("snapkv@48")
    span = (10, 14)
    sc = score_followup(model, prompt, a1, turn, a2, row, second_span=span, max_new=2)
    assert sc.held is not None and len(sc.held) == model.config.n_layers
    assert all(0.0 <= h <= 1.0 for h in sc.held)
    full = score_followup(model, prompt, a1, turn, a2, Row.parse("full"), max_new=2)
    assert full.held is None
    assert sc.second_logprob != full.second_logprob


@pytest.mark.parametrize(
    "label", ["full", "h2o@48", "snapkv@48", "knorm@48", "expected-attention@48", "kivi4"]
)
def test_a_row_that_reads_what_it_holds_reads_its_bytes_after_the_prompt(model, label):
    """Every step reads what the row holds after the prompt: the bytes read are the bytes held
    then, not what the conversation grew to."""
    prompt, a1, turn, a2 = conversation(14)
    sc = score_followup(model, prompt, a1, turn, a2, Row.parse(label), max_new=2)
    assert sc.read_bytes == sc.kv_bytes


def test_quest_reads_a_part_of_what_it_holds(model):
    """Quest holds the whole cache and its pages' bounds; a step reads the first two layers
    whole, the others' bounds, and only the pages it ranks first."""
    from h2o.model.caches.quest_cache import DENSE_LAYERS

    cfg = model.config
    prompt, a1, turn, a2 = conversation(14)
    row = Row.parse("quest@32")
    sc = score_followup(model, prompt, a1, turn, a2, row, max_new=2)
    T = len(prompt)
    assert sc.kv_bytes == row.kv_bytes(cfg, T)
    dense = DENSE_LAYERS * cfg.n_kv_heads * T * 4 * cfg.head_dim  # fp16 keys and values
    assert dense < sc.read_bytes < sc.kv_bytes


def test_bad_followups_are_refused(model):
    prompt, a1, turn, a2 = conversation()
    with pytest.raises(ValueError, match="non-empty"):
        score_followup(model, prompt, a1, [], a2, Row.parse("full"))
    with pytest.raises(ValueError, match="max_new"):
        score_followup(model, prompt, a1, turn, a2, Row.parse("full"), max_new=0)
    with pytest.raises(ValueError, match="must be a Row"):
        score_followup(model, prompt, a1, turn, a2, "full")  # type: ignore[arg-type]


def test_the_pairs_and_the_key():
    pairs = followup_pairs(1024)
    assert len(pairs) == 3 and pairs == followup_pairs(1024)
    flat = [n for p in pairs for n in p]
    assert len(set(flat)) == 6  # six different facts
    assert followup_pairs(2048) != pairs
    with pytest.raises(ValueError, match="pairs per length"):
        followup_pairs(1024, 0)
    assert FOLLOWUP_DEPTHS == ((25, 75), (75, 25))  # each fact asked first once, each order
    line = {
        "row": "full",
        "length": 1024,
        "depth_first": 25,
        "depth_second": 75,
        "first": "a",
        "second": "b",
        "correct_first": True,
    }
    assert followup_key(line) == ("full", 1024, 25, 75, "a", "b")


@needs_model
def test_two_facts_in_one_haystack():
    from h2o.model import SmolLM
    from h2o.needle.haystack import build_followup
    from h2o.needle.needles import needle

    m = SmolLM.load()
    a, b = needle("green-locker"), needle("red-safe")
    f = build_followup(m.encode, a, b, 1024, 25, 75)
    assert len(f.ids) <= 1024
    (s1, e1), (s2, e2) = f.spans
    assert m.decode(f.ids[s1:e1]).strip() == a.sentence
    assert m.decode(f.ids[s2:e2]).strip() == b.sentence
    assert s1 < e1 <= s2 < e2  # 25 % before 75 %
    assert m.decode(f.ids).endswith("The code of the green locker is ")
    assert m.decode(f.turn_ids).endswith("The code of the red safe is ")
    assert m.decode(f.answer_ids) == a.value and m.decode(f.second_answer_ids) == b.value
    g = build_followup(m.encode, a, b, 1024, 75, 25)
    assert g.spans[1][1] <= g.spans[0][0]  # the first fact now sits later
    both = build_followup(m.encode, a, b, 512, 0, 0)  # one boundary: the first fact first
    assert both.spans[0][1] == both.spans[1][0]
    with pytest.raises(ValueError, match="must differ"):
        build_followup(m.encode, a, a, 1024, 25, 75)


def test_the_followup_command_refuses_bad_pairs(tmp_path, capsys):
    from h2o.cli import main

    code = main(["followup", "--pairs", "0", "--out", str(tmp_path / "f.jsonl")])
    assert code == 2
    assert "--pairs must be 1..12" in capsys.readouterr().err
