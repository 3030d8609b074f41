"""score_answer / row_perplexity (h2o/model/answer.py) on the tiny model: the teacher-forced
answer is the closed loop over prompt + answer, the greedy continuation is generate's, the
needle's hold follows the policies' rules, 16 bits is the full cache to the last digit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from model_marks import needs_model

from h2o.model.answer import row_perplexity, score_answer
from h2o.model.rows import Row
from h2o.model.stack import cache_for


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory):
    pytest.importorskip("gguf")
    pytest.importorskip("tokenizers")
    from tiny_model import write_tiny_gguf

    from h2o.model import SmolLM

    path: Path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_gguf(path)
    return SmolLM.load(path)


@pytest.fixture(scope="module")
def ids():
    from tiny_model import token_ids

    return token_ids(130, seed=7)


def _one_pass(model, row: Row, prompt, answer) -> np.ndarray:
    """The answer's log-probs from ONE closed-loop pass over prompt + answer under ``row``."""
    from h2o.model.answer import row_quant

    pol = row.cache.decode_policies(model) if row.kind == "policy" else None
    full = list(prompt) + list(answer)
    hidden = model.forward(
        full[:-1], cache=cache_for(model.config, policies=pol, quant=row_quant(row))
    )
    return model.token_logprobs(hidden[len(prompt) - 1 :], answer)


@pytest.mark.parametrize(
    "label", ["full", "h2o@48", "tova@40", "kivi2", "kivi4+sinks", "h2o@48+kivi4"]
)
def test_teacher_forced_answer_is_one_pass_over_prompt_and_answer(model, ids, label) -> None:
    row = Row.parse(label)
    prompt, answer = ids[:110], ids[110:116]
    sc = score_answer(model, prompt, answer, row, max_new=3)
    ref = _one_pass(model, row, prompt, answer)
    assert len(sc.token_logprobs) == len(answer)
    assert np.allclose(sc.token_logprobs, ref, rtol=1e-5, atol=1e-4)
    assert sc.logprob == pytest.approx(float(np.sum(sc.token_logprobs)))
    if row.evicts and row.bits:  # thinned groups keep their scales: at least the least
        assert sc.kv_bytes >= row.kv_bytes(model.config, len(prompt))
    else:
        assert sc.kv_bytes == row.kv_bytes(model.config, len(prompt))
    alone = score_answer(model, prompt, answer, row, max_new=0)  # no continuation
    assert alone.token_logprobs == sc.token_logprobs and alone.produced_ids == []


@pytest.mark.parametrize("label", ["full", "h2o@48", "streaming-llm@40"])
def test_greedy_continuation_is_generate(model, ids, label) -> None:
    """The continuation starts from the prompt's state, whatever the answer did to it."""
    from h2o.model import generate, policy_factory

    row = Row.parse(label)
    prompt = ids[:100]
    sc = score_answer(model, prompt, ids[100:108], row, max_new=6)
    f = None if row.kind == "full" else policy_factory(row.policy, row.budget)
    g = generate(model, prompt, max_new=6, policy_factory=f)
    assert sc.produced_ids == g.new_ids
    assert sc.produced == g.text


def test_snapkv_continuation_is_snapkv_generate(model, ids) -> None:
    from h2o.model.allocation import make_allocation
    from h2o.model.snapkv import snapkv_generate

    prompt = ids[:100]
    sc = score_answer(model, prompt, ids[100:104], Row.parse("snapkv@48"), max_new=5)
    g = snapkv_generate(model, prompt, make_allocation(model, "uniform", 48), max_new=5)
    assert sc.produced_ids == g.new_ids


def test_quantized_continuation_decodes_through_the_quantized_cache(model, ids) -> None:
    """Greedy under kivi2: each step's argmax from one pass over prompt + produced so far."""
    from h2o.model.answer import row_quant

    row = Row.parse("kivi2")
    prompt = ids[:90]
    sc = score_answer(model, prompt, ids[90:92], row, max_new=4, stop_at_eos=False)
    seq = list(prompt)
    for tok in sc.produced_ids:
        h = model.forward(seq, cache=cache_for(model.config, quant=row_quant(row)))
        assert int(np.argmax(model.logits(h[-1:])[0])) == tok
        seq.append(tok)


