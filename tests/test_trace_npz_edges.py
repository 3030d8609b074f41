"""Two edges of the hardened loader (h2o/trace_npz.py) the corpus leaves open.

A value quoted in a message is cut at 60 characters (a 60-character shape is shown whole, a
61-character one cut to 57 and "..."), and a dense ``attention`` matrix is renormalised by its
rows' float64 sums, as the packed layout is: both layouts of one trace load to the same bits.
"""

from __future__ import annotations

import io
import zipfile
import zlib

import numpy as np
import pytest
from npz_forge import archive, deflated, npy, raw_archive, save, with_member

from h2o import Trace, load_trace


@pytest.mark.parametrize(
    ("digits", "shown"),
    [
        (54, f"(-1, {10**53})"),  # 60 characters: whole
        (55, f"(-1, {10**54})"[:57] + "..."),  # 61: cut
    ],
)
def test_a_quoted_shape_is_cut_at_60_characters(digits, shown):
    shape = (-1, 10 ** (digits - 1))
    with pytest.raises(ValueError) as e:
        load_trace(io.BytesIO(with_member("weights", npy("<f4", shape))))
    assert str(e.value) == f"'weights' has an invalid shape {shown} in its header"


@pytest.mark.parametrize("order", ["C", "F"])
def test_dense_and_packed_files_of_one_trace_load_to_the_same_bits(order):
    rng = np.random.default_rng(7)
    T = 300
    dense = np.zeros((T, T))
    for t in range(1, T):
        r = rng.random(t) ** 3
        dense[t, :t] = r / r.sum()
    dense32 = dense.astype(np.float32)  # rows sum to 1 within float32 rounding
    packed = Trace.from_dense("p", dense32.astype(np.float64), normalize=True).weights
    data = archive({"attention": save(np.asarray(dense32, order=order))})
    assert load_trace(io.BytesIO(data)).weights.tobytes() == packed.tobytes()


@pytest.mark.parametrize("fortran", [False, True])
@pytest.mark.parametrize("T", [6, 300])
def test_a_dense_member_that_ends_early_is_named(fortran, T):
    # an honest header, and a zip entry that claims the whole matrix but holds half of it: the
    # read that reaches its end (the header's, for a small member) names it
    rng = np.random.default_rng(T)
    dense = np.tril(rng.random((T, T)), -1)
    dense[1:] /= dense[1:].sum(axis=1, keepdims=True)
    full = save(np.asarray(dense.astype(np.float32), order="F" if fortran else "C"))
    half = full[: len(full) - T * T * 2]
    entry = ("attention.npy", deflated(half), zlib.crc32(full), len(full), zipfile.ZIP_DEFLATED, 0)
    with pytest.raises(ValueError) as e:
        load_trace(io.BytesIO(raw_archive([entry])))
    assert str(e.value).startswith("damaged .npz file ('attention'): BadZipFile: Bad CRC-32")


def test_bytes_that_are_not_a_zip_are_refused_pointing_to_the_format():
    with pytest.raises(ValueError) as e:
        load_trace(io.BytesIO(b"GIF89a, not a trace"))
    assert str(e.value) == "not an .npz file (a trace is a NumPy .npz archive: traces/README.md)"


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_rows_are_renormalised_by_their_sums_at_the_files_precision(dtype):
    # as Trace.from_packed from the file's own numbers: the sums are taken before float32
    rng = np.random.default_rng(11)
    rows = [np.zeros(0)]
    for t in range(1, 300):
        r = rng.random(t) ** 3
        rows.append(r / r.sum() * (1 + 1e-4))
    packed = np.concatenate(rows).astype(dtype)
    expected = Trace.from_packed("e", packed.astype(np.float64), normalize=True).weights
    loaded = load_trace(io.BytesIO(archive({"weights": save(packed)})))
    assert loaded.weights.tobytes() == expected.tobytes()


def test_a_member_whose_local_header_is_damaged_is_named():
    data = bytearray(archive({"weights": save(np.array([1.0, 0.5, 0.5], dtype=np.float32))}))
    assert data[:4] == b"PK\x03\x04"
    data[3] = 5  # the member's own header, read only when the member is opened
    with pytest.raises(ValueError) as e:
        load_trace(io.BytesIO(bytes(data)))
    assert str(e.value) == (
        "damaged .npz file ('weights'): BadZipFile: Bad magic number for file header"
    )
