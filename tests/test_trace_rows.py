"""The loader's row bookkeeping (h2o/trace_npz.py), where mutation testing found it unguarded.

A bad weight is named by its row, wherever it sits in the packed layout; a dense matrix larger
than one read chunk is read chunk by chunk, row-major or column-major, and every row is checked;
string members take every valid code point and refuse the surrogates at both ends.
"""

from __future__ import annotations

import io
import re
import struct
import zipfile

import numpy as np
import pytest
from npz_forge import archive, base, declared, entries_of, npy, raw_archive, save, with_member

from h2o import Trace, load_trace

STEPS = 600  # a float32 dense row is 2.4 kB: 600 rows are two chunks of 1 MiB


def rows_of(steps: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [np.zeros(0)] + [rng.dirichlet(np.ones(t)) for t in range(1, steps)]


def dense_of(steps: int, seed: int = 0) -> np.ndarray:
    d = np.zeros((steps, steps), np.float32)
    for t, r in enumerate(rows_of(steps, seed)):
        d[t, :t] = r
    return d


def refusal(data: bytes) -> str:
    with pytest.raises(ValueError) as e:
        load_trace(io.BytesIO(data))
    return str(e.value)


@pytest.mark.parametrize("bad", [np.nan, -0.25])
def test_a_bad_weight_is_named_by_its_row_at_every_packed_index(bad):
    steps = 30
    packed = np.concatenate(rows_of(steps)).astype(np.float32)
    row = np.repeat(np.arange(steps), np.arange(steps))  # the row of each packed index
    what = "a non-finite weight (NaN or inf)" if np.isnan(bad) else "a negative weight"
    for i in range(packed.shape[0]):
        w = packed.copy()
        w[i] = bad
        with pytest.raises(ValueError, match=rf"^trace has {re.escape(what)} in row {row[i]}$"):
            Trace("x", w)


def test_the_negative_weight_named_is_the_first_negative_not_the_first_zero():
    packed = np.concatenate(rows_of(8)).astype(np.float32)
    packed[[1, 3]] = 0.0  # zeros in rows 2 and 3 are fine
    packed[-1] = -0.5
    with pytest.raises(ValueError, match=r"^trace has a negative weight in row 7$"):
        Trace("x", packed)


@pytest.mark.parametrize("order", ["C", "F"])
def test_a_dense_matrix_of_several_chunks_loads_row_for_row(order):
    d = dense_of(STEPS)
    assert d.nbytes > 1 << 20
    tr = load_trace(io.BytesIO(archive({"attention": save(np.asarray(d, order=order))})))
    assert tr.steps == STEPS
    for t in (1, 2, 300, 436, 437, 438, STEPS - 1):
        np.testing.assert_allclose(tr.row(t), d[t, :t], rtol=1e-6)


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("row", [1, 2, 437, STEPS - 1])
def test_a_bad_row_of_a_dense_matrix_is_named_in_any_chunk(order, row):
    d = dense_of(STEPS)
    d[row, :row] *= 0.5
    msg = refusal(archive({"attention": save(np.asarray(d, order=order))}))
    assert re.fullmatch(rf"row {row} of the trace sums to 0\.50+\d*, not 1", msg), msg
    d = dense_of(STEPS)
    d[row, row - 1] = np.nan
    msg = refusal(archive({"attention": save(np.asarray(d, order=order))}))
    assert msg == f"trace has a non-finite weight (NaN or inf) in row {row}"


@pytest.mark.parametrize("cp", [0x10FFFF, 0xE000, 0xD7FF, 0xFFFF])
def test_every_valid_code_point_is_read(cp):
    text = "ab" + chr(cp)
    assert load_trace(io.BytesIO(with_member("name", save(np.array(text))))).name == text


@pytest.mark.parametrize("cp", [0xD800, 0xDFFF, 0x110000])
def test_surrogates_and_code_points_past_unicode_are_refused(cp):
    data = with_member("name", npy("<U3", (), struct.pack("<3I", 97, 98, cp)))
    assert refusal(data) == f"'name' holds an invalid character U+{cp:X}"


@pytest.mark.parametrize("key", ["name", "tokens"])
def test_a_string_member_whose_data_ends_early_is_named(key):
    """Header and zip sizes agree; the stored data stop after the header."""
    shape = () if key == "name" else (6,)
    others = entries_of({k: v for k, v in base().items() if k != key})
    data = raw_archive([*others, declared(key, "<U4", shape)])
    assert refusal(data) == f"'{key}' is truncated: the archive member ends early"


# -- what the refusals say ---------------------------------------------------------------------
def test_a_member_outside_the_format_before_the_trace_is_skipped():
    members = {"aaa_other": save(np.ones(3)), **base()}
    assert load_trace(io.BytesIO(archive(members))).steps == 6


@pytest.mark.parametrize("n", [10, 11])
def test_a_file_without_attention_names_its_first_ten_arrays(n):
    names = [f"x{i:02d}" for i in range(n)]
    data = archive(dict.fromkeys(names, save(np.ones(1))))
    shown = ", ".join(repr(k) for k in names[:10]) + (", ..." if n > 10 else "")
    assert (
        refusal(data)
        == f"not a trace file: found arrays [{shown}], expected 'weights' or 'attention'"
    )
    long = "y" * 50
    assert refusal(archive({long: save(np.ones(1))})) == (
        f"not a trace file: found arrays [{'y' * 40!r}], expected 'weights' or 'attention'"
    )


def test_a_trace_without_a_name_is_called_uploaded():
    members = base()
    del members["name"]
    assert load_trace(io.BytesIO(archive(members))).name == "uploaded"
    members["name"] = save(np.array(""))
    assert load_trace(io.BytesIO(archive(members))).name == "uploaded"
    assert load_trace(io.BytesIO(archive(members)), name="given").name == "given"


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (npy("<f4", (15,), bytes(60), version=(9, 8)), "'weights' has .npy format version 9.8"),
        (
            npy("<f4", (22,), bytes(60)),
            "'weights' declares shape (22,) of float32 (88 bytes), but the archive member holds "
            "60 bytes of data",
        ),
        (
            npy("<f4", (10**30,), bytes(60)),
            f"'weights' declares shape ({10**30},) of float32 (40000000000000000... bytes), but "
            "the archive member holds 60 bytes of data",
        ),
        (npy("<f4", (-2,)), "'weights' has an invalid shape (-2,) in its header"),
        (
            npy("<i4", (15,), bytes(60)),
            "'weights' has dtype '<i4'; a trace holds float16/32/64 weights and strings",
        ),
        (  # a version 1 header is latin-1: the character is read, and refused as a dtype
            npy("", (), header="{'descr': '\xff', 'fortran_order': False, 'shape': (15,), }"),
            "'weights' has dtype '\xff'; a trace holds float16/32/64 weights and strings",
        ),
    ],
)
def test_header_refusals_word_for_word(payload, message):
    assert refusal(with_member("weights", payload)) == message


def test_string_members_of_the_wrong_kind_are_named_for_what_they_must_be():
    assert refusal(with_member("tokens", save(np.zeros(6, np.float32)))) == (
        "'tokens' must be an array of strings, got shape (6,) float32"
    )
    assert refusal(with_member("name", save(np.array(["a", "b"])))) == (
        "'name' must be a string, got shape (2,) <U1"
    )


def test_a_source_that_is_not_a_binary_file_is_refused_as_such():
    class NoTell:
        def read(self, n: int) -> bytes:
            return b"PK"

    with pytest.raises(ValueError, match=r"^cannot read the trace: .*tell"):
        load_trace(NoTell())
    with pytest.raises(ValueError, match=r"^not an \.npz file"):
        load_trace(io.StringIO("PK\x03\x04 text, not bytes"))


def test_a_member_compressed_other_than_numpy_does_is_refused_with_the_method():
    data = archive(base(), zipfile.ZIP_BZIP2)
    assert refusal(data) == (
        "'format.npy' uses compression method 12; a trace's members are stored or deflated (as "
        "numpy writes them)"
    )
