"""Every limit of the trace loader, at its edge: the largest value loads, one more is refused.

The loader's limits (h2o/trace_npz.py): steps (``max_steps``, ``MAX_STEPS`` by default, and at
least 2), characters of the name, tokens, meta and format strings, meta nesting, digits of a
meta integer, members of the archive, bytes of a ``.npy`` header, the decompression-bomb rule
(64 MiB free, then at most 100:1), and the row-sum tolerance. A limit off by one fails here.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from npz_forge import T, archive, base, declared, dense, entries_of, npy, packed, raw_archive, save

from h2o import load_trace, toy_trace
from h2o.trace import MAX_STEPS, ROW_SUM_TOLERANCE, save_trace
from h2o.trace_npz import MAX_META_CHARS, MAX_META_DEPTH, MAX_NAME_CHARS, MAX_TOKEN_CHARS

MIB = 1 << 20


def load(data: bytes, **kw):
    return load_trace(io.BytesIO(data), **kw)


def refusal(data: bytes, **kw) -> str:
    with pytest.raises(ValueError) as e:
        load(data, **kw)
    return str(e.value)


def members_with(key: str, payload: bytes, layout: str = "weights") -> bytes:
    members = base(layout)
    members[key] = payload
    return archive(members)


# -- steps -------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["weights", "attention"])
def test_max_steps_loads_and_one_more_is_refused(layout):
    tr = toy_trace()
    if layout == "weights":
        buf = io.BytesIO()
        save_trace(tr, buf)
        data = buf.getvalue()
    else:
        data = _square(tr.dense())
    assert load(data, max_steps=tr.steps).steps == tr.steps
    msg = refusal(data, max_steps=tr.steps - 1)
    assert msg == f"trace has {tr.steps} steps; at most {tr.steps - 1} are accepted"


def _square(rows: np.ndarray) -> bytes:
    """The ``(T, T-1)`` rows of ``Trace.dense`` as the square matrix an 'attention' member is."""
    t = rows.shape[0]
    sq = np.zeros((t, t), np.float32)
    sq[:, : t - 1] = rows
    buf = io.BytesIO()
    np.savez(buf, attention=sq)
    return buf.getvalue()


@pytest.mark.parametrize("layout", ["weights", "attention"])
@pytest.mark.parametrize("steps", [MAX_STEPS, MAX_STEPS + 1])
def test_the_default_step_limit_is_max_steps(layout, steps):
    """A header and zip sizes that declare the trace (1/50 of it stored, so no bomb): at
    MAX_STEPS the step limit lets it through to its data (which end early); one more, refused."""
    shape = (steps * (steps - 1) // 2,) if layout == "weights" else (steps, steps)
    nbytes = int(np.prod(shape)) * 4
    others = entries_of({k: v for k, v in base(layout).items() if k not in ("tokens", layout)})
    data = raw_archive([*others, declared(layout, "<f4", shape, compressed=nbytes // 50)])
    msg = refusal(data)
    if steps > MAX_STEPS:
        assert msg == f"trace has {steps} steps; at most {MAX_STEPS} are accepted"
    else:
        assert msg == f"'{layout}' is truncated: the archive member ends early"


@pytest.mark.parametrize("layout", ["weights", "attention"])
def test_two_steps_load_and_one_is_refused(layout):
    two = {"weights": np.array([1.0], np.float32), "attention": np.array([[0, 0], [1, 0]], "f4")}
    one = {"weights": np.zeros(0, np.float32), "attention": np.zeros((1, 1), np.float32)}
    assert load(archive({layout: save(two[layout])})).steps == 2
    msg = refusal(archive({layout: save(one[layout])}))
    assert msg == "a trace needs at least 2 steps (one row of attention), got 1"


# -- strings -----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["str", "bytes"])
def test_a_name_of_the_most_characters_loads_and_one_more_is_refused(kind):
    def name(n: int) -> bytes:
        text = "n" * n
        return save(np.array(text if kind == "str" else text.encode()))

    assert load(members_with("name", name(MAX_NAME_CHARS))).name == "n" * MAX_NAME_CHARS
    msg = refusal(members_with("name", name(MAX_NAME_CHARS + 1)))
    assert msg == f"'name' holds strings of up to {MAX_NAME_CHARS + 1} characters; at most 256"


@pytest.mark.parametrize("kind", ["str", "bytes"])
def test_tokens_of_the_most_characters_load_and_one_more_is_refused(kind):
    def tokens(n: int) -> bytes:
        toks = ["t" * n] + ["t"] * (T - 1)
        return save(np.array(toks if kind == "str" else [t.encode() for t in toks]))

    tr = load(members_with("tokens", tokens(MAX_TOKEN_CHARS)))
    assert tr.tokens[0] == "t" * MAX_TOKEN_CHARS
    msg = refusal(members_with("tokens", tokens(MAX_TOKEN_CHARS + 1)))
    assert msg == f"'tokens' holds strings of up to {MAX_TOKEN_CHARS + 1} characters; at most 256"


def test_meta_of_the_most_characters_loads_and_one_more_is_refused():
    def meta(n: int) -> bytes:
        text = json.dumps({"a": ""})
        text = json.dumps({"a": "m" * (n - len(text))})
        assert len(text) == n
        return save(np.array(text))

    assert len(load(members_with("meta", meta(MAX_META_CHARS))).meta["a"]) == MAX_META_CHARS - 9
    msg = refusal(members_with("meta", meta(MAX_META_CHARS + 1)))
    assert msg == f"'meta' holds strings of up to {MAX_META_CHARS + 1} characters; at most 65536"


def test_a_format_string_of_64_characters_is_read_and_65_are_refused_unread():
    """No format of 64 characters is known, so it is read and named; 65 are refused from the
    header."""
    msg = refusal(members_with("format", save(np.array("f" * 64))))
    assert msg.startswith(f"unsupported trace format {'f' * 64!r}")
    msg = refusal(members_with("format", save(np.array("f" * 65))))
    assert msg == "'format' holds strings of up to 65 characters; at most 64"


# -- meta --------------------------------------------------------------------------------------
@pytest.mark.parametrize("bracket", ["{}", "[]"])
def test_meta_nested_to_the_limit_loads_and_one_level_more_is_refused(bracket):
    def nested(levels: int) -> bytes:
        inner = bracket[0] * (levels - 1) + bracket[1] * (levels - 1)
        if bracket == "{}":
            inner = '{"a":' * (levels - 2) + "{}" + "}" * (levels - 2)
        return save(np.array('{"a":' + inner + "}"))  # meta itself is the outermost level

    meta = load(members_with("meta", nested(MAX_META_DEPTH))).meta
    depth = 0
    while meta is not None:
        depth += 1
        meta = meta.get("a") if isinstance(meta, dict) else (meta[0] if meta else None)
    assert depth == MAX_META_DEPTH
    msg = refusal(members_with("meta", nested(MAX_META_DEPTH + 1)))
    assert msg == f"meta nests deeper than {MAX_META_DEPTH} levels"


def test_a_meta_integer_of_100_digits_loads_and_101_are_refused():
    meta = load(members_with("meta", save(np.array('{"a": ' + "7" * 100 + "}")))).meta
    assert meta == {"a": int("7" * 100)}
    msg = refusal(members_with("meta", save(np.array('{"a": ' + "7" * 101 + "}"))))
    assert msg == "malformed trace file: meta is not valid JSON (an integer of 101 digits)"


# -- the archive -------------------------------------------------------------------------------
def test_64_members_load_and_65_are_refused():
    """Members outside the format count too (they are never read)."""
    extra = lambda n: {f"x{i}": b"" for i in range(n)}  # noqa: E731
    members = base()
    assert load(archive({**members, **extra(64 - len(members))})).steps == T
    msg = refusal(archive({**members, **extra(65 - len(members))}))
    assert msg == "the archive has 65 members; at most 64"


def _npy_with_header_of(length: int) -> bytes:
    text = f"{{'descr': '<f4', 'fortran_order': False, 'shape': {packed().shape!r}, }}"
    h = (text + " " * (length - len(text) - 1) + "\n").encode("latin-1")
    assert len(h) == length
    return b"\x93NUMPY\x01\x00" + length.to_bytes(2, "little") + h + packed().tobytes()


def test_a_npy_header_of_10000_bytes_loads_and_10001_are_refused():
    assert load(members_with("weights", _npy_with_header_of(10_000))).steps == T
    msg = refusal(members_with("weights", _npy_with_header_of(10_001)))
    assert msg == "'weights' has a 10001-byte header; at most 10000"


def _name_of_size(file_size: int, compressed: int) -> bytes:
    """An archive whose 'name' member honestly declares ``file_size`` bytes (a bytes string of
    the length that makes up), stored in ``compressed`` bytes."""
    hl = len(npy("|S1000", ()))
    descr = f"|S{file_size - hl}"
    assert len(npy(descr, ())) == hl
    others = entries_of({k: v for k, v in base().items() if k != "name"})
    return raw_archive([*others, declared("name", descr, (), compressed=compressed)])


@pytest.mark.parametrize(
    ("file_size", "compressed"),
    [
        (64 * MIB, 300),  # the free allowance, at any ratio
        (100 * 700_000, 700_000),  # past it, exactly 100:1
    ],
)
def test_the_bomb_rule_at_its_edges(file_size, compressed):
    """At the edge the member passes the bomb rule and is refused by the next check (a name far
    too long); one byte more and it is a bomb."""
    msg = refusal(_name_of_size(file_size, compressed))
    assert msg.startswith("'name' holds strings of up to") and msg.endswith("at most 256")
    msg = refusal(_name_of_size(file_size + 1, compressed))
    fold = (file_size + 1) // compressed
    assert msg == (
        f"'name' would inflate {fold}-fold, from {compressed} to {file_size + 1} bytes: refused "
        "as a likely decompression bomb. If the trace is genuine, save it uncompressed "
        "(np.savez, not savez_compressed)"
    )


# -- values ------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["weights", "attention"])
@pytest.mark.parametrize("sign", [1, -1])
def test_a_row_within_the_sum_tolerance_loads_and_one_past_it_is_refused(layout, sign):
    """Rows stored in float64 summing to 1 ± 0.95 tolerance load (renormalised to 1); 1 ± 1.05
    tolerance are refused, with the row named."""

    def scaled(factor: float) -> bytes:
        if layout == "weights":
            w = packed().astype(np.float64)
            w[-(T - 1) :] *= factor / w[-(T - 1) :].sum()
        else:
            w = dense().astype(np.float64)
            w[T - 1] *= factor / w[T - 1].sum()
        return archive({layout: save(w)})

    tr = load(scaled(1 + sign * 0.95 * ROW_SUM_TOLERANCE))
    assert abs(tr.row(T - 1).sum(dtype=np.float64) - 1) < 1e-6
    msg = refusal(scaled(1 + sign * 1.05 * ROW_SUM_TOLERANCE))
    assert (
        msg == f"row {T - 1} of the trace sums to {1 + sign * 1.05 * ROW_SUM_TOLERANCE:.6f}, not 1"
    )