def test_16_bits_is_the_full_cache_to_the_last_digit(model, ids) -> None:
    prompt, answer = ids[:120], ids[120:125]
    full = score_answer(model, prompt, answer, Row.parse("full"), max_new=4)
    k16 = score_answer(model, prompt, answer, Row.parse("kivi16"), max_new=4)
    assert k16.token_logprobs == full.token_logprobs
    assert k16.produced_ids == full.produced_ids
    assert k16.kv_bytes == full.kv_bytes
    assert row_perplexity(model, ids, Row.parse("kivi16")) == row_perplexity(
        model, ids, Row.parse("full")
    )
    # and the quantized rows do move the numbers
    k2 = score_answer(model, prompt, answer, Row.parse("kivi2:r32:qprompt"), max_new=4)
    assert k2.token_logprobs != full.token_logprobs
    # at residual 128 with the prompt attended at full precision, 125 tokens code nothing: the
    # full cache to the last digit
    k2 = score_answer(model, prompt, answer, Row.parse("kivi2"), max_new=4)
    assert k2.token_logprobs == full.token_logprobs


def test_kivi_attends_the_prompt_at_full_precision(model) -> None:
    """KIVI's prefill: the prompt's own attention is the full cache's (so the first answer token,
    predicted from the prompt's last state, is the full cache's to the last digit); the answer
    then reads the coded cache. ``:qprompt`` reads the prompt quantized: the first token moves."""
    from tiny_model import token_ids

    ids = token_ids(310, seed=9)
    prompt, answer = ids[:300], ids[300:305]
    full = score_answer(model, prompt, answer, Row.parse("full"), max_new=0)
    k2 = score_answer(model, prompt, answer, Row.parse("kivi2"), max_new=0)
    q2 = score_answer(model, prompt, answer, Row.parse("kivi2:qprompt"), max_new=0)
    assert k2.token_logprobs[0] == full.token_logprobs[0]
    assert k2.token_logprobs[1:] != full.token_logprobs[1:]
    assert q2.token_logprobs[0] != full.token_logprobs[0]
    assert k2.kv_bytes == q2.kv_bytes == Row.parse("kivi2").kv_bytes(model.config, 300)


def test_held_follows_the_policy_rules(model, ids) -> None:
    prompt, answer = ids[:120], ids[120:122]
    # StreamingLLM at 40 (4 sinks): holds 0..3 and the newest 36, so never positions 10..11
    sink = score_answer(model, prompt, answer, Row.parse("streaming-llm@40"), needle_span=(0, 4))
    mid = score_answer(model, prompt, answer, Row.parse("streaming-llm@40"), needle_span=(10, 12))
    recent = score_answer(
        model, prompt, answer, Row.parse("streaming-llm@40"), needle_span=(100, 120)
    )
    L = model.config.n_layers
    assert sink.held == [1.0] * L and mid.held == [0.0] * L and recent.held == [1.0] * L
    # a budget above the prompt evicts nothing; the full cache and kivi have no held
    big = score_answer(model, prompt, answer, Row.parse("h2o@200"), needle_span=(10, 12))
    assert big.held == [1.0] * L
    assert (
        score_answer(model, prompt, answer, Row.parse("kivi4"), needle_span=(10, 12)).held is None
    )
    assert score_answer(model, prompt, answer, Row.parse("h2o@48")).held is None  # no span
    # a shares a head: 0, 1/2 or 1 with two KV heads
    h2o = score_answer(model, prompt, answer, Row.parse("h2o@48"), needle_span=(30, 33))
    assert all(x in (0.0, 0.5, 1.0) for x in h2o.held)


def test_allocated_rows_run(model, ids) -> None:
    from tiny_model import token_ids

    from h2o.model import generate
    from h2o.model.allocation import allocated_factory, head_shares, make_allocation

    cal = token_ids(100, seed=11)
    prompt, answer = ids[:110], ids[110:113]
    for label in ("h2o@80/pyramid", "tova@48/adaptive", "h2o@48/duo", "snapkv@64/duo"):
        row = Row.parse(label)
        sc = score_answer(model, prompt, answer, row, calibration_ids=cal, stop_at_eos=False)
        assert np.isfinite(sc.logprob) and len(sc.produced_ids) == 8
        if row.kind == "policy":  # the continuation restored the layers' state (copies)
            shares = head_shares(model, cal, 4, 32).kv_rest()
            a = make_allocation(model, row.allocation, row.budget, shares)
            f, _ = allocated_factory(row.policy, a)
            g = generate(model, prompt, max_new=8, policy_factory=f, stop_at_eos=False)
            assert sc.produced_ids == g.new_ids
    with pytest.raises(ValueError, match="calibration_ids"):
        score_answer(model, prompt, answer, Row.parse("h2o@48/duo"))


def test_bad_input_is_refused(model, ids) -> None:
    row = Row.parse("h2o@48")
    with pytest.raises(ValueError, match="answer is empty"):
        score_answer(model, ids[:50], [], row)
    with pytest.raises(ValueError, match="prompt is empty"):
        score_answer(model, [], ids[:2], row)
    with pytest.raises(ValueError, match="max_new"):
        score_answer(model, ids[:50], ids[50:52], row, max_new=-1)
    with pytest.raises(ValueError, match="needle_span"):
        score_answer(model, ids[:50], ids[50:52], row, needle_span=(40, 60))
    with pytest.raises(ValueError, match="needle_span"):
        score_answer(model, ids[:50], ids[50:52], row, needle_span=(5,))
    with pytest.raises(ValueError, match="Row"):
        score_answer(model, ids[:50], ids[50:52], "h2o@48")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="snapkv"):
        row_perplexity(model, ids, Row.parse("snapkv@64"))
    with pytest.raises(ValueError, match="2 tokens"):
        row_perplexity(model, ids[:1], row)


def test_combination_bytes_are_measured(model, ids) -> None:
    from h2o.model.answer import kept_sets, row_quant

    row = Row.parse("h2o@48+kivi4")
    ppl, nbytes = row_perplexity(model, ids, row)
    pol = row.cache.decode_policies(model)
    model.forward(ids, cache=cache_for(model.config, policies=pol, quant=row_quant(row)))
    assert nbytes == row.kv_bytes(model.config, len(ids), kept=kept_sets(pol))
    assert nbytes > row.kv_bytes(model.config, len(ids))  # H2O's keepers span groups
    assert ppl == pytest.approx(_ppl_one_pass(model, row, ids), rel=1e-6)


@pytest.mark.parametrize("label", ["h2o@48:w50%+kivi4", "h2o@48+kivi4", "h2o@48"])
def test_a_row_that_reads_what_it_holds_reads_the_bytes_the_prompt_left(model, ids, label):
    """Only a kind that reads a part of what it holds (Quest) reads other bytes than it holds: an
    evicting row's bytes read are counted from the kept sets the prompt left, not from what the
    answer's steps have made of the policies' storage since."""
    from h2o.model.answer import kept_sets, read_prompt

    row = Row.parse(label)
    prompt, answer = ids[:100], ids[100:104]
    sc = score_answer(model, prompt, answer, row, max_new=6, stop_at_eos=False)
    assert sc.read_bytes == sc.kv_bytes
    # the kept sets taken after the prompt are the run's own, and stay so as the policies step
    from h2o.model.answer import begin

    cache, quant = begin(model, row, len(prompt) + 8)
    _, pol = read_prompt(model, prompt, row, cache, quant)
    kept = kept_sets(pol)
    before = [[k.copy() for k in layer] for layer in kept]
    model.forward(answer, cache=cache_for(model.config, cache, policies=pol, quant=quant))
    assert all(
        np.array_equal(a, b)
        for la, lb in zip(kept, before, strict=True)
        for a, b in zip(la, lb, strict=True)
    )


def _ppl_one_pass(model, row, ids) -> float:
    from h2o.model.answer import row_quant

    pol = row.cache.decode_policies(model)
    h = model.forward(ids[:-1], cache=cache_for(model.config, policies=pol, quant=row_quant(row)))
    return float(np.exp(-model.token_logprobs(h, ids[1:]).mean()))


def test_row_perplexity_is_the_closed_loop(model, ids) -> None:
    from h2o.model import perplexity_under_eviction, policy_factory

    ppl, nbytes = row_perplexity(model, ids, Row.parse("h2o@48"))
    ref = perplexity_under_eviction(model, ids, policy_factory("h2o", 48))
    assert ppl == ref.perplexity
    assert nbytes == Row.parse("h2o@48").kv_bytes(model.config, len(ids))
    assert row_perplexity(model, ids, Row("full"))[0] == model.perplexity(ids)


@needs_model
def test_real_model_quantized_rows() -> None:
    from h2o.model import SmolLM

    m = SmolLM.load()
    text = (Path(__file__).parents[1] / "traces" / "texts" / "lighthouse.txt").read_text("utf-8")
    ids = m.encode(text)[:300]
    full, _ = row_perplexity(m, ids, Row("full"))
    assert row_perplexity(m, ids, Row.parse("kivi16"))[0] == full
    k8, b8 = row_perplexity(m, ids, Row.parse("kivi8"))
    k2, b2 = row_perplexity(m, ids, Row.parse("kivi2"))
    assert abs(k8 / full - 1) < 0.01  # 8 bits: all but lossless
    assert k2 > k8 and b2 < b8
    sc = score_answer(m, ids[:280], ids[280:284], Row.parse("h2o@64+kivi4"), max_new=2)
    assert np.isfinite(sc.logprob) and len(sc.produced_ids) >= 1
